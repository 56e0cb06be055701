// The message side of the run engine: messages and updates recorded as they
// arrive (run-level events, not calls), reads of them as durable calls
// replayed like any other, updates' validation and results, and queries,
// which record nothing.
#include <algorithm>

#include "actors/identity.hpp"
#include "actors/run_engine.hpp"

namespace durin::actors {

namespace {

using persistence::event_kind;
using persistence::event_record;

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) {
    out += out.empty() ? "" : ",";
    out += name;
  }
  return out;
}

json decode_or_null(const std::string& bytes) {
  try {
    return decode_payload(bytes);
  } catch (const json::exception&) {
    return nullptr;
  }
}

// What a read of a message gives the flow (detail::to_inbound reads it).
json inbound_value(const std::string& name, json payload,
                   std::uint64_t sequence, const std::string& update_id) {
  json out = {
      {"name", name}, {"payload", std::move(payload)}, {"sequence", sequence}};
  if (!update_id.empty()) {
    out["update"] = update_id;
  }
  return out;
}

std::string key_of(const std::string& scope, const std::string& key) {
  return scope + reserved_token_mark + key;
}

}  // namespace

void run_engine::index_messages() {
  for (std::size_t i = 0; i < history_.size(); ++i) {
    const auto& event = history_[i];
    if (event.kind != event_kind::message_received &&
        event.kind != event_kind::message_read &&
        event.kind != event_kind::update_completed) {
      continue;
    }
    auto data = decode_or_null(event.data);
    if (!data.is_object()) {
      continue;
    }
    if (event.kind == event_kind::message_received) {
      auto update = data.value("update", std::string());
      talk().unread[i + 1] = {
          event.name, encode_payload(data.value("payload", json())), update};
      if (!update.empty()) {
        talk().update_ids[i + 1] = update;  // completable after a restart too
      }
    } else if (event.kind == event_kind::message_read) {
      talk().unread.erase(data.value("sequence", std::uint64_t{0}));
    } else {
      talk().update_results[data.value("sequence", std::uint64_t{0})] =
          encode_payload(data.value("result", json()));
    }
  }
}

void run_engine::refuse_in_query(std::string_view call) const {
  if (in_query_) {
    query_changed_state_ = true;
    throw invalid_argument_error(std::string(call) +
                                 " inside a query or an update's validation: "
                                 "those may only read the flow's state");
  }
}

bool run_engine::message_read(const std::vector<std::string>& names,
                              detail::call_outcome* out) {
  refuse_in_query("ctx.receive");
  if (names.empty()) {
    throw invalid_argument_error("ctx.receive needs at least one name");
  }
  for (const auto& name : names) {
    if (auto problem = message_name_problem(name); !problem.empty()) {
      throw invalid_argument_error(problem);
    }
  }
  auto name = joined(names);
  auto number = next_call_++;
  if (stopped() || !check_replay(number, call_kind::message_read, name)) {
    return false;
  }
  if (const auto* rec = recorded(number)) {
    auto sequence = decode_or_null(rec->events.front()->data)
                        .value("sequence", std::uint64_t{0});
    if (sequence == 0 || sequence > history_.size() ||
        history_[sequence - 1].kind != event_kind::message_received) {
      block("call " + std::to_string(number) + " read history sequence " +
            std::to_string(sequence) + ", which records no message");
      return false;
    }
    const auto& event = history_[sequence - 1];
    auto data = decode_or_null(event.data);
    out->value = inbound_value(event.name, data.value("payload", json()),
                               sequence, data.value("update", std::string()));
    return true;
  }
  pending_ = pending_call::of(call_kind::message_read, number, out);
  pending_.names = names;
  if (try_next_message(out)) {
    pending_ = pending_call{};
    return true;
  }
  stage_status(run_status::waiting);
  // The status waiting is written now: nothing else may come to carry it.
  flush_then([] {});
  return false;
}

// Decides the pending read from the messages unread now. REQUIRES: pending_
// describes that read. True (and the read staged) when one matched.
bool run_engine::try_next_message(detail::call_outcome* out) {
  const auto& names = pending_.names;
  auto found = std::find_if(
      talk().unread.begin(), talk().unread.end(), [&](auto& entry) {
        return std::find(names.begin(), names.end(), entry.second.name) !=
               names.end();
      });
  if (found == talk().unread.end()) {
    return false;
  }
  auto [sequence, message] = *found;
  talk().unread.erase(found);
  stage({.kind = event_kind::message_read,
         .call = pending_.call,
         .at_ms = now(),
         .name = joined(names),
         .data = encode_payload({{"sequence", sequence}})});
  ++staged_values_;  // effects wait until the read is durable
  stage_status(run_status::running);
  out->value = inbound_value(message.name, decode_or_null(message.payload),
                             sequence, message.update_id);
  return true;
}

