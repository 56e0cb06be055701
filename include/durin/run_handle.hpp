// A flow's view of another run: from `co_await hook.conflict()` (the token's
// owner) or `ctx.run(id)`. It names the run; awaiting `status()` or
// `return_value<T>()` asks the node, and the answer is recorded in this run's
// history, so a replay sees the same answer without asking again.
//
//   if (auto owner = co_await hook.conflict()) {
//     if (co_await owner->status() == durin::run_status::completed) {
//       co_return co_await owner->return_value<Result>();
//     }
//     co_return json{{"duplicateOf", owner->run_id()}};
//   }
//
// Valid only inside the flow that obtained it (it borrows the flow's driver).
//
// Child runs: `co_await ctx.start_child(flow, input, options)` admits a run
// that names this one as its parent and yields its handle once the
// admission is durable; await its end with `return_value<T>()`. One child
// per (parent run, call) across crashes: the child's run id and command id
// are recorded before it is started, so a replay starts (or finds) that
// very run. Throws child_start_error when the start is refused.
#pragma once

#include <coroutine>
#include <stdexcept>
#include <string>

#include "durin/detail/driver.hpp"
#include "durin/json.hpp"
#include "durin/run.hpp"

namespace durin {

// Raised by `co_await handle.return_value<T>()` when the run did not
// complete: it failed, was cancelled, or does not exist (status "not-found").
class run_failed_error : public std::runtime_error {
 public:
  run_failed_error(std::string run_id, std::string status, std::string code,
                   const std::string& message)
      : std::runtime_error(message),
        run_id_(std::move(run_id)),
        status_(std::move(status)),
        code_(std::move(code)) {}
  const std::string& run_id() const noexcept { return run_id_; }
  // "failed", "cancelled" or "not-found".
  const std::string& status() const noexcept { return status_; }
  // The run's error code ("step-failed", "cancelled", ...).
  const std::string& code() const noexcept { return code_; }

 private:
  std::string run_id_;
  std::string status_;
  std::string code_;
};

// What a child run does when its parent ends (completed, failed, cancelled
// or terminated): terminate ends the child as terminated (a forced stop that
// runs none of its code), cancel ends it as cancelled, abandon leaves it
// running.
enum class parent_close_policy : std::uint8_t {
  terminate = 1,
  cancel = 2,
  abandon = 3,
};

struct child_options {
  // The child's instance id (at most one active run holds it); empty: the
  // child is its own instance.
  std::string instance_id;
  parent_close_policy parent_close = parent_close_policy::terminate;
  // The child's memo (null: none) and search attributes, as a start's
  // (durin/runtime.hpp start_options): taken from the flow's code again on
  // replay, like the input.
  json memo;
  search_attributes search;
};

// Raised by `co_await ctx.start_child(...)` when the child was not started:
// code "hook-conflict" (its instance id is held by owner_run_id()),
// "flow-not-found", "invalid-input", "invalid-argument".
class child_start_error : public std::runtime_error {
 public:
  child_start_error(std::string code, const std::string& message,
                    std::string owner_run_id)
      : std::runtime_error(message),
        code_(std::move(code)),
        owner_run_id_(std::move(owner_run_id)) {}
  const std::string& code() const noexcept { return code_; }
  const std::string& owner_run_id() const noexcept { return owner_run_id_; }

 private:
  std::string code_;
  std::string owner_run_id_;
};

namespace detail {

// Asks for another run's state ({"id","status","output","error"}), now or
// once it has ended; `Derived::convert` turns the recorded JSON into the
// awaited value.
template <class Derived>
class watch_awaitable_base {
 public:
  watch_awaitable_base(driver& d, std::string run_id, bool until_end)
      : driver_(&d), run_id_(std::move(run_id)), until_end_(until_end) {}
  bool await_ready() {
    return driver_->begin_watch(run_id_, until_end_, &outcome_);
  }
  void await_suspend(std::coroutine_handle<> handle) { driver_->park(handle); }
  auto await_resume() {
    return static_cast<Derived*>(this)->convert(outcome_.value);
  }

 private:
  driver* driver_;
  std::string run_id_;
  bool until_end_;
  call_outcome outcome_;
};

class status_awaitable : public watch_awaitable_base<status_awaitable> {
 public:
  status_awaitable(driver& d, std::string run_id)
      : watch_awaitable_base(d, std::move(run_id), false) {}
  // Throws run_failed_error (status "not-found") for an unknown run.
  run_status convert(const json& state) const {
    auto text = state.at("status").get<std::string>();
    if (auto status = parse_run_status(text)) {
      return *status;
    }
    throw run_failed_error(
        state.at("id").get<std::string>(), text, "run-not-found",
        "run " + state.at("id").get<std::string>() + " does not exist");
  }
};

template <class T>
class return_value_awaitable
    : public watch_awaitable_base<return_value_awaitable<T>> {
 public:
  return_value_awaitable(driver& d, std::string run_id)
      : watch_awaitable_base<return_value_awaitable<T>>(d, std::move(run_id),
                                                        true) {}
  T convert(const json& state) const {
    auto status = state.at("status").get<std::string>();
    if (status == "completed") {
      return convert_result<T>(state.at("output"));
    }
    auto id = state.at("id").get<std::string>();
    auto error = state.value("error", json());
    if (error.is_object()) {
      throw run_failed_error(id, status, error.value("code", status),
                             error.value("message", std::string()));
    }
    throw run_failed_error(id, status, "run-" + status,
                           "run " + id + " ended " + status);
  }
};

}  // namespace detail

class run_handle {
 public:
  run_handle(detail::driver& d, std::string run_id)
      : driver_(&d), run_id_(std::move(run_id)) {}

  const std::string& run_id() const noexcept { return run_id_; }

  // The run's status now.
  detail::status_awaitable status() const { return {*driver_, run_id_}; }

  // Waits until the run ends; its return value converted to T. Throws
  // run_failed_error when it failed, was cancelled or does not exist.
  template <class T = json>
  detail::return_value_awaitable<T> return_value() const {
    return {*driver_, run_id_};
  }

 private:
  detail::driver* driver_;
  std::string run_id_;
};

namespace detail {

// Awaiting a child's start yields its handle once its admission is durable.
class child_awaitable {
 public:
  child_awaitable(driver& d, child_request request)
      : driver_(&d), request_(std::move(request)) {}
  bool await_ready() {
    return driver_->begin_child(std::move(request_), &outcome_);
  }
  void await_suspend(std::coroutine_handle<> handle) { driver_->park(handle); }
  run_handle await_resume() {
    if (outcome_.failed) {
      auto owner = outcome_.value.is_object()
                       ? outcome_.value.value("ownerRunId", std::string())
                       : std::string();
      throw child_start_error(outcome_.error_code, outcome_.error_message,
                              std::move(owner));
    }
    return run_handle(*driver_, outcome_.value.at("runId").get<std::string>());
  }

 private:
  driver* driver_;
  child_request request_;
  call_outcome outcome_;
};

}  // namespace detail

}  // namespace durin
