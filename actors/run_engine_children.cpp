// Runs that make runs, in the run engine: child runs (ctx.start_child),
// continue-as-new, and version markers (ctx.version).
//
// A child's call records two values: its identity ("child:<flow>": run id,
// command id, instance id, parent_close), durable before the start is sent,
// then the start's outcome ("child-started"). A replay that finds the
// identity without the outcome sends the same start again; the run actor
// first looks whether that run exists, and the child's start token (its
// instance id, else its command id) refuses a second admission. So a
// parent has one child per call, across crashes.
#include "actors/run_engine.hpp"
#include "durin/limits.hpp"

namespace durin::actors {

namespace {

using persistence::event_kind;

constexpr std::uint8_t parent_close_abandon = 3;

std::string child_command_id(const std::string& parent, std::uint64_t call) {
  return "child:" + parent + ":" + std::to_string(call);
}

// The flow's view of a recorded start outcome.
void read_child_outcome(const json& outcome, detail::call_outcome* out) {
  if (outcome.contains("error")) {
    const auto& error = outcome.at("error");
    out->failed = true;
    out->error_code = error.value("code", std::string("child-start-failed"));
    out->error_message = error.value("message", std::string());
    out->value = json{{"ownerRunId", error.value("ownerRunId", "")}};
    return;
  }
  out->failed = false;
  out->value = json{{"runId", outcome.at("runId")}};
}

}  // namespace

bool run_engine::begin_child(detail::child_request request,
                             detail::call_outcome* out) {
  auto number = next_call_++;
  std::string name = "child:" + request.flow;
  if (stopped() || !check_replay(number, call_kind::value, name)) {
    return false;
  }
  child_start start;
  start.call = number;
  start.flow = std::move(request.flow);
  start.input = std::move(request.input);
  start.parent_close = request.parent_close;
  start.memo = std::move(request.memo);
  start.search = std::move(request.search);
  if (const auto* rec = recorded(number)) {
    auto identity = decode_payload(rec->events.front()->data);
    start.run_id = identity.at("runId").get<std::string>();
    start.instance_id = identity.value("instanceId", std::string());
    start.command_id = identity.value("commandId", std::string());
    start.parent_close = identity.value("parentClose", std::uint8_t{1});
    if (rec->events.size() > 1) {
      auto outcome = decode_payload(rec->events[1]->data);
      read_child_outcome(outcome, out);
      if (!out->failed && start.parent_close != parent_close_abandon) {
        children_.push_back({start.run_id, start.parent_close});
      }
      return true;
    }
  } else {
    start.instance_id = std::move(request.instance_id);
    start.command_id = child_command_id(record_.id, number);
    start.run_id =
        env_.draw_child_run_id
            ? env_.draw_child_run_id(start.instance_id, start.command_id)
            : std::string();
    stage({.kind = event_kind::value_recorded,
           .call = number,
           .at_ms = now(),
           .name = name,
           .data = encode_payload(json{{"runId", start.run_id},
                                       {"flow", start.flow},
                                       {"instanceId", start.instance_id},
                                       {"commandId", start.command_id},
                                       {"parentClose", start.parent_close}})});
    ++staged_values_;
  }
  pending_ = pending_call::of(call_kind::child, number, out);
  pending_.child = start;
  // The run stays `running` meanwhile (a start is quick), so a restart
  // activates it at once and it sends the start again.
  // Sent only once its identity is durable.
  flush_then([this, start] { output_.child_starts.push_back(start); });
  return false;
}

void run_engine::on_child_started(const child_started& started) {
  if (stopped() || pending_.kind != call_kind::child ||
      pending_.call != started.call || !pending_.child) {
    return;
  }
  if (started.indefinite) {
    output_.child_retries.push_back(started.call);
    return;
  }
  json outcome;
  if (started.code.empty()) {
    outcome = json{{"runId", started.child_run_id}};
    if (pending_.child->parent_close != parent_close_abandon) {
      children_.push_back({started.child_run_id, pending_.child->parent_close});
    }
  } else {
    outcome = json{{"error",
                    {{"code", started.code},
                     {"message", started.message},
                     {"ownerRunId", started.owner_run_id}}}};
  }
  stage({.kind = event_kind::value_recorded,
         .call = pending_.call,
         .at_ms = now(),
         .name = "child-started",
         .data = encode_payload(outcome)});
  ++staged_values_;
  read_child_outcome(outcome, pending_.out);
  resume_parked();
}

void run_engine::retry_child(std::uint64_t call) {
  if (stopped() || pending_.kind != call_kind::child || pending_.call != call ||
      !pending_.child) {
    return;
  }
  output_.child_starts.push_back(*pending_.child);
}

int run_engine::version(std::string_view change_id, int min_supported,
                        int max_supported) {
  if (min_supported > max_supported) {
    throw invalid_argument_error(
        "ctx.version('" + std::string(change_id) + "'): min_supported " +
        std::to_string(min_supported) + " is above max_supported " +
        std::to_string(max_supported));
  }
  std::string name = "version:" + std::string(change_id);
  auto number = next_call_;
  if (stopped()) {
    return version_default;
  }
  const auto* rec = recorded(number);
  int found = 0;
  if (rec != nullptr) {
    const auto& first = *rec->events.front();
    if (first.kind != event_kind::value_recorded || first.name != name) {
      // The run recorded another call here: it began before the change,
      // and the marker takes no place in its history.
      found = version_default;
    } else {
      ++next_call_;
      found = decode_payload(first.data).get<int>();
    }
  } else if (number <= recorded_calls_max_) {
    found = version_default;  // a history with a gap here predates it too
  } else {
    ++next_call_;
    stage({.kind = event_kind::value_recorded,
           .call = number,
           .at_ms = now(),
           .name = name,
           .data = encode_payload(json(max_supported))});
    ++staged_values_;
    return max_supported;
  }
  if (found < min_supported || found > max_supported) {
    block("change '" + std::string(change_id) + "': the run follows version " +
          std::to_string(found) + ", the code supports " +
          std::to_string(min_supported) + " to " +
          std::to_string(max_supported));
  }
  return found;
}

void run_engine::continue_as_new() {
  if (!record_.start_token.empty() && !handed_over_) {
    output_.hand_over = record_.start_token;  // on_hand_over goes on
    return;
  }
  auto input = encode_payload(*continue_input_);
  auto at = now();
  if (input.size() > limits::payload_bytes_max) {
    record_.status = run_status::failed;
    record_.error_code = "invalid-argument";
    record_.error_message = "ctx.continue_as_new: the input is " +
                            std::to_string(input.size()) +
                            " bytes encoded; the limit is " +
                            std::to_string(limits::payload_bytes_max);
    record_.completed_at_ms = at;
    run_dirty_ = true;
    staged_.delete_active = true;
    stage({.kind = event_kind::run_failed,
           .at_ms = at,
           .error_code = record_.error_code,
           .error_message = record_.error_message});
    continue_input_.reset();  // its start token ends with it
    announce_end();
    flush_then([this] { finish(); });
    return;
  }
  persistence::run_record next;
  next.id = env_.draw_run_id_here ? env_.draw_run_id_here() : std::string();
  next.flow = record_.flow;
  next.status = run_status::pending;
  next.input = std::move(input);
  next.created_at_ms = at;
  next.tenant = record_.tenant;
  next.spec_version = env_.spec_version;
  next.parent_run_id = record_.parent_run_id;
  next.parent_close = record_.parent_close;
  next.continued_from = record_.id;
  // The same business process goes on: it keeps being found by its memo
  // and search attributes.
  next.memo = record_.memo;
  next.search = record_.search;
  std::optional<persistence::token_record> successor_token;
  if (handed_over_ && handed_over_->ok) {
    auto token = handed_over_->record;
    token.owner_run = next.id;
    token.owner_call = 0;
    token.start_hook = true;
    token.created_at_ms = at;
    token.previous_owner.clear();
    token.previous_owner_last_payload = 0;
    token.owner_spec_version = next.spec_version;
    next.start_token = record_.start_token;
    successor_token = std::move(token);
  }
  auto output = encode_payload(json{{"continuedAs", next.id}});
  record_.status = run_status::completed;
  record_.output = output;
  record_.completed_at_ms = at;
  run_dirty_ = true;
  staged_.delete_active = true;
  staged_.successor = std::make_unique<commit_plan::successor_admission>(
      std::move(next), std::move(successor_token));
  stage({.kind = event_kind::run_completed, .at_ms = at, .data = output});
  announce_end();
  flush_then([this] { finish(); });
}

bool run_engine::on_hand_over(const hand_over_ready& ready) {
  if (stopped() || !continue_input_ || handed_over_ ||
      ready.token != record_.start_token) {
    return false;
  }
  handed_over_ = std::make_unique<hand_over_ready>(ready);
  continue_as_new();
  return true;
}

}  // namespace durin::actors
