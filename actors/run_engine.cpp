#include "actors/run_engine.hpp"

#include <sstream>

#include "actors/identity.hpp"
#include "persistence/assert.hpp"

namespace durin::actors {

namespace {

using persistence::event_kind;
using persistence::event_record;
using persistence::timer_kind;
using persistence::timer_record;

const char* kind_name(event_kind kind) {
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
  }
  return "unknown";
}

bool is_step_event(event_kind kind) {
  return kind == event_kind::step_completed ||
         kind == event_kind::step_attempt_failed ||
         kind == event_kind::step_failed;
}

std::string step_id_of(const std::string& run_id, std::uint64_t call) {
  return run_id + "/" + std::to_string(call);
}

std::string new_attempt_id(engine_random& random) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string id = "att_";
  auto bits = random();
  auto more = random();
  for (int i = 0; i < 16; ++i) {
    id += digits[(bits >> (i * 4)) & 0xf];
  }
  for (int i = 0; i < 8; ++i) {
    id += digits[(more >> (i * 4)) & 0xf];
  }
  return id;
}

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
    default:
      return kind_name(event.kind);
  }
}

}  // namespace

// One random_device per thread seeds the engines: opening the device for
// every activation costs tens of microseconds.
static std::uint64_t seed() {
  thread_local std::mt19937_64 seeds{std::random_device{}()};
  return seeds();
}

std::string encode_payload(const json& value) {
  auto bytes = json::to_msgpack(value);
  return std::string(bytes.begin(), bytes.end());
}

json decode_payload(const std::string& bytes) {
  if (bytes.empty()) {
    return nullptr;
  }
  return json::from_msgpack(bytes);
}

std::uint64_t history_bytes_of(const event_record& event) {
  return 64 + event.name.size() + event.attempt_id.size() + event.data.size() +
         event.error_code.size() + event.error_message.size();
}

run_engine::run_engine(engine_environment env, persistence::run_record record,
                       std::vector<persistence::event_record> history)
    : env_(env),
      record_(std::move(record)),
      history_(std::move(history)),
      random_(seed()) {
  next_sequence_ = history_.size() + 1;
  for (std::size_t i = 0; i < history_.size(); ++i) {
    const auto& event = history_[i];
    history_bytes_ += history_bytes_of(event);
    if (event.kind == event_kind::run_started) {
      has_run_started_ = true;
    }
    if (event.call == 0) {
      continue;
    }
    if (calls_.size() <= event.call) {
      calls_.resize(event.call + 1);
    }
    auto& call = calls_[event.call];
    if (call.events.empty()) {
      call.first_sequence = i + 1;
    }
    call.events.push_back(&event);
    recorded_calls_max_ = std::max(recorded_calls_max_, event.call);
  }
}

run_engine::~run_engine() {
  // Destroying the frame runs the flow's destructors; the engine must ignore
  // whatever they ask for from here on.
  cancelled_ = true;
  flow_.reset();
}

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

void run_engine::start() {
  DURIN_ASSERT(!flow_, "a run engine starts once");
  if (is_terminal(record_.status)) {
    finished_ = true;
    // Its end may have landed although the write was reported failed (the
    // actor reloaded to learn that): whoever waits for the end learns it now.
    output_.finished = true;
    return;
  }
  const auto* entry = env_.flows->find_flow(record_.flow);
  if (entry == nullptr) {
    block("flow '" + record_.flow + "' is not registered on this node");
    return;
  }
  json input;
  try {
    input = decode_payload(record_.input);
  } catch (const json::exception& e) {
    block(std::string("the run's stored input does not decode: ") + e.what());
    return;
  }
  if (!has_run_started_) {
    record_.started_at_ms = now();
    stage({.kind = event_kind::run_started, .at_ms = record_.started_at_ms});
  }
  if (record_.status == run_status::pending) {
    stage_status(run_status::running);
  }
  context_.emplace(*this);
  flow_.emplace(entry->start(*context_, input));
  parked_ = flow_->handle();
  resume_parked();
}

