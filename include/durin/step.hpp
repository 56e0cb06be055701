// Steps are where a flow touches the outside world. A step body is ordinary
// blocking C++ that runs on the runtime's bounded step executor, never on an
// actor thread, at least once: a crash or a failed attempt runs it again.
// Its outcome is recorded once; replay returns the record instead of running
// it. Use `step_metadata().step_id` as the idempotency key towards other
// systems: it is the same for every attempt of one step.
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace durin {

// How a step retries. Defaults follow common practice: 4 attempts in all,
// exponential backoff from 1 s doubling up to 60 s, +-20% jitter.
struct retry_policy {
  std::uint32_t max_attempts = 4;  // 1..1000; 1 means no retry
  std::chrono::milliseconds initial_backoff{1000};
  double backoff_multiplier = 2.0;  // >= 1
  std::chrono::milliseconds max_backoff{60'000};
  double jitter = 0.2;  // 0..1, fraction of the delay added or removed

  // The delay before attempt `next_attempt` (2, 3, ...) given a uniform
  // random `unit` in [0, 1); deterministic for equal arguments.
  std::chrono::milliseconds backoff(std::uint32_t next_attempt,
                                    double unit) const;
};

// Names a step call and its policy. Converts from a string so that
// `ctx.step("charge", fn)` reads naturally.
struct step_options {
  step_options(const char* step_name) : name(step_name) {}
  step_options(std::string step_name) : name(std::move(step_name)) {}
  step_options(std::string step_name, retry_policy policy)
      : name(std::move(step_name)), retry(policy) {}

  std::string name;  // 1..128 bytes
  retry_policy retry;
};

// Thrown by a step body: stop retrying, the step fails at once.
class fatal_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown by a step body: retry (if attempts remain) after `retry_after`
// instead of the policy's backoff.
class retryable_error : public std::runtime_error {
 public:
  explicit retryable_error(
      const std::string& message,
      std::chrono::milliseconds retry_after = std::chrono::milliseconds{1000})
      : std::runtime_error(message), retry_after_(retry_after) {}
  std::chrono::milliseconds retry_after() const noexcept {
    return retry_after_;
  }

 private:
  std::chrono::milliseconds retry_after_;
};

// Raised at a flow's `co_await ctx.step(...)` when the step failed for good
// (fatal error, attempts exhausted, or unknown step name). Replays raise it
// again from the recorded failure.
class step_failed_error : public std::runtime_error {
 public:
  step_failed_error(std::string step_name, std::string code,
                    const std::string& message, std::uint32_t attempts)
      : std::runtime_error(message),
        step_name_(std::move(step_name)),
        code_(std::move(code)),
        attempts_(attempts) {}
  const std::string& step_name() const noexcept { return step_name_; }
  // "step-failed" for an error the body threw, "step-not-found", ...
  const std::string& code() const noexcept { return code_; }
  std::uint32_t attempts() const noexcept { return attempts_; }

 private:
  std::string step_name_;
  std::string code_;
  std::uint32_t attempts_;
};

// What a running step knows about itself.
struct step_info {
  std::string run_id;
  std::string step_name;
  std::string step_id;     // "<run_id>/<call sequence>": same on every attempt
  std::string attempt_id;  // unique to this attempt
  std::uint32_t attempt = 1;  // 1, 2, ...
  std::int64_t started_at_ms = 0;
};

// REQUIRES: called on a step executor thread, inside a step body.
// Throws std::logic_error elsewhere.
const step_info& step_metadata();

}  // namespace durin
