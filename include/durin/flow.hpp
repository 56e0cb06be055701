// Flows are C++20 coroutines returning durin::flow<T>. A flow's progress is
// durable: every call through its durin::context is recorded once, and after
// a restart the coroutine is replayed from that history to where it stopped.
// Flow code must be deterministic: it reads time, randomness and other outside
// state only through ctx.now(), ctx.random() and ctx.side_effect(). A flow may
// co_await other flow<T> coroutines (sub-flows) that take the same context.
//
//   durin::flow<json> review(durin::context& ctx, json input) {
//     auto score = co_await ctx.step("score", score_order, input["orderId"]);
//     co_await ctx.sleep(std::chrono::hours(1));
//     co_return json{{"score", score}};
//   }
#pragma once

#include <chrono>
#include <concepts>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "durin/detail/driver.hpp"
#include "durin/hook.hpp"
#include "durin/ids.hpp"
#include "durin/json.hpp"
#include "durin/limits.hpp"
#include "durin/message.hpp"
#include "durin/step.hpp"

namespace durin {

// What context::version gives a run whose history predates the change.
inline constexpr int version_default = 0;

template <class T = json>
class flow;

namespace detail {

template <class T>
struct flow_promise_base {
  std::coroutine_handle<> continuation;
  std::exception_ptr exception;

  std::suspend_always initial_suspend() noexcept { return {}; }

  struct final_awaiter {
    bool await_ready() noexcept { return false; }
    template <class Promise>
    std::coroutine_handle<> await_suspend(
        std::coroutine_handle<Promise> self) noexcept {
      auto next = self.promise().continuation;
      return next ? next : std::noop_coroutine();
    }
    void await_resume() noexcept {}
  };
  final_awaiter final_suspend() noexcept { return {}; }
  void unhandled_exception() noexcept { exception = std::current_exception(); }
};

template <class T>
struct flow_promise : flow_promise_base<T> {
  std::optional<T> value;
  flow<T> get_return_object() noexcept;
  template <class U>
  requires std::convertible_to<U&&, T>
  void return_value(U&& result) { value.emplace(std::forward<U>(result)); }
};

template <>
struct flow_promise<void> : flow_promise_base<void> {
  flow<void> get_return_object() noexcept;
  void return_void() noexcept {}
};

}  // namespace detail

// A lazily started coroutine. Awaiting it runs it to completion (through any
// number of durable suspensions) and yields its value or rethrows.
template <class T>
class [[nodiscard]] flow {
 public:
  using promise_type = detail::flow_promise<T>;
  using handle_type = std::coroutine_handle<promise_type>;