bool run_engine::begin_step(detail::step_call call, detail::call_outcome* out) {
  // Refused before the call is numbered: the flow may catch it, and replay
  // refuses it again at the same place.
  for (const auto& problem :
       {call.options.retry.problem(), call.options.timeouts.problem()}) {
    if (!problem.empty()) {
      throw invalid_argument_error("step '" + call.options.name +
                                   "': " + problem);
    }
  }
  auto number = next_call_++;
  if (stopped() || !check_replay(number, call_kind::step, call.options.name)) {
    return false;
  }
  pending_ = pending_call{};
  pending_.kind = call_kind::step;
  pending_.call = number;
  pending_.out = out;
  pending_.name = call.options.name;
  pending_.retry = call.options.retry;
  pending_.body = std::move(call.body);
  if (const auto* rec = recorded(number)) {
    std::uint32_t failures = 0;
    for (const auto* event : rec->events) {
      if (event->kind == event_kind::step_completed) {
        out->value = decode_payload(event->data);
        pending_ = pending_call{};
        return true;
      }
      if (event->kind == event_kind::step_failed) {
        out->failed = true;
        out->error_code = event->error_code;
        out->error_message = event->error_message;
        out->attempts = event->attempt;
        pending_ = pending_call{};
        return true;
      }
      failures = std::max(failures, event->attempt);
      pending_.due_ms = event->due_ms;
      if (pending_.first_scheduled_ms == 0) {
        // The first attempt's schedule is not recorded; its failure is the
        // nearest record (schedule-to-close is lenient after a restart).
        pending_.first_scheduled_ms = event->at_ms;
      }
    }
    // Attempts failed before: the next one waits for its retry timer, which
    // is durable and reaches this run through the timer service.
    pending_.attempt = failures;
    pending_.waiting_retry = true;
  }
  if (!pending_.body) {
    const auto* entry = env_.flows->find_step(pending_.name);
    if (entry == nullptr) {
      // Deterministic: the same code calls the same unknown name again.
      event_record failed{
          .kind = event_kind::step_failed,
          .call = number,
          .at_ms = now(),
          .name = pending_.name,
          .attempt = 0,
          .error_code = "step-not-found",
          .error_message = "no step registered under '" + pending_.name + "'"};
      out->failed = true;
      out->error_code = failed.error_code;
      out->error_message = failed.error_message;
      stage(std::move(failed));
      flush_then([this] { resume_parked(); });
      return false;
    }
    pending_.retry = entry->retry;
    pending_.task_queue = entry->task_queue;
    pending_.timeouts =
        entry->timeouts.any() ? entry->timeouts : call.options.timeouts;
    if (!pending_.task_queue.empty()) {
      pending_.args = call.args;
    }
    pending_.body = [invoke = entry->invoke, args = std::move(call.args)] {
      return invoke(args);
    };
  } else {
    pending_.timeouts = call.options.timeouts;
  }
  if (!pending_.waiting_retry) {
    pending_.attempt = 0;
    dispatch_when_durable();
  } else {
    stage_status(run_status::waiting);
  }
  return false;
}