void run_engine::update_validator(
    std::string name, std::function<std::string(const json&)> validate) {
  refuse_in_query("ctx.on_update");
  if (auto problem = message_name_problem(name); !problem.empty()) {
    throw invalid_argument_error(problem);
  }
  talk().validators[std::move(name)] = std::move(validate);
}

void run_engine::query_handler(std::string name,
                               std::function<json(const json&)> answer) {
  refuse_in_query("ctx.on_query");
  if (auto problem = message_name_problem(name); !problem.empty()) {
    throw invalid_argument_error(problem);
  }
  talk().queries[std::move(name)] = std::move(answer);
}

void run_engine::update_complete(std::uint64_t sequence, json result) {
  refuse_in_query("ctx.complete_update");
  if (stopped() || talk().update_results.count(sequence) != 0) {
    return;  // replayed: recorded already
  }
  auto id = talk().update_ids.find(sequence);
  if (id == talk().update_ids.end()) {
    throw invalid_argument_error("ctx.complete_update: history sequence " +
                                 std::to_string(sequence) +
                                 " is not an update this run received");
  }
  auto bytes = encode_payload(result);
  json data = {{"sequence", sequence}, {"result", std::move(result)}};
  stage({.kind = event_kind::update_completed,
         .at_ms = now(),
         .name = id->second,
         .data = encode_payload(data)});
  talk().update_results[sequence] = bytes;
  flush_then([this, sequence, bytes] {
    auto waiting = talk().update_waiters.find(sequence);
    if (waiting == talk().update_waiters.end()) {
      return;
    }
    message_receipt receipt{record_.id, sequence, true, bytes};
    for (auto& reply : waiting->second) {
      output_.replies.push_back([reply, receipt] { reply(receipt); });
    }
    talk().update_waiters.erase(waiting);
  });
}

void run_engine::on_message(
    message_request request,
    std::function<void(result<message_receipt>)> reply) {
  if (finished_ || cancelled_ || ending_) {
    reply(make_error(errc::run_finished,
                     "run " + record_.id + " has already ended as " +
                         std::string(to_string(record_.status)) +
                         "; it takes no more messages"));
    return;
  }
  if (blocked()) {
    reply(make_error(
        errc::nondeterministic_replay,
        "run " + record_.id +
            " is held for replay and records nothing: " + blocked_reason_));
    return;
  }
  json payload = decode_or_null(request.payload);
  if (request.update) {
    auto validator = talk().validators.find(request.name);
    if (validator == talk().validators.end()) {
      reply(make_error(errc::handler_not_found,
                       "run " + record_.id + " (flow " + record_.flow +
                           ") has no update named '" + request.name +
                           "' (a flow installs them with ctx.on_update)"));
      return;
    }
    bool changed = false;
    auto reason =
        read_only([&] { return validator->second(payload); }, changed);
    if (changed) {
      reason = "its validation tried to change the flow's state";
    }
    if (!reason.empty()) {
      reply(make_error(errc::update_rejected, "update '" + request.name +
                                                  "' of run " + record_.id +
                                                  " was rejected: " + reason));
      return;
    }
  }
  // A message must never be what fails its run: refused when the history
  // has no room for it and for what the flow does next.
  auto bytes = 64 + request.name.size() + request.payload.size() +
               request.key.size() * 2 + 16;
  if (next_sequence_ + 3 > env_.history_events_max ||
      history_bytes_ + bytes + 2 * history_end_reserve_bytes >
          env_.history_bytes_max) {
    reply(make_error(errc::invalid_argument,
                     "run " + record_.id +
                         "'s history has no room for a message of " +
                         std::to_string(bytes) +
                         " bytes (history_events_max, history_bytes_max)"));
    return;
  }
  auto sequence = next_sequence_;
  json data = {{"payload", payload}};
  if (!request.key.empty()) {
    data[request.update ? "update" : "key"] = request.key;
    staged_.message_keys.push_back(
        {request.scope, request.key, {sequence, record_.id}});
    talk().message_keys[key_of(request.scope, request.key)] = sequence;
  }
  stage({.kind = event_kind::message_received,
         .at_ms = now(),
         .name = request.name,
         .data = encode_payload(data)});
  talk().unread[sequence] = {request.name, request.payload,
                             request.update ? request.key : std::string()};
  if (request.update) {
    talk().update_ids[sequence] = request.key;
  }
  message_receipt receipt{record_.id, sequence};
  bool waits = request.update && request.wait_completed && may_wait();
  if (waits) {
    talk().update_waiters[sequence].push_back(reply);
  }
  if (pending_.kind == call_kind::message_read &&
      try_next_message(pending_.out)) {
    resume_parked();  // what it does next rides in the same write
  }
  flush_then([this, waits, reply, receipt] {
    if (!waits) {
      output_.replies.push_back([reply, receipt] { reply(receipt); });
    }
  });
}

