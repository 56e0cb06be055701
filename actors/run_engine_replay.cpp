// Replay in the run engine: the flow's N-th durable call must ask for what
// the history recorded for call N. A call of another kind or name, or one
// missing from a history that records later calls, blocks the run without
// writing anything, naming both sides.
#include "actors/event_names.hpp"
#include "actors/run_engine.hpp"

namespace durin::actors {

namespace {

using persistence::event_kind;
using persistence::event_record;

// How the replay check describes a call.
std::string describe_call(std::string_view kind, std::string_view name) {
  std::string text(kind);
  if (!name.empty()) {
    text += " '";
    text += name;
    text += "'";
  }
  return text;
}

std::string recorded_call_text(const event_record& event) {
  switch (event.kind) {
    case event_kind::step_completed:
    case event_kind::step_attempt_failed:
    case event_kind::step_failed:
    case event_kind::session_bound:
      return describe_call("step", event.name);
    case event_kind::timer_armed:
    case event_kind::timer_fired:
      return "sleep";
    case event_kind::value_recorded:
      return describe_call("value", event.name);
    case event_kind::hook_created:
      return describe_call("hook", event.name);
    case event_kind::hook_payload:
    case event_kind::hook_lost:
      return describe_call("hook read", event.name);
    case event_kind::hook_disposed:
      return describe_call("hook disposal", event.name);
    case event_kind::message_read:
      return describe_call("message read", event.name);
    case event_kind::memo_set:
      return "set_memo";
    case event_kind::search_attributes_upserted:
      return "upsert_search_attributes";
    case event_kind::search_attributes_removed:
      return "remove_search_attributes";
    default:
      return event_kind_name(event.kind);
  }
}
}  // namespace

const run_engine::recorded_call* run_engine::recorded(
    std::uint64_t call) const {
  if (call < calls_.size() && !calls_[call].events.empty()) {
    return &calls_[call];
  }
  return nullptr;
}

// True when call `call` may proceed as `kind`/`name`; blocks the run and
// returns false when the history recorded something else.
bool run_engine::check_replay(std::uint64_t call, call_kind kind,
                              std::string_view name) {
  const auto* rec = recorded(call);
  std::string now_asked;
  switch (kind) {
    case call_kind::step:
      now_asked = describe_call("step", name);
      break;
    case call_kind::sleep:
      now_asked = "sleep";
      break;
    case call_kind::hook_create:
      now_asked = describe_call("hook", name);
      break;
    case call_kind::hook_next:
      now_asked = describe_call("hook read", name);
      break;
    case call_kind::hook_dispose:
      now_asked = describe_call("hook disposal", name);
      break;
    case call_kind::message_read:
      now_asked = describe_call("message read", name);
      break;
    case call_kind::memo:
      now_asked = "set_memo";
      break;
    case call_kind::search:
      now_asked = "upsert_search_attributes";
      break;
    case call_kind::search_remove:
      now_asked = "remove_search_attributes";
      break;
    default:
      now_asked = describe_call("value", name);
      break;
  }
  if (rec == nullptr) {
    if (call <= recorded_calls_max_) {
      block("call " + std::to_string(call) +
            ": history records no event for it but records later calls; "
            "the code now calls " +
            now_asked);
      return false;
    }
    return true;
  }
  const auto& first = *rec->events.front();
  bool same_kind = false;
  switch (kind) {
    case call_kind::step:
      same_kind = is_step_event(first.kind);
      break;
    case call_kind::sleep:
      same_kind = first.kind == event_kind::timer_armed ||
                  first.kind == event_kind::timer_fired;
      break;
    case call_kind::hook_create:
      same_kind = first.kind == event_kind::hook_created;
      break;
    case call_kind::hook_next:
      same_kind = first.kind == event_kind::hook_payload ||
                  first.kind == event_kind::hook_lost;
      break;
    case call_kind::hook_dispose:
      same_kind = first.kind == event_kind::hook_disposed;
      break;
    case call_kind::message_read:
      same_kind = first.kind == event_kind::message_read;
      break;
    case call_kind::memo:
      same_kind = first.kind == event_kind::memo_set;
      break;
    case call_kind::search:
      same_kind = first.kind == event_kind::search_attributes_upserted;
      break;
    case call_kind::search_remove:
      same_kind = first.kind == event_kind::search_attributes_removed;
      break;
    default:
      same_kind = first.kind == event_kind::value_recorded;
      break;
  }
  // A webhook's token is random: only the record knows it.
  bool any_name = kind == call_kind::hook_create && name.empty();
  if (!same_kind || (!any_name && first.name != name)) {
    block("call " + std::to_string(call) + " (history sequence " +
          std::to_string(rec->first_sequence) + "): history recorded " +
          recorded_call_text(first) + ", the code now calls " + now_asked);
    return false;
  }
  return true;
}

void run_engine::block(std::string reason) {
  if (blocked()) {
    return;
  }
  blocked_reason_ = std::move(reason);
  // Held, not guessed at: nothing of this activation is written.
  staged_ = commit_plan{};
  staged_values_ = 0;
  run_dirty_ = false;
  staged_after_.clear();
  pending_ = pending_call{};
}
}  // namespace durin::actors