bool run_engine::begin_sleep(std::int64_t duration_ms, std::int64_t absolute_ms,
                             detail::call_outcome* out) {
  // context::sleep and sleep_until refuse these first; a due time must never
  // overflow whoever drives the engine.
  if (duration_ms > limits::duration_ms_max ||
      absolute_ms > limits::time_ms_max) {
    throw invalid_argument_error(
        limits::duration_problem("sleep", std::max(duration_ms, absolute_ms)));
  }
  auto number = next_call_++;
  if (stopped() || !check_replay(number, call_kind::sleep, "")) {
    return false;
  }
  pending_ = pending_call{};
  pending_.kind = call_kind::sleep;
  pending_.call = number;
  pending_.out = out;
  if (const auto* rec = recorded(number)) {
    for (const auto* event : rec->events) {
      if (event->kind == event_kind::timer_fired) {
        pending_ = pending_call{};
        return true;
      }
      pending_.due_ms = event->due_ms;
    }
    stage_status(run_status::waiting);
    return false;
  }
  pending_.due_ms = absolute_ms >= 0
                        ? absolute_ms
                        : now() + std::max<std::int64_t>(0, duration_ms);
  timer_record timer{.due_ms = pending_.due_ms,
                     .run_id = record_.id,
                     .call = number,
                     .kind = timer_kind::sleep};
  stage({.kind = event_kind::timer_armed,
         .call = number,
         .at_ms = now(),
         .due_ms = pending_.due_ms});
  staged_.timer_puts.push_back(timer);
  stage_status(run_status::waiting);
  flush_then([this, timer] { output_.timers.push_back(timer); });
  return false;
}

void run_engine::park(std::coroutine_handle<> handle) {
  parked_ = handle;
}

json run_engine::record_value(detail::value_kind kind, std::string_view name,
                              const std::function<json()>& produce) {
  auto number = next_call_++;
  if (stopped() || !check_replay(number, call_kind::value, name)) {
    return json();
  }
  if (const auto* rec = recorded(number)) {
    return decode_payload(rec->events.front()->data);
  }
  json value;
  switch (kind) {
    case detail::value_kind::now:
      value = now();
      break;
    case detail::value_kind::random:
      value = random_();
      break;
    case detail::value_kind::side_effect:
      value = produce();
      break;
  }
  stage({.kind = event_kind::value_recorded,
         .call = number,
         .at_ms = now(),
         .name = std::string(name),
         .data = encode_payload(value)});
  ++staged_values_;
  return value;
}

void run_engine::dispatch_when_durable() {
  // Any value the step's arguments may depend on must be durable first.
  if (values_in_flight_ || staged_values_ > 0) {
    flush_then([this] { dispatch_step(); });
  } else {
    dispatch_step();
  }
}

void run_engine::dispatch_step() {
  if (stopped() || pending_.kind != call_kind::step) {
    return;
  }
  if (pending_.first_scheduled_ms == 0) {
    pending_.first_scheduled_ms = now();
  }
  auto close_ms = pending_.timeouts.schedule_to_close.count();
  if (close_ms > 0 && now() >= pending_.first_scheduled_ms + close_ms) {
    fail_step("timeout-schedule-to-close",
              "the step did not finish within its schedule-to-close timeout "
              "of " +
                  std::to_string(close_ms) + " ms");
    return;
  }
  pending_.attempt += 1;
  pending_.attempt_id = new_attempt_id(random_);
  pending_.dispatched = true;
  pending_.waiting_retry = false;
  step_dispatch dispatch;
  dispatch.call = pending_.call;
  dispatch.info.run_id = record_.id;
  dispatch.info.instance_id =
      instance_of_token(record_.start_token).value_or(record_.id);
  dispatch.info.step_name = pending_.name;
  dispatch.info.step_id = step_id_of(record_.id, pending_.call);
  dispatch.info.attempt_id = pending_.attempt_id;
  dispatch.info.attempt = pending_.attempt;
  dispatch.body = pending_.body;
  dispatch.task_queue = pending_.task_queue;
  dispatch.args = pending_.args;
  dispatch.timeouts = pending_.timeouts;
  dispatch.step_scheduled_at_ms = pending_.first_scheduled_ms;
  output_.dispatches.push_back(std::move(dispatch));
}