bool run_engine::answer_repeat(
    const message_request& request,
    const std::function<void(result<message_receipt>)>& reply) {
  auto known = talk().message_keys.find(key_of(request.scope, request.key));
  if (known == talk().message_keys.end()) {
    return false;
  }
  message_receipt receipt{record_.id, known->second};
  // Answered once the first one's write is durable, as the first is.
  flush_then([this, request, receipt, reply] {
    answer_recorded(request, receipt, reply);
  });
  return true;
}

void run_engine::answer_recorded(
    const message_request& request, message_receipt receipt,
    std::function<void(result<message_receipt>)> reply) {
  auto send = [this, reply](result<message_receipt> answer) {
    output_.replies.push_back(
        [reply, answer = std::move(answer)] { reply(answer); });
  };
  if (!request.update) {
    send(std::move(receipt));
    return;
  }
  if (auto done = talk().update_results.find(receipt.sequence);
      done != talk().update_results.end()) {
    receipt.completed = true;
    receipt.result = done->second;
    send(std::move(receipt));
    return;
  }
  if (!request.wait_completed || !may_wait()) {
    send(std::move(receipt));  // its handle, as accepted
    return;
  }
  if (stopped()) {
    send(make_error(errc::run_finished,
                    "run " + record_.id + " ended before completing update '" +
                        request.key + "'"));
    return;
  }
  talk().update_waiters[receipt.sequence].push_back(std::move(reply));
}

bool run_engine::may_wait() const {
  if (!talk_) {
    return true;
  }
  std::size_t waiting = 0;
  for (const auto& [sequence, callers] : talk_->update_waiters) {
    waiting += callers.size();
  }
  return waiting < update_waiters_max;
}

void run_engine::drop_update_waiters() {
  if (!talk_) {
    return;  // no update was ever asked of this activation
  }
  for (auto& [sequence, waiting] : talk().update_waiters) {
    for (auto& reply : waiting) {
      output_.replies.push_back([reply, id = record_.id] {
        reply(make_error(errc::run_finished,
                         "run " + id + " ended before completing the update"));
      });
    }
  }
  talk().update_waiters.clear();
}

std::string run_engine::read_only(const std::function<std::string()>& handler,
                                  bool& changed_state) {
  std::string outcome;
  in_query_ = true;
  try {
    outcome = handler();
  } catch (const std::exception& e) {
    outcome = e.what();
  }
  in_query_ = false;
  changed_state = std::exchange(query_changed_state_, false);
  return outcome;
}

result<json> run_engine::query(const std::string& name, const json& args) {
  if (finished_ || cancelled_ || ending_) {
    return make_error(errc::run_finished,
                      "run " + record_.id + " has ended as " +
                          std::string(to_string(record_.status)) +
                          "; only a run that has not ended answers queries");
  }
  if (blocked()) {
    return make_error(
        errc::nondeterministic_replay,
        "run " + record_.id +
            " is held for replay; its state is not known: " + blocked_reason_);
  }
  auto handler = talk().queries.find(name);
  if (handler == talk().queries.end()) {
    return make_error(errc::handler_not_found,
                      "run " + record_.id + " (flow " + record_.flow +
                          ") has no query named '" + name +
                          "' (a flow installs them with ctx.on_query)");
  }
  json answer;
  bool changed = false;
  auto failure = read_only(
      [&] {
        answer = handler->second(args);
        return std::string();
      },
      changed);
  if (changed) {
    return make_error(errc::query_refused,
                      "query '" + name + "' of run " + record_.id +
                          " was refused: its handler tried to change the "
                          "flow's state (" +
                          failure + ")");
  }
  if (!failure.empty()) {
    return make_error(errc::flow_error, "query '" + name + "' of run " +
                                            record_.id + " failed: " + failure);
  }
  return answer;
}

std::optional<std::string> recorded_update_result(
    const std::vector<persistence::event_record>& history,
    std::uint64_t sequence) {
  for (const auto& event : history) {
    if (event.kind != event_kind::update_completed) {
      continue;
    }
    auto data = decode_or_null(event.data);
    if (data.is_object() &&
        data.value("sequence", std::uint64_t{0}) == sequence) {
      return encode_payload(data.value("result", json()));
    }
  }
  return std::nullopt;
}

}  // namespace durin::actors
