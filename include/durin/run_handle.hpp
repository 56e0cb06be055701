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

}  // namespace durin