void run_engine::fail_step(std::string code, std::string message,
                           std::function<void()> after) {
  auto* out = pending_.out;
  event_record event{.kind = event_kind::step_failed,
                     .call = pending_.call,
                     .at_ms = now(),
                     .name = pending_.name,
                     .attempt = pending_.attempt,
                     .attempt_id = pending_.attempt_id,
                     .error_code = code,
                     .error_message = message};
  pending_.dispatched = false;
  pending_.waiting_retry = false;
  out->failed = true;
  out->error_code = std::move(code);
  out->error_message = "step '" + pending_.name + "' failed after " +
                       std::to_string(pending_.attempt) +
                       (pending_.attempt == 1 ? " attempt: " : " attempts: ") +
                       message;
  out->attempts = pending_.attempt;
  stage(std::move(event));
  stage_status(run_status::running);
  flush_then([this, after = std::move(after)] {
    if (after) {
      after();
    }
    resume_parked();
  });
}

void run_engine::on_step_outcome(std::uint64_t call,
                                 const std::string& attempt_id,
                                 step_outcome outcome,
                                 std::function<void(report_answer)> reply) {
  if (stopped() || pending_.kind != call_kind::step || pending_.call != call ||
      pending_.attempt_id != attempt_id || !pending_.dispatched) {
    // Late or duplicate: the recorded outcome stands.
    if (reply) {
      auto reason = cancelled_ ? "run_cancelled" : "stale_attempt";
      output_.replies.push_back([reply = std::move(reply), reason] {
        reply(report_answer{false, reason});
      });
    }
    return;
  }
  // Null without a reply, so the in-node path's continuations stay small.
  std::function<void()> recorded;
  if (reply) {
    recorded = [this, reply = std::move(reply)] {
      output_.replies.push_back([reply] {
        reply(report_answer{true, std::string()});
      });
    };
  }
  pending_.dispatched = false;
  event_record event{.call = call,
                     .at_ms = now(),
                     .name = pending_.name,
                     .attempt = pending_.attempt,
                     .attempt_id = pending_.attempt_id};
  auto* out = pending_.out;
  using kind = step_outcome::kind;
  // retry_after_ms is at most limits::duration_ms_max: run_step_body and
  // the worker routes refuse more.
  bool attempts_left = pending_.attempt < pending_.retry.max_attempts;
  if (outcome.result == kind::succeeded) {
    event.kind = event_kind::step_completed;
    event.data = encode_payload(outcome.value);
    out->value = std::move(outcome.value);
  } else if (outcome.result == kind::fatal || !attempts_left) {
    event.kind = event_kind::step_failed;
    event.error_code =
        outcome.error_code.empty() ? "step-failed" : outcome.error_code;
    event.error_message = outcome.message;
    out->failed = true;
    out->error_code = event.error_code;
    out->error_message =
        "step '" + pending_.name + "' failed after " +
        std::to_string(pending_.attempt) +
        (pending_.attempt == 1 ? " attempt: " : " attempts: ") +
        outcome.message;
    out->attempts = pending_.attempt;
  } else {
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    auto delay =
        outcome.retry_after_ms >= 0
            ? outcome.retry_after_ms
            : pending_.retry.backoff(pending_.attempt + 1, unit(random_))
                  .count();
    auto close_ms = pending_.timeouts.schedule_to_close.count();
    if (close_ms > 0 &&
        now() + delay >= pending_.first_scheduled_ms + close_ms) {
      // The next attempt could not start before the step's deadline.
      fail_step("timeout-schedule-to-close",
                outcome.message +
                    "; no retry fits the schedule-to-close "
                    "timeout of " +
                    std::to_string(close_ms) + " ms",
                recorded);
      return;
    }
    event.kind = event_kind::step_attempt_failed;
    event.error_code =
        outcome.error_code.empty() ? "attempt-failed" : outcome.error_code;
    event.error_message = outcome.message;
    event.due_ms = now() + delay;
    pending_.due_ms = event.due_ms;
    pending_.waiting_retry = true;
    timer_record timer{.due_ms = event.due_ms,
                       .run_id = record_.id,
                       .call = call,
                       .kind = timer_kind::step_retry};
    stage(std::move(event));
    staged_.timer_puts.push_back(timer);
    stage_status(run_status::waiting);
    if (recorded) {
      flush_then([this, timer, recorded] {
        recorded();
        output_.timers.push_back(timer);
      });
    } else {
      flush_then([this, timer] { output_.timers.push_back(timer); });
    }
    return;
  }
  stage(std::move(event));
  if (recorded) {
    flush_then([this, recorded] {
      recorded();
      resume_parked();
    });
  } else {
    flush_then([this] { resume_parked(); });
  }
}

