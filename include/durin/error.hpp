// Error values of the durin API. Every fallible call returns `result<T>`: a
// value or an `error` carrying one `errc` and a message naming what was wrong.
// The kebab-case form of each code (`to_code`) is the wire form used by the
// HTTP API and the CLI; codes are never renamed once published.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace durin {

enum class errc : std::uint8_t {
  invalid_argument = 1,     // a parameter of the call is malformed
  flow_not_found,           // no flow registered under that name
  step_not_found,           // no step registered under that name
  run_not_found,            // no run with that id
  invalid_input,            // input JSON does not convert to the flow's type
  run_finished,             // the run already ended; it cannot change now
  storage_error,            // indefinite: the write may or may not have landed
  corrupt_record,           // a stored record failed its checksum or decoding
  nondeterministic_replay,  // the flow's code no longer matches its history
  step_failed,              // a step failed for good
  flow_error,               // the flow's code threw
  cancelled,                // the run was cancelled
  timeout,                  // the caller's wait ran out; the run goes on
  shutting_down,            // the runtime is closing
  internal,                 // a bug: an invariant was about to break
  hook_conflict,            // another run owns the token (error::run_id)
  hook_not_found,           // no run can receive payloads for the token
  start_outcome_unknown,    // the start may or may not be admitted (run_id)
  schedule_not_found,       // no schedule with that id in the tenant
  schedule_exists,          // another schedule holds that id in the tenant
  update_rejected,          // the flow's validation refused the update
  query_refused,            // the query's handler tried to change state
  handler_not_found,        // the run has no update or query of that name
  unavailable,  // a service the call needs (a cluster's etcd) did not
                // answer; nothing changed, the call may be repeated
};

// The stable wire name, e.g. errc::flow_not_found -> "flow-not-found".
std::string_view to_code(errc code) noexcept;

struct error {
  errc code = errc::internal;
  std::string message;
  // The run the error is about, where there is one: the owner for
  // hook-conflict, the candidate run for start-outcome-unknown.
  std::string run_id;

  std::string to_string() const;  // "flow-not-found: no flow named 'x'"
};

// A value or an error. Accessing the wrong side is a bug and throws
// std::logic_error rather than invoking undefined behaviour.
template <class T>
class [[nodiscard]] result {
 public:
  result(T value) : data_(std::in_place_index<0>, std::move(value)) {}
  result(durin::error err) : data_(std::in_place_index<1>, std::move(err)) {}

  bool ok() const noexcept { return data_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & { return checked_value(); }
  const T& value() const& { return const_cast<result*>(this)->checked_value(); }
  T&& value() && { return std::move(checked_value()); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const durin::error& error() const {
    if (ok()) {
      throw std::logic_error("durin::result: error() on a value");
    }
    return std::get<1>(data_);
  }

 private:
  T& checked_value() {
    if (!ok()) {
      throw std::logic_error("durin::result: value() on error " +
                             std::get<1>(data_).to_string());
    }
    return std::get<0>(data_);
  }

  std::variant<T, durin::error> data_;
};

// result<void>: success or an error.
template <>
class [[nodiscard]] result<void> {
 public:
  result() = default;
  result(durin::error err) : error_(std::move(err)), failed_(true) {}

  bool ok() const noexcept { return !failed_; }
  explicit operator bool() const noexcept { return ok(); }
  const durin::error& error() const {
    if (ok()) {
      throw std::logic_error("durin::result: error() on success");
    }
    return error_;
  }

 private:
  durin::error error_;
  bool failed_ = false;
};

using status = result<void>;

inline error make_error(errc code, std::string message) {
  return error{code, std::move(message)};
}

}  // namespace durin
