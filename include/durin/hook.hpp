// Hooks let the outside world send data into a running flow, addressed by a
// token from the caller's domain ("order:A-100"). A token has at most one
// owner at a time, on every path and across crashes, so it is an idempotency
// key for whole runs.
//
//   auto notes = ctx.create_hook<json>({.token = "order:" + id});
//   if (auto owner = co_await notes.conflict()) {
//     co_return owner->run_id();  // or its status(), return_value<T>()
//   }
//   while (auto note = co_await notes.next()) { ... }
//
// Payloads resumed before the flow reads them are kept, in order. A hook
// made with create_hook stays until the run ends (then the token is released,
// or retained for min_retention); a scoped_hook disposes when its scope
// ends, releasing the token at once.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "durin/detail/driver.hpp"
#include "durin/json.hpp"
#include "durin/run_handle.hpp"

namespace durin {

struct hook_options {
  std::string token;  // 1..256 bytes
  json metadata;      // shown by get_hook_by_token
  // Held this long after the run ends, counted from create_hook: "30 days",
  // "2h", "500ms", a number of milliseconds, or an RFC 3339 time. Capped
  // (30 days by default).
  json min_retention;
  bool force = false;  // take the token from its current owner
};

// Awaiting a hook another run owns.
class hook_conflict_error : public std::runtime_error {
 public:
  explicit hook_conflict_error(std::string owner)
      : std::runtime_error("the hook's token is held by run " + owner),
        run_id_(std::move(owner)) {}
  const std::string& run_id() const noexcept { return run_id_; }

 private:
  std::string run_id_;
};

// Awaiting a hook whose token another run took with force.
class hook_force_claimed_error : public std::runtime_error {
 public:
  explicit hook_force_claimed_error(std::string new_owner)
      : std::runtime_error("the hook's token was force-claimed by run " +
                           new_owner),
        run_id_(std::move(new_owner)) {}
  const std::string& run_id() const noexcept { return run_id_; }

 private:
  std::string run_id_;
};

namespace detail {

[[noreturn]] inline void raise_hook_failure(const call_outcome& outcome) {
  if (outcome.error_code == "hook-force-claimed") {
    throw hook_force_claimed_error(outcome.error_message);
  }
  throw hook_conflict_error(outcome.error_message);
}

class conflict_awaitable {
 public:
  conflict_awaitable(driver& d, std::size_t hook) : driver_(&d), hook_(hook) {}
  bool await_ready() { return driver_->hook_conflict(hook_, &outcome_); }
  void await_suspend(std::coroutine_handle<> h) { driver_->park(h); }
  // The owner when another run owns the token.
  std::optional<run_handle> await_resume() const {
    if (outcome_.value.is_string()) {
      return run_handle(*driver_, outcome_.value.get<std::string>());
    }
    return std::nullopt;
  }

 private:
  driver* driver_;
  std::size_t hook_;
  call_outcome outcome_;
};

template <class T>
class next_awaitable {
 public:
  next_awaitable(driver& d, std::size_t hook, bool required)
      : driver_(&d), hook_(hook), required_(required) {}
  bool await_ready() { return driver_->hook_next(hook_, &outcome_); }
  void await_suspend(std::coroutine_handle<> h) { driver_->park(h); }
  std::optional<T> await_resume() {
    if (outcome_.failed) {
      raise_hook_failure(outcome_);
    }
    if (outcome_.value.is_null()) {
      if (required_) {
        throw std::runtime_error("the hook was disposed");
      }
      return std::nullopt;
    }
    return convert_result<T>(outcome_.value.at("payload"));
  }

 private:
  driver* driver_;
  std::size_t hook_;
  bool required_;
  call_outcome outcome_;
};

template <class T>
class required_awaitable : public next_awaitable<T> {
 public:
  using next_awaitable<T>::next_awaitable;
  T await_resume() { return *next_awaitable<T>::await_resume(); }
};

}  // namespace detail

// A hook owned (or wanted) by the run. Cheap to copy; valid only inside the
// flow that created it.
template <class T = json>
class hook {
 public:
  hook(detail::driver& d, std::size_t id) : driver_(&d), id_(id) {}

  const std::string& token() const { return driver_->hook_token(id_); }

  // The owning run when another run holds the token, else nullopt.
  detail::conflict_awaitable conflict() { return {*driver_, id_}; }

  // The next payload; nullopt once the hook is disposed. Throws
  // hook_conflict_error or hook_force_claimed_error.
  detail::next_awaitable<T> next() { return {*driver_, id_, false}; }

  // `co_await hook` is `*co_await hook.next()`.
  detail::required_awaitable<T> operator co_await() {
    return {*driver_, id_, true};
  }

  // Releases the token at once; later next() yields nullopt.
  void dispose() { driver_->hook_dispose(id_); }

 protected:
  detail::driver* driver_;
  std::size_t id_;
};

// A hook disposed when it goes out of scope (the seed's `using`).
template <class T = json>
class scoped_hook : public hook<T> {
 public:
  using hook<T>::hook;
  scoped_hook(scoped_hook&& other) noexcept
      : hook<T>(other), owns_(std::exchange(other.owns_, false)) {}
  scoped_hook(const scoped_hook&) = delete;
  scoped_hook& operator=(const scoped_hook&) = delete;
  scoped_hook& operator=(scoped_hook&&) = delete;
  ~scoped_hook() {
    if (owns_) {
      this->dispose();
    }
  }

 private:
  bool owns_ = true;
};

}  // namespace durin
