// Steps in the run engine: a step call replayed from its recorded outcome or
// dispatched as a new attempt once everything before it is durable; each
// attempt's outcome recorded once (late and duplicate reports are refused);
// retries scheduled on a durable timer with the policy's backoff, within the
// step's schedule-to-close timeout.
#include <random>

#include "actors/attempt_id.hpp"
#include "actors/event_names.hpp"
#include "actors/identity.hpp"
#include "actors/run_engine.hpp"
#include "persistence/assert.hpp"

namespace durin::actors {

namespace {

using persistence::event_kind;
using persistence::event_record;
using persistence::timer_kind;
using persistence::timer_record;

// A fresh attempt id naming its run (actors/attempt_id.hpp), so that a
// report reaching any node of a cluster finds the node serving the run.
std::string new_attempt_id(engine_random& random, const std::string& run_id) {
  static constexpr char digits[] = "0123456789abcdef";
  static_assert(attempt_random_digits == 24, "16 digits, then 8 more");
  std::string random_hex;
  auto bits = random();
  auto more = random();
  for (int i = 0; i < 16; ++i) {
    random_hex += digits[(bits >> (i * 4)) & 0xf];
  }
  for (int i = 0; i < 8; ++i) {
    random_hex += digits[(more >> (i * 4)) & 0xf];
  }
  return make_attempt_id(random_hex, run_id);
}
}  // namespace

bool run_engine::begin_step(detail::step_call call, detail::call_outcome* out) {
  refuse_in_query("ctx.step");
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
  pending_ = pending_call::of(call_kind::step, number, out);
  pending_.name = call.options.name;
  pending_.retry = call.options.retry;
  pending_.body = std::move(call.body);
  DURIN_ASSERT(
      call.session <= sessions_.size() && (call.session == 0 || !pending_.body),
      "a step of a worker session is a registered step of a "
      "session this run opened");
  pending_.session = call.session;
  if (const auto* rec = recorded(number)) {
    if (replay_step(*rec, out)) {
      return true;
    }
  }
  if (!pending_.body) {
    if (!bind_registered_step(call)) {
      return false;
    }
  } else {
    pending_.timeouts = call.options.timeouts;
  }
  if (const auto* session = pending_session();
      session != nullptr && !session->failure.empty()) {
    // Deterministic: replay reads the failure that made the session fail
    // before it reaches this call.
    fail_unstarted_step(session_failed_code,
                        "worker session " + std::to_string(pending_.session) +
                            " failed before this step: " + session->failure);
    return false;
  }
  if (!pending_.waiting_retry) {
    pending_.attempt = 0;
    dispatch_when_durable();
  } else {
    stage_status(run_status::waiting);
  }
  return false;
}

bool run_engine::replay_step(const recorded_call& rec,
                             detail::call_outcome* out) {
  std::uint32_t failures = 0;
  for (const auto* event : rec.events) {
    learn_session(*event);
    if (event->kind == event_kind::session_bound) {
      continue;
    }
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
  return false;
}

bool run_engine::bind_registered_step(detail::step_call& call) {
  const auto* entry = env_.flows->find_step(pending_.name);
  if (entry == nullptr) {
    // Deterministic: the same code calls the same unknown name again.
    fail_unstarted_step("step-not-found",
                        "no step registered under '" + pending_.name + "'");
    return false;
  }
  pending_.retry = entry->retry;
  pending_.task_queue = entry->task_queue;
  if (const auto* session = pending_session()) {
    pending_.task_queue = session->task_queue;
  }
  pending_.timeouts =
      entry->timeouts.any() ? entry->timeouts : call.options.timeouts;
  if (!pending_.task_queue.empty()) {
    pending_.args = call.args;
  }
  pending_.body = [invoke = entry->invoke, args = std::move(call.args)] {
    return invoke(args);
  };
  return true;
}

void run_engine::fail_unstarted_step(std::string code, std::string message) {
  event_record failed{.kind = event_kind::step_failed,
                      .call = pending_.call,
                      .at_ms = now(),
                      .name = pending_.name,
                      .attempt = 0,
                      .error_code = std::move(code),
                      .error_message = std::move(message)};
  auto* out = pending_.out;
  out->failed = true;
  out->error_code = failed.error_code;
  out->error_message = failed.error_message;
  stage(std::move(failed));
  flush_then([this] { resume_parked(); });
}

std::uint32_t run_engine::open_session(std::string task_queue,
                                       std::int64_t worker_timeout_ms) {
  refuse_in_query("ctx.session");
  sessions_.push_back(session_state{.task_queue = std::move(task_queue),
                                    .worker_timeout_ms = worker_timeout_ms});
  return static_cast<std::uint32_t>(sessions_.size());
}

run_engine::session_state* run_engine::pending_session() {
  if (pending_.session == 0) {
    return nullptr;
  }
  return &sessions_[pending_.session - 1];
}

void run_engine::learn_session(const event_record& event) {
  auto* session = pending_session();
  if (session == nullptr) {
    return;
  }
  if (event.kind == event_kind::session_bound) {
    try {
      session->worker =
          decode_payload(event.data).at("worker").get<std::string>();
    } catch (const json::exception&) {
      // An undecodable binding binds nothing: the next report binds again.
    }
  } else if (event.kind == event_kind::step_failed &&
             event.error_code == session_failed_code &&
             session->failure.empty()) {
    session->failure = event.error_message;
  }
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
  pending_.attempt_id = new_attempt_id(random_, record_.id);
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
  if (const auto* session = pending_session()) {
    dispatch.session_worker = session->worker;
    dispatch.worker_timeout_ms = session->worker_timeout_ms;
  }
  output_.dispatches.push_back(std::move(dispatch));
  if (!pending_.task_queue.empty() && !in_flight_ &&
      (run_dirty_ || !staged_.empty())) {
    // A worker's step is seen from outside (task lists, the worker's own
    // calls) and may hold it for long: what the run did before it (its
    // start, its status running) is written now, beside the dispatch, not
    // only with the step's outcome. A local step's rides with its outcome.
    emit_commit();
  }
}

void run_engine::fail_step(std::string code, std::string message,
                           std::function<void()> after) {
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
  set_step_failure(std::move(code), message);
  stage(std::move(event));
  stage_status(run_status::running);
  flush_then([this, after = std::move(after)] {
    if (after) {
      after();
    }
    resume_parked();
  });
}

void run_engine::set_step_failure(std::string code,
                                  const std::string& message) {
  auto* out = pending_.out;
  out->failed = true;
  out->error_code = std::move(code);
  out->error_message = "step '" + pending_.name + "' failed after " +
                       std::to_string(pending_.attempt) +
                       (pending_.attempt == 1 ? " attempt: " : " attempts: ") +
                       message;
  out->attempts = pending_.attempt;
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
  if (auto* session = pending_session(); session != nullptr &&
                                         session->worker.empty() &&
                                         !outcome.worker.empty()) {
    // The session's first report binds it, in the outcome's own write.
    event_record bound = event;
    bound.kind = event_kind::session_bound;
    bound.data = encode_payload(
        json{{"session", pending_.session}, {"worker", outcome.worker}});
    learn_session(bound);
    stage(std::move(bound));
  }
  using kind = step_outcome::kind;
  bool attempts_left = pending_.attempt < pending_.retry.max_attempts;
  if (outcome.result == kind::succeeded) {
    event.kind = event_kind::step_completed;
    event.data = encode_payload(outcome.value);
    pending_.out->value = std::move(outcome.value);
  } else if (outcome.result == kind::fatal || !attempts_left) {
    event.kind = event_kind::step_failed;
    event.error_code =
        outcome.error_code.empty() ? "step-failed" : outcome.error_code;
    event.error_message = outcome.message;
    set_step_failure(event.error_code, outcome.message);
    learn_session(event);
  } else {
    schedule_step_retry(std::move(event), outcome, std::move(recorded));
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

void run_engine::schedule_step_retry(event_record event,
                                     const step_outcome& outcome,
                                     std::function<void()> recorded) {
  // retry_after_ms is at most limits::duration_ms_max: run_step_body and
  // the worker routes refuse more.
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto delay =
      outcome.retry_after_ms >= 0
          ? outcome.retry_after_ms
          : pending_.retry.backoff(pending_.attempt + 1, unit(random_)).count();
  auto close_ms = pending_.timeouts.schedule_to_close.count();
  if (close_ms > 0 && now() + delay >= pending_.first_scheduled_ms + close_ms) {
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
                     .call = event.call,
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
}

}  // namespace durin::actors