  explicit flow(handle_type handle) noexcept : handle_(handle) {}
  flow(flow&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  flow& operator=(flow&& other) noexcept {
    if (this != &other) {
      destroy();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  flow(const flow&) = delete;
  flow& operator=(const flow&) = delete;
  ~flow() { destroy(); }

  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> caller) {
    handle_.promise().continuation = caller;
    return handle_;
  }
  T await_resume() {
    auto& promise = handle_.promise();
    if (promise.exception) {
      std::rethrow_exception(promise.exception);
    }
    if constexpr (!std::is_void_v<T>) {
      return std::move(*promise.value);
    }
  }

  // For the engine that drives a top-level flow.
  handle_type handle() const noexcept { return handle_; }

 private:
  void destroy() noexcept {
    if (handle_) {
      handle_.destroy();
      handle_ = {};
    }
  }
  handle_type handle_;
};

namespace detail {
template <class T>
flow<T> flow_promise<T>::get_return_object() noexcept {
  return flow<T>{std::coroutine_handle<flow_promise<T>>::from_promise(*this)};
}
inline flow<void> flow_promise<void>::get_return_object() noexcept {
  return flow<void>{
      std::coroutine_handle<flow_promise<void>>::from_promise(*this)};
}

[[noreturn]] inline void raise_step_failure(const std::string& step_name,
                                            const call_outcome& outcome) {
  throw step_failed_error(step_name, outcome.error_code, outcome.error_message,
                          outcome.attempts);
}

}  // namespace detail

// Awaiting a step yields its result (R) or raises step_failed_error.
template <class R>
class [[nodiscard]] step_awaitable {
 public:
  step_awaitable(detail::driver& driver, detail::step_call call)
      : driver_(&driver), call_(std::move(call)) {}

  bool await_ready() {
    name_ = call_.options.name;
    return driver_->begin_step(std::move(call_), &outcome_);
  }
  void await_suspend(std::coroutine_handle<> handle) { driver_->park(handle); }
  R await_resume() {
    if (outcome_.failed) {
      detail::raise_step_failure(name_, outcome_);
    }
    return detail::convert_result<R>(outcome_.value);
  }

 private:
  detail::driver* driver_;
  detail::step_call call_;
  std::string name_;
  detail::call_outcome outcome_;
};

// Awaiting a sleep returns once the durable timer has fired.
class [[nodiscard]] sleep_awaitable {
 public:
  sleep_awaitable(detail::driver& driver, std::int64_t duration_ms,
                  std::int64_t absolute_ms)
      : driver_(&driver),
        duration_ms_(duration_ms),
        absolute_ms_(absolute_ms) {}

  bool await_ready() {
    return driver_->begin_sleep(duration_ms_, absolute_ms_, &outcome_);
  }
  void await_suspend(std::coroutine_handle<> handle) { driver_->park(handle); }
  void await_resume() const noexcept {}

 private:
  detail::driver* driver_;
  std::int64_t duration_ms_;
  std::int64_t absolute_ms_;
  detail::call_outcome outcome_;
};

// How a worker session runs (see worker_session).
struct session_options {
  session_options(const char* queue) : task_queue(queue) {}
  session_options(std::string queue) : task_queue(std::move(queue)) {}
  session_options(std::string queue, std::chrono::milliseconds timeout)
      : task_queue(std::move(queue)), worker_timeout(timeout) {}

  std::string task_queue;  // 1..128 bytes
  // How long the session's worker may go without a poll, heartbeat or
  // report while a step of the session waits for it, before the session
  // counts it lost. 1 ms..limits::duration_ms_max.
  std::chrono::milliseconds worker_timeout{60'000};
};

// A worker session: a series of registered steps that all run on one
// remote worker, for work that must stay where its files or its device
// are. The session binds to the worker that reports its first step's
// first outcome, recorded with that outcome; every later step of it waits
// on the session's task queue for that worker alone. When the worker is
// lost (a session step's lease lapses, or a step waits longer than the
// worker timeout without hearing from it), the step fails with
// step_failed_error code session_failed_code, and so does every later
// step of the session, at once; the flow may open another session.
// Steps run at least once as always: a step the lost worker ran may have
// had its effects. Valid only inside the flow that opened it.
class worker_session {
 public:
  worker_session(detail::driver& driver, std::uint32_t number) noexcept
      : driver_(&driver), number_(number) {}

  // Runs the step registered under `options.name` on the session's worker,
  // on the session's task queue whatever queue it is registered to; its
  // retries and timeouts are the registration's.
  template <class R = json, class... Args>
  step_awaitable<R> step(step_options options, Args&&... args) {
    json packed = json::array();
    (packed.push_back(json(std::forward<Args>(args))), ...);
    return step_awaitable<R>(
        *driver_,
        detail::step_call{std::move(options), {}, std::move(packed), number_});
  }

  // The session's number in its run, from 1 in the order opened.
  std::uint32_t number() const noexcept { return number_; }

 private:
  detail::driver* driver_;
  std::uint32_t number_;
};

// The flow's handle on its run. Every method records what it returns, so a
// replay sees the same values. Valid only inside the flow it was passed to.
class context {
 public:
  explicit context(detail::driver& driver) noexcept : driver_(&driver) {}

  const std::string& run_id() const { return driver_->run_id(); }

  // Runs `fn(args...)` as a step on the step executor (args are copied) and
  // yields its result, recorded. `fn` may throw fatal_error or
  // retryable_error to steer retries.
  template <class F, class... Args>
  requires std::invocable < std::decay_t<F>
  &, std::decay_t<Args>&... >
         auto step(step_options options, F&& fn, Args&&... args) {
    using R = std::invoke_result_t<std::decay_t<F>&, std::decay_t<Args>&...>;
    detail::step_call call{std::move(options), {}, json()};
    call.body = [fn = std::forward<F>(fn),
                 ... args = std::forward<Args>(args)]() mutable -> json {
      if constexpr (std::is_void_v<R>) {
        std::invoke(fn, args...);
        return json();
      } else {
        return json(std::invoke(fn, args...));
      }
    };
    return step_awaitable<R>(*driver_, std::move(call));
  }

  // Runs the step registered under `options.name` with JSON-converted args.
  template <class R = json, class... Args>
  step_awaitable<R> step(step_options options, Args&&... args) requires(
      sizeof...(Args) == 0 ||
      !std::invocable<
          std::decay_t<std::tuple_element_t<0, std::tuple<Args...>>>&>) {
    json packed = json::array();
    (packed.push_back(json(std::forward<Args>(args))), ...);
    return step_awaitable<R>(
        *driver_, detail::step_call{std::move(options), {}, std::move(packed)});
  }

  // Opens a worker session on a task queue (see worker_session). Throws
  // invalid_argument_error for a queue name or a worker timeout out of
  // range, opening nothing.
  worker_session session(session_options options) {
    if (auto problem =
            id_problem("ctx.session: a task queue name", options.task_queue,
                       limits::task_queue_bytes_max);
        !problem.empty()) {
      throw invalid_argument_error(problem);
    }
    auto timeout_ms = options.worker_timeout.count();
    auto problem =
        limits::duration_problem("ctx.session: the worker timeout", timeout_ms);
    if (problem.empty() && timeout_ms < 1) {
      problem = "ctx.session: the worker timeout must be at least 1 ms";
    }
    if (!problem.empty()) {
      throw invalid_argument_error(problem);
    }
    return worker_session(
        *driver_,
        driver_->open_session(std::move(options.task_queue), timeout_ms));
  }

  // A durable timer `duration` from now (a negative one fires at once).
  // Throws invalid_argument_error beyond limits::duration_ms_max (36,500 days),
  // recording nothing.
  sleep_awaitable sleep(std::chrono::milliseconds duration) {
    if (duration.count() > limits::duration_ms_max) {
      throw invalid_argument_error(
          limits::duration_problem("ctx.sleep", duration.count()));
    }
    return sleep_awaitable(*driver_, duration.count(), -1);
  }
  // A durable timer at `when` (a past time fires at once). Throws
  // invalid_argument_error for a time before the Unix epoch or after
  // limits::time_ms_max (9999-12-31T23:59:59.999Z), recording nothing.
  sleep_awaitable sleep_until(std::chrono::system_clock::time_point when) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  when.time_since_epoch())
                  .count();
    if (ms < 0 || ms > limits::time_ms_max) {
      throw invalid_argument_error(
          "ctx.sleep_until: a time of " + std::to_string(ms) +
          " ms since the Unix epoch is outside 0 to " +
          std::to_string(limits::time_ms_max) + " (9999-12-31T23:59:59.999Z)");
    }
    return sleep_awaitable(*driver_, 0, ms);
  }

  // The run's clock, recorded.
  std::chrono::system_clock::time_point now() {
    auto ms = driver_->record_value(detail::value_kind::now, "now", nullptr)
                  .get<std::int64_t>();
    return std::chrono::system_clock::time_point(std::chrono::milliseconds(ms));
  }

  // A hook on `options.token` (see durin/hook.hpp). With the run's own start
  // token it binds to the start hook (then metadata, min_retention and force
  // must be unset: invalid_argument_error names the one that is not).
  template <class T = json>
  hook<T> create_hook(hook_options options) {
    return hook<T>(*driver_, driver_->hook_create(to_request(options)));
  }
  template <class T = json>
  scoped_hook<T> create_scoped_hook(hook_options options) {
    return scoped_hook<T>(*driver_, driver_->hook_create(to_request(options)));
  }
  // A hook with a random, unguessable token that the HTTP gateway resumes
  // from a plain POST /v1/webhooks/{token}.
  template <class T = json>
  hook<T> create_webhook() {
    detail::hook_request request;
    request.webhook = true;
    return hook<T>(*driver_, driver_->hook_create(std::move(request)));
  }

  // Another run of this tenant, to ask for its status or await its return
  // value (see durin/run_handle.hpp).
  run_handle run(std::string run_id) {
    return run_handle(*driver_, std::move(run_id));
  }

  // The next message named `name` (see durin/message.hpp), converted to T;
  // messages sent before the flow asks are kept, in order.
  template <class T = json>
  detail::message_awaitable<T> message(std::string name) {
    return {*driver_, std::move(name)};
  }
  // The messages named `name`, one per next().
  template <class T = json>
  message_stream<T> messages(std::string name) {
    return {*driver_, std::move(name)};
  }
  // The oldest unread message or update of any of `names`.
  detail::receive_awaitable receive(std::vector<std::string> names) {
    return {*driver_, std::move(names)};
  }
  // Accepts updates named `name` when `validate(args)` answers "" (else the
  // update is rejected with that reason and nothing is recorded). Accepted
  // updates are read like messages (receive) and completed with
  // complete_update. `validate` must not change the flow's state.
  void on_update(std::string name,
                 std::function<std::string(const json& args)> validate) {
    driver_->update_validator(std::move(name), std::move(validate));
  }
  // Answers queries named `name` from the flow's state; `answer` must only
  // read (a durable call inside it refuses the query).
  void on_query(std::string name,
                std::function<json(const json& args)> answer) {
    driver_->query_handler(std::move(name), std::move(answer));
  }
  // Records an update's result; its caller gets it once durable.
  void complete_update(const inbound& update, json result) {
    driver_->update_complete(update.sequence, std::move(result));
  }

  // Starts a child run of `flow` (see durin/run_handle.hpp); yields its
  // handle once its admission is durable. Parameters are views and
  // references, and the options have an overload instead of a default:
  // g++ 12 mishandles non-trivial temporaries of a co_await expression.
  detail::child_awaitable start_child(std::string_view flow, const json& input,
                                      const child_options& options) {
    detail::child_request request;
    request.flow = std::string(flow);
    request.input = input;
    request.instance_id = options.instance_id;
    request.parent_close = static_cast<std::uint8_t>(options.parent_close);
    request.memo = options.memo;
    request.search = options.search;
    return {*driver_, std::move(request)};
  }
  detail::child_awaitable start_child(std::string_view flow,
                                      const json& input) {
    return start_child(flow, input, child_options{});
  }

  // Ends this run (completed, its output {"continuedAs": new run id}) and
  // starts a new run of the same flow, with `input` and a fresh history,
  // in one atomic write. The new run keeps the instance id, the start hook
  // and the start command: they are handed over, never free in between.
  // Does not return (it throws a value the engine catches as the flow
  // ends: do not catch it with `catch (...)`).
  [[noreturn]] void continue_as_new(json input) {
    throw detail::continue_as_new_request{std::move(input)};
  }

  // The version of change `change_id` this run follows, for code that
  // changes while runs are in flight:
  //
  //   if (ctx.version("charge-before-ship", 0, 1) == 1) { new order }
  //   else { old order }
  //
  // A run that reaches the call for the first time records `max_supported`
  // and gets it on every replay. A run whose history was written before the
  // call existed (it records another call at this place) gets 0
  // (durin::version_default) and the call records nothing, so its replay
  // does not diverge. A version outside min..max holds the run as blocked
  // (code that no longer supports it).
  int version(std::string_view change_id, int min_supported,
              int max_supported) {
    return driver_->version(change_id, min_supported, max_supported);
  }

  // Replaces the run's memo (shown with the run: GET /v1/runs/{id},
  // run_info::memo). Recorded in the history and written with the run's
  // record at once; the flow goes on without waiting. A replay records
  // nothing again (the record holds the last memo). Throws
  // invalid_argument_error beyond limits::memo_bytes_max (64 KiB encoded),
  // recording nothing.
  void set_memo(json memo) { driver_->set_memo(std::move(memo)); }

  // Adds `attributes` to the run's search attributes, replacing those of
  // the same names, as set_memo records the memo. Throws
  // invalid_argument_error for a bad name or value, beyond the limits, or
  // for a type other than the one the tenant's attribute has, recording
  // nothing.
  //
  //   ctx.upsert_search_attributes(
  //       {{"stage", durin::search_value::keyword("shipped")},
  //        {"items", durin::search_value::of_int(3)}});
  void upsert_search_attributes(search_attributes attributes) {
    driver_->upsert_search_attributes(std::move(attributes));
  }

  // Removes the attributes of these names from the run (one it does not
  // have is no error), recorded as set_memo records the memo: a query no
  // longer matches the run on them. The tenant's type of a name stays.
  // Throws invalid_argument_error for a bad name, recording nothing.
  //
  //   ctx.remove_search_attributes({"stage"});
  void remove_search_attributes(std::vector<std::string> names) {
    driver_->remove_search_attributes(std::move(names));
  }

  // 64 random bits, recorded.
  std::uint64_t random() {
    return driver_->record_value(detail::value_kind::random, "random", nullptr)
        .get<std::uint64_t>();
  }

  // Runs `fn()` once, on the flow's thread, and records its result; replays
  // return the record. For quick non-deterministic reads (ids, config), not
  // for effects on other systems: use a step for those.
  template <class F>
  auto side_effect(std::string_view name, F&& fn) {
    using R = std::invoke_result_t<F&>;
    static_assert(!std::is_void_v<R>, "a side effect must return a value");
    std::function<json()> produce = [&fn]() { return json(fn()); };
    return detail::convert_result<R>(
        driver_->record_value(detail::value_kind::side_effect, name, produce));
  }

 private:
  static detail::hook_request to_request(const hook_options& options);
  detail::driver* driver_;
};

inline detail::hook_request context::to_request(const hook_options& options) {
  detail::hook_request request;
  request.token = options.token;
  request.metadata = options.metadata;
  request.min_retention = options.min_retention;
  request.force = options.force;
  return request;
}
}  // namespace durin
