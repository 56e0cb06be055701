// The run engine's core: building it from a history, starting the flow,
// sleeps and recorded values, staging events into one write at a time, the
// run's end (completion, cancellation, the history limit) and what the run
// actor asks of its state. Replay checks are in run_engine_replay.cpp, steps
// in run_engine_steps.cpp, hooks in run_engine_hooks.cpp, the user-facing
// forms of runs and events in run_engine_views.cpp.
#include "actors/run_engine.hpp"

#include "actors/event_names.hpp"
#include "persistence/assert.hpp"

namespace durin::actors {

namespace {

using persistence::event_kind;
using persistence::event_record;
using persistence::timer_kind;
using persistence::timer_record;

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

std::string encode_memo(const json& memo, std::string_view what,
                        std::string& encoded) {
  encoded = memo.is_null() ? std::string() : encode_payload(memo);
  if (encoded.size() <= limits::memo_bytes_max) {
    return {};
  }
  return std::string(what) + " is " + std::to_string(encoded.size()) +
         " bytes encoded; the limit is " +
         std::to_string(limits::memo_bytes_max);
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
    : env_(std::move(env)),
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
  index_messages();
}

run_engine::~run_engine() {
  // Destroying the frame runs the flow's destructors; the engine must ignore
  // whatever they ask for from here on.
  cancelled_ = true;
  flow_.reset();
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

bool run_engine::begin_sleep(std::int64_t duration_ms, std::int64_t absolute_ms,
                             detail::call_outcome* out) {
  refuse_in_query("ctx.sleep");
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
  pending_ = pending_call::of(call_kind::sleep, number, out);
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
  refuse_in_query("a recorded value (now, random, side_effect)");
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
  if (promise.exception && !continue_input_) {
    try {
      std::rethrow_exception(promise.exception);
    } catch (detail::continue_as_new_request& request) {
      continue_input_ = std::move(request.input);
    } catch (...) {
    }
  }
  if (continue_input_) {
    continue_as_new();
    return;
  }
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
  output_.close_children = children_;
  notify_tokens_of_end();
  drop_update_waiters();
}

void run_engine::cancel(std::string reason, std::string command_id,
                        std::function<void(result<run_info>)> reply,
                        bool terminate) {
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
  const char* code = terminate ? "terminated" : "cancelled";
  record_.status = terminate ? run_status::terminated : run_status::cancelled;
  record_.error_code = code;
  record_.error_message =
      reason.empty() ? "the run was " + std::string(code) : reason;
  record_.completed_at_ms = at;
  run_dirty_ = true;
  staged_.delete_active = true;
  // A termination is a run-cancelled event whose error code says so.
  stage({.kind = event_kind::run_cancelled,
         .at_ms = at,
         .name = std::move(command_id),
         .error_code = code,
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
  std::string writing = event_kind_name(largest->kind);
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
      !staged_after_.empty() || has_update_waiters()) {
    return false;
  }
  bool on_timer = pending_.kind == call_kind::sleep ||
                  (pending_.kind == call_kind::step && pending_.waiting_retry);
  return on_timer && pending_.due_ms - now() > env_.passivate_after.count();
}

bool run_engine::idle_on_hook() const {
  if (stopped() || in_flight_ || !staged_.empty() || run_dirty_ ||
      !staged_after_.empty() || has_update_waiters()) {
    return false;
  }
  if (pending_.kind == call_kind::message_read) {
    return true;  // a message re-activates the run, which replays
  }
  if (pending_.kind != call_kind::hook_next) {
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
}  // namespace durin::actors