void run_engine::on_timer(const timer_record& timer) {
  if (stopped() || timer.call != pending_.call) {
    return;
  }
  if (timer.kind == timer_kind::sleep && pending_.kind == call_kind::sleep) {
    stage({.kind = event_kind::timer_fired,
           .call = timer.call,
           .at_ms = now(),
           .due_ms = timer.due_ms});
    staged_.timer_deletes.push_back(timer);
    stage_status(run_status::running);
    pending_.kind = call_kind::none;
    flush_then([this] { resume_parked(); });
  } else if (timer.kind == timer_kind::step_retry &&
             pending_.kind == call_kind::step && pending_.waiting_retry) {
    pending_.waiting_retry = false;
    staged_.timer_deletes.push_back(timer);
    stage_status(run_status::running);
    dispatch_when_durable();
  }
}

void run_engine::resume_parked() {
  if (stopped() || !parked_) {
    return;
  }
  auto handle = std::exchange(parked_, {});
  pending_ = pending_call{};
  handle.resume();
  after_resume();
}

void run_engine::after_resume() {
  if (stopped()) {
    return;
  }
  if (flow_->handle().done()) {
    complete();
    return;
  }
  if (!parked_) {
    // Suspended on something that is not a durin call: it would never wake.
    block("the flow awaited something that is not a durable durin call");
  }
}

void run_engine::complete() {
  auto last_call = next_call_ - 1;
  if (last_call < recorded_calls_max_) {
    block("the flow ended after call " + std::to_string(last_call) +
          " but history records calls up to " +
          std::to_string(recorded_calls_max_));
    return;
  }
  auto& promise = flow_->handle().promise();
  event_record event{.at_ms = now()};
  if (promise.exception) {
    std::string code = "flow-error";
    std::string message;
    try {
      std::rethrow_exception(promise.exception);
    } catch (const step_failed_error& e) {
      code = e.code();
      message = e.what();
    } catch (const invalid_argument_error& e) {
      code = "invalid-argument";
      message = e.what();
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
      message = "the flow threw a non-standard exception";
    }
    event.kind = event_kind::run_failed;
    event.error_code = code;
    event.error_message = message;
    record_.status = run_status::failed;
    record_.error_code = code;
    record_.error_message = message;
  } else {
    event.kind = event_kind::run_completed;
    event.data = encode_payload(promise.value ? *promise.value : json());
    record_.status = run_status::completed;
    record_.output = event.data;
  }
  record_.completed_at_ms = event.at_ms;
  run_dirty_ = true;
  staged_.delete_active = true;
  stage(std::move(event));
  announce_end();
  flush_then([this] { finish(); });
}

void run_engine::finish() {
  finished_ = true;
  output_.finished = true;
  notify_tokens_of_end();
}

void run_engine::cancel(std::string reason, std::string command_id,
                        std::function<void(result<run_info>)> reply) {
  if (finished_ || cancelled_ || ending_) {
    reply(make_error(errc::run_finished,
                     "run " + record_.id + " has already ended as " +
                         std::string(to_string(record_.status))));
    return;
  }
  // A blocked run can be cancelled: cancellation records no call.
  blocked_reason_.clear();
  delete_pending_timer();
  pending_ = pending_call{};
  auto at = now();
  record_.status = run_status::cancelled;
  record_.error_code = "cancelled";
  record_.error_message =
      reason.empty() ? std::string("the run was cancelled") : reason;
  record_.completed_at_ms = at;
  run_dirty_ = true;
  staged_.delete_active = true;
  stage({.kind = event_kind::run_cancelled,
         .at_ms = at,
         .name = std::move(command_id),
         .error_code = "cancelled",
         .error_message = record_.error_message});
  cancelled_ = true;
  announce_end();
  // Continuations of the flow staged before the cancel must not run.
  staged_after_.clear();
  flush_then([this, reply = std::move(reply)] {
    finish();
    output_.replies.push_back([reply, info = info()] { reply(info); });
  });
}

