// Steps are where a flow touches the outside world. A step body is ordinary
// blocking C++ that runs on the runtime's bounded step executor, never on an
// actor thread, at least once: a crash or a failed attempt runs it again.
// Its outcome is recorded once; replay returns the record instead of running
// it. Use `step_metadata().step_id` as the idempotency key towards other
// systems: it is the same for every attempt of one step.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "durin/limits.hpp"

namespace durin {

// Thrown where a durin call gets an argument out of its documented range (a
// duration beyond limits::duration_ms_max, a retry policy of 0 attempts, ...).
// Left uncaught in a flow, the run fails with error code "invalid-argument".
// Deterministic: the same code with the same input throws again on replay.
class invalid_argument_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// How a step retries. Defaults follow common practice: 4 attempts in all,
// exponential backoff from 1 s doubling up to 60 s, +-20% jitter. The
// attempts are capped: a policy asking for more than limits::retry_attempts_max
// (1000), or with a delay beyond limits::duration_ms_max, is refused
// (invalid_argument_error at ctx.step or at registry::step).
struct retry_policy {
  std::uint32_t max_attempts = 4;  // 1..1000; 1 means no retry
  std::chrono::milliseconds initial_backoff{
      1000};                                      // 0..limits::duration_ms_max
  double backoff_multiplier = 2.0;                // 1..1e6
  std::chrono::milliseconds max_backoff{60'000};  // 0..limits::duration_ms_max
  double jitter = 0.2;  // 0..1, fraction of the delay added or removed

  // The delay before attempt `next_attempt` (2, 3, ...) given a uniform
  // random `unit` in [0, 1); deterministic for equal arguments.
  std::chrono::milliseconds backoff(std::uint32_t next_attempt,
                                    double unit) const;
  // "" when every field is in range; else what is wrong, naming the field.
  std::string problem() const;
};

// Per-step deadlines; zero means none. A timeout ends the attempt and is
// recorded with its kind ("timeout-schedule-to-start", ...). Every kind but
// schedule-to-close is retried like a retryable error, at once; reaching
// schedule-to-close fails the step for good.
struct step_timeouts {
  // From an attempt being queued to a worker claiming it (remote steps).
  std::chrono::milliseconds schedule_to_start{0};
  // From an attempt being claimed to its outcome: a hard deadline that
  // heartbeats do not move.
  std::chrono::milliseconds start_to_close{0};
  // From the step's first attempt being scheduled to its final outcome,
  // across retries. Counted from the run's activation after a restart.
  std::chrono::milliseconds schedule_to_close{0};
  // The longest gap between heartbeats: each heartbeat moves the lease's
  // expiry to now + this (never past start-to-close). A remote step with
  // neither this nor start-to-close gets the runtime's task_lease (30 s),
  // renewed by heartbeats the same way.
  std::chrono::milliseconds heartbeat{0};

  bool any() const {
    return schedule_to_start.count() > 0 || start_to_close.count() > 0 ||
           schedule_to_close.count() > 0 || heartbeat.count() > 0;
  }
  // "" when each is 0..limits::duration_ms_max; else which one is not.
  std::string problem() const;
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
  step_timeouts timeouts;  // for registered steps, the registration's win
};

// How a registered step runs: its retries, where, and its deadlines.
struct step_config {
  retry_policy retry;
  // Empty: the node's own step executor runs it. Otherwise the step's
  // attempts wait on this task queue (1..128 bytes, an id a route can
  // name: durin/ids.hpp) for a remote worker.
  std::string task_queue;
  step_timeouts timeouts;
};

// Thrown by a step body: stop retrying, the step fails at once.
class fatal_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown by a step body: retry (if attempts remain) after `retry_after`
// instead of the policy's backoff. A retry_after beyond limits::duration_ms_max
// fails the step for good with code "invalid-argument".
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

// The code of a step of a worker session (durin/flow.hpp: ctx.session)
// that failed because the session's worker was lost, or because an earlier
// step of its session failed so: the session can run nothing more, and the
// flow may open another.
inline constexpr const char* session_failed_code = "session-failed";

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

// What a running step knows about itself. `step_id` is the default
// idempotency key towards other systems (a payment API, a mailer): every
// attempt of the step carries the same one. `attempt_id` is new per attempt,
// for systems that tell attempts apart.
struct step_info {
  std::string run_id;
  std::string instance_id;  // the run's instance id, else its run id
  std::string step_name;
  std::string step_id;     // "<run_id>/<call sequence>": same on every attempt
  std::string attempt_id;  // unique to this attempt
  std::uint32_t attempt = 1;  // 1, 2, ...
  std::int64_t started_at_ms = 0;
};

// REQUIRES: called inside a step body (on the node's step executor or in a
// durin::worker). Throws std::logic_error elsewhere.
const step_info& step_metadata();

// Progress a step may report with a heartbeat; all optional.
struct step_progress {
  std::string message;  // at most 1024 bytes, cut beyond
  std::int64_t current = -1;
  std::int64_t total = -1;
};

// Renews the running attempt's lease and records `progress`. Returns false
// when the step should stop: the run was cancelled or this attempt lost its
// lease (another attempt owns the step now; its outcome will be refused).
// Cheap enough to call in a loop. REQUIRES: inside a step body.
bool heartbeat(const step_progress& progress = {});

namespace detail {
// Who runs a step body installs this for the body's thread (the node's step
// executor, durin::worker): what step_metadata() and heartbeat() see.
// REQUIRES: `info` and `beat` outlive the scope.
struct step_scope {
  step_scope(const step_info& info,
             const std::function<bool(const step_progress&)>& beat);
  ~step_scope();
  step_scope(const step_scope&) = delete;
  step_scope& operator=(const step_scope&) = delete;

 private:
  const step_info* previous_info_;
  const std::function<bool(const step_progress&)>* previous_beat_;
};
}  // namespace detail

}  // namespace durin
