// Memos and search attributes in the run engine (ctx.set_memo,
// ctx.upsert_search_attributes, ctx.remove_search_attributes): each call is a
// durable call recorded by one event, and the run's record carries the result
// in the same write, so a list or a get sees exactly what the history says.
// Replay records nothing again: the record already holds the last value.
#include "actors/event_names.hpp"
#include "actors/run_engine.hpp"

namespace durin::actors {

using persistence::event_kind;

void run_engine::set_memo(json memo) {
  refuse_in_query("ctx.set_memo");
  // Checked before the call is numbered: a refused call takes no place in
  // the history, on every replay alike.
  std::string encoded;
  if (auto problem = encode_memo(memo, "ctx.set_memo: the memo", encoded);
      !problem.empty()) {
    throw invalid_argument_error(problem);
  }
  auto number = next_call_++;
  if (stopped() || !check_replay(number, call_kind::memo, "memo") ||
      recorded(number) != nullptr) {
    return;
  }
  record_.memo = encoded;
  record_change(event_kind::memo_set, number, "memo", memo);
}

void run_engine::upsert_search_attributes(search_attributes attributes) {
  refuse_in_query("ctx.upsert_search_attributes");
  const char* what = "ctx.upsert_search_attributes";
  if (auto problem = search_attributes_problem(what, attributes);
      !problem.empty()) {
    throw invalid_argument_error(problem);
  }
  auto merged = record_.search;
  for (const auto& [name, value] : attributes) {
    merged[name] = value;
  }
  if (merged.size() > limits::search_attributes_max) {
    throw invalid_argument_error(std::string(what) + ": a run has at most " +
                                 std::to_string(limits::search_attributes_max) +
                                 " search attributes; this would make " +
                                 std::to_string(merged.size()));
  }
  auto number = next_call_;
  if (stopped()) {
    return;
  }
  if (!check_replay(number, call_kind::search, "search-attributes") ||
      recorded(number) != nullptr) {
    ++next_call_;
    return;
  }
  // Live only: a replay's types were fixed when it was recorded. A refusal
  // numbers nothing, so the flow may catch it and go on. A type the
  // cluster has not agreed yet is no fault of the flow, and this thread
  // must not wait for etcd: the run stops here and is reloaded after a
  // backoff (the agreement goes on meanwhile), to ask again from the same
  // point.
  if (env_.claim_search_types) {
    if (auto claimed = env_.claim_search_types(attributes); !claimed) {
      if (claimed.error().code == errc::unavailable) {
        reload_wanted_ = true;
        return;
      }
      throw invalid_argument_error(std::string(what) + ": " +
                                   claimed.error().message);
    }
  }
  ++next_call_;
  record_.search = std::move(merged);
  record_change(event_kind::search_attributes_upserted, number,
                "search-attributes", durin::to_json(attributes));
}

void run_engine::remove_search_attributes(std::vector<std::string> names) {
  refuse_in_query("ctx.remove_search_attributes");
  const char* what = "ctx.remove_search_attributes";
  if (auto problem = search_attribute_names_problem(what, names);
      !problem.empty()) {
    throw invalid_argument_error(problem);
  }
  auto number = next_call_++;
  if (stopped() ||
      !check_replay(number, call_kind::search_remove,
                    "search-attributes-removed") ||
      recorded(number) != nullptr) {
    return;
  }
  for (const auto& name : names) {
    record_.search.erase(name);
  }
  record_change(event_kind::search_attributes_removed, number,
                "search-attributes-removed", json(names));
}

void run_engine::record_change(event_kind kind, std::uint64_t call,
                               std::string name, const json& data) {
  run_dirty_ = true;  // the run's record goes in the same write
  stage({.kind = kind,
         .call = call,
         .at_ms = now(),
         .name = std::move(name),
         .data = encode_payload(data)});
  ++staged_values_;  // a step after it waits for it, as for values
  flush_then([] {});
}

}  // namespace durin::actors