void run_engine::delete_pending_timer() {
  if ((pending_.kind == call_kind::sleep ||
       (pending_.kind == call_kind::step && pending_.waiting_retry)) &&
      pending_.due_ms > 0) {
    staged_.timer_deletes.push_back({.due_ms = pending_.due_ms,
                                     .run_id = record_.id,
                                     .call = pending_.call,
                                     .kind = pending_.kind == call_kind::sleep
                                                 ? timer_kind::sleep
                                                 : timer_kind::step_retry});
  }
}

std::string run_engine::history_overflow() const {
  std::uint64_t adding = 0;
  bool completes = false;
  for (const auto& [sequence, event] : staged_.events) {
    adding += history_bytes_of(event);
    if (event.kind == event_kind::run_failed ||
        event.kind == event_kind::run_cancelled) {
      return {};  // a run's failure or cancellation always fits
    }
    completes = completes || event.kind == event_kind::run_completed;
  }
  // Only the run's end may use the room kept for it.
  auto events_max = env_.history_events_max - (completes ? 0 : 1);
  auto bytes_max =
      env_.history_bytes_max - (completes ? 0 : history_end_reserve_bytes);
  auto events = next_sequence_ - 1;
  auto bytes = history_bytes_ + adding;
  if (events <= events_max && bytes <= bytes_max) {
    return {};
  }
  // Named after the largest event the write would add: the one that does
  // not fit, most often.
  const event_record* largest = &staged_.events.front().second;
  for (const auto& [sequence, event] : staged_.events) {
    if (history_bytes_of(event) > history_bytes_of(*largest)) {
      largest = &event;
    }
  }
  std::string writing = kind_name(largest->kind);
  if (!largest->name.empty() && largest->kind != event_kind::hook_payload &&
      largest->kind != event_kind::hook_created) {
    writing += " '" + largest->name + "'";
  }
  auto held = std::to_string(staged_.events.front().first - 1) + " events, " +
              std::to_string(history_bytes_) + " bytes";
  if (events > events_max) {
    return "the run's history reached its limit of " +
           std::to_string(env_.history_events_max) +
           " events (history_events_max) at " + writing + " (it holds " + held +
           ")";
  }
  return "the run's history reached its limit of " +
         std::to_string(env_.history_bytes_max) +
         " bytes (history_bytes_max) at " + writing + " of " +
         std::to_string(history_bytes_of(*largest)) + " bytes (it holds " +
         held + ")";
}

void run_engine::fail_for_history_limit(std::string message) {
  // Nothing staged is durable or seen outside the flow yet (dispatches,
  // replies and timers wait for this write): it is dropped, and the run
  // ends instead. Deletions of durable timers stay.
  next_sequence_ = staged_.events.front().first;
  auto deletes = std::move(staged_.timer_deletes);
  staged_ = commit_plan{};
  staged_.timer_deletes = std::move(deletes);
  staged_after_.clear();
  staged_values_ = 0;
  delete_pending_timer();
  pending_ = pending_call{};
  ending_ = true;
  auto at = now();
  record_.status = run_status::failed;
  record_.output.clear();
  record_.error_code = "history-limit-exceeded";
  record_.error_message = message;
  record_.completed_at_ms = at;
  run_dirty_ = true;
  staged_.delete_active = true;
  stage({.kind = event_kind::run_failed,
         .at_ms = at,
         .error_code = "history-limit-exceeded",
         .error_message = std::move(message)});
  announce_end();
  staged_after_.push_back([this] { finish(); });
}

