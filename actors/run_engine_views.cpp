// The views of a run: the user-facing forms of a run record and of a
// recorded event (runs API, history API, CLI), and how events and steps are
// named there (actors/event_names.hpp).
#include "actors/event_names.hpp"
#include "actors/identity.hpp"
#include "actors/run_engine.hpp"

namespace durin::actors {

using persistence::event_kind;
using persistence::event_record;

const char* event_kind_name(event_kind kind) {
  switch (kind) {
    case event_kind::run_started:
      return "run-started";
    case event_kind::step_completed:
      return "step-completed";
    case event_kind::step_attempt_failed:
      return "step-attempt-failed";
    case event_kind::step_failed:
      return "step-failed";
    case event_kind::timer_armed:
      return "timer-armed";
    case event_kind::timer_fired:
      return "timer-fired";
    case event_kind::value_recorded:
      return "value-recorded";
    case event_kind::run_completed:
      return "run-completed";
    case event_kind::run_failed:
      return "run-failed";
    case event_kind::run_cancelled:
      return "run-cancelled";
    case event_kind::hook_created:
      return "hook-created";
    case event_kind::hook_payload:
      return "hook-payload";
    case event_kind::hook_disposed:
      return "hook-disposed";
    case event_kind::hook_lost:
      return "hook-lost";
    case event_kind::message_received:
      return "message-received";
    case event_kind::message_read:
      return "message-read";
    case event_kind::update_completed:
      return "update-completed";
    case event_kind::memo_set:
      return "memo-set";
    case event_kind::search_attributes_upserted:
      return "search-attributes-upserted";
    case event_kind::search_attributes_removed:
      return "search-attributes-removed";
    case event_kind::session_bound:
      return "session-bound";
  }
  return "unknown";
}

bool is_step_event(event_kind kind) {
  return kind == event_kind::step_completed ||
         kind == event_kind::step_attempt_failed ||
         kind == event_kind::step_failed || kind == event_kind::session_bound;
}

std::string step_id_of(const std::string& run_id, std::uint64_t call) {
  return run_id + "/" + std::to_string(call);
}

run_info run_engine::info() const {
  auto out = describe_run(record_);
  if (blocked()) {
    out.status = run_status::blocked;
    out.blocked_reason = blocked_reason_;
  }
  return out;
}

run_info describe_run(const persistence::run_record& record) {
  run_info out;
  out.id = record.id;
  out.parent_run_id = record.parent_run_id;
  out.continued_from = record.continued_from;
  auto instance = instance_of_token(record.start_token);
  out.instance_id = instance.value_or(record.id);
  // A caller's hook token only: a command id's token is internal.
  if (!instance && !is_reserved_token(record.start_token)) {
    out.start_token = record.start_token;
  }
  out.flow = record.flow;
  out.status = record.status;
  try {
    out.input = decode_payload(record.input);
    out.output = decode_payload(record.output);
  } catch (const json::exception&) {
    out.input = nullptr;  // shown as null; the record itself decoded
  }
  if (!record.error_code.empty()) {
    out.error = run_error{record.error_code, record.error_message};
  }
  out.created_at_ms = record.created_at_ms;
  out.started_at_ms = record.started_at_ms;
  out.completed_at_ms = record.completed_at_ms;
  out.schedule_id = record.schedule_id;
  out.occurrence_ms = record.occurrence_ms;
  try {
    out.memo = decode_payload(record.memo);
  } catch (const json::exception&) {
    out.memo = nullptr;  // as for the input: the record itself decoded
  }
  out.search_attributes = record.search;
  return out;
}

history_event describe_event(const std::string& run_id, std::uint64_t sequence,
                             const event_record& event) {
  history_event out;
  out.sequence = sequence;
  out.kind = event_kind_name(event.kind);
  if (event.kind == event_kind::run_cancelled &&
      event.error_code == "terminated") {
    out.kind = "run-terminated";  // a forced stop (runtime::terminate)
  }
  out.at_ms = event.at_ms;
  out.detail = json::object();
  if (event.call != 0) {
    out.detail["call"] = event.call;
  }
  if (!event.name.empty()) {
    // A cancel records the command that asked for it under its name.
    out.detail[event.kind == event_kind::run_cancelled ? "commandId" : "name"] =
        event.name;
  }
  if (is_step_event(event.kind)) {
    out.detail["stepId"] = step_id_of(run_id, event.call);
    out.detail["attempt"] = event.attempt;
    if (!event.attempt_id.empty()) {
      out.detail["attemptId"] = event.attempt_id;
    }
  }
  if (!event.data.empty()) {
    try {
      out.detail[event.kind == event_kind::run_completed ? "output" : "value"] =
          decode_payload(event.data);
    } catch (const json::exception&) {
      out.detail["value"] = "<undecodable>";
    }
  }
  if (!event.error_code.empty() || !event.error_message.empty()) {
    out.detail["error"] = {{"code", event.error_code},
                           {"message", event.error_message}};
  }
  if (event.due_ms != 0) {
    out.detail["dueAtMs"] = event.due_ms;
  }
  return out;
}
}  // namespace durin::actors