void run_engine::stage(event_record event) {
  staged_.events.emplace_back(next_sequence_++, std::move(event));
}

void run_engine::stage_status(run_status status) {
  if (record_.status != status) {
    record_.status = status;
    run_dirty_ = true;
  }
}

void run_engine::flush_then(std::function<void()> continuation) {
  staged_after_.push_back(std::move(continuation));
  if (!in_flight_) {
    emit_commit();
  }
}

void run_engine::emit_commit() {
  DURIN_ASSERT(!in_flight_, "at most one write in flight per run");
  if (!ending_ && !staged_.events.empty()) {
    if (auto overflow = history_overflow(); !overflow.empty()) {
      fail_for_history_limit(std::move(overflow));
    }
  }
  if (run_dirty_) {
    staged_.run = record_;
    run_dirty_ = false;
  }
  if (staged_.empty()) {
    // Nothing new to write: what the continuations wait for is durable.
    auto ready = std::move(staged_after_);
    staged_after_.clear();
    for (auto& continuation : ready) {
      continuation();
    }
    return;
  }
  for (const auto& [sequence, event] : staged_.events) {
    history_bytes_ += history_bytes_of(event);
  }
  in_flight_ = true;
  values_in_flight_ = staged_values_ > 0;
  staged_values_ = 0;
  output_.commit = std::move(staged_);
  staged_ = commit_plan{};
  in_flight_after_ = std::move(staged_after_);
  staged_after_.clear();
}

void run_engine::on_committed(const status& outcome) {
  DURIN_ASSERT(in_flight_, "a commit outcome without a write in flight");
  in_flight_ = false;
  values_in_flight_ = false;
  if (!outcome.ok()) {
    // Indefinite: the write may or may not have landed. Only a reload from
    // storage knows; the actor discards this engine.
    storage_failed_ = true;
    in_flight_after_.clear();
    return;
  }
  auto ready = std::move(in_flight_after_);
  in_flight_after_.clear();
  for (auto& continuation : ready) {
    continuation();
  }
  // Staged changes that nobody waits on ride with the next write.
  if (!in_flight_ && !staged_after_.empty()) {
    emit_commit();
  }
}

engine_output run_engine::take_output() {
  auto out = std::move(output_);
  output_ = engine_output{};
  return out;
}

bool run_engine::can_passivate() const {
  if (stopped() || in_flight_ || !staged_.empty() || run_dirty_ ||
      !staged_after_.empty()) {
    return false;
  }
  bool on_timer = pending_.kind == call_kind::sleep ||
                  (pending_.kind == call_kind::step && pending_.waiting_retry);
  return on_timer && pending_.due_ms - now() > env_.passivate_after.count();
}

bool run_engine::idle_on_hook() const {
  if (stopped() || in_flight_ || !staged_.empty() || run_dirty_ ||
      !staged_after_.empty() || pending_.kind != call_kind::hook_next) {
    return false;
  }
  for (const auto& entry : hooks_) {
    if (entry.state == hook_entry::claim::pending) {
      return false;  // a claim's answer is on its way
    }
  }
  const auto& entry = hooks_.at(pending_.hook);
  return entry.state == hook_entry::claim::owned && entry.subscribed &&
         !entry.disposed;
}

std::optional<timer_record> run_engine::waiting_timer() const {
  if (stopped()) {
    return std::nullopt;
  }
  if (pending_.kind == call_kind::sleep ||
      (pending_.kind == call_kind::step && pending_.waiting_retry)) {
    return timer_record{.due_ms = pending_.due_ms,
                        .run_id = record_.id,
                        .call = pending_.call,
                        .kind = pending_.kind == call_kind::sleep
                                    ? timer_kind::sleep
                                    : timer_kind::step_retry};
  }
  return std::nullopt;
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
  return out;
}

history_event describe_event(const std::string& run_id, std::uint64_t sequence,
                             const event_record& event) {
  history_event out;
  out.sequence = sequence;
  out.kind = kind_name(event.kind);
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
