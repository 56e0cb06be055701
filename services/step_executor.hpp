// The step executor runs step bodies, blocking user code, on a fixed pool of
// threads so that no actor thread ever waits on a step. Each task runs once
// per submission; retries are the run engine's decision, not the executor's.
// The outcome goes back through the task's `done` callback, on the worker
// thread (it sends a message to the run actor; it must not block).
//
// Thread-safety: submit() may be called from any thread. stop() finishes the
// tasks already running, drops the queued ones (they have no durable outcome,
// so they run again after the next activation) and joins the threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "durin/json.hpp"
#include "durin/step.hpp"

namespace durin::services {

// How one attempt ended.
struct step_outcome {
  enum class kind : std::uint8_t { succeeded, retryable, fatal };
  kind result = kind::succeeded;
  json value;                        // when succeeded
  std::string message;               // when failed
  std::int64_t retry_after_ms = -1;  // retryable: the body's own delay, or -1
  // Recorded as the failure's code; empty: "attempt-failed" / "step-failed".
  // Timeouts use "timeout-<kind>" (services/task_service.hpp).
  std::string error_code;
  // The worker that reported it, for a step of a worker session (the
  // session is bound to the worker of its first report); else empty.
  std::string worker;
};

// The answer to whoever reported an attempt's outcome: recorded (durably)
// or refused with a reason: stale_attempt, run_cancelled, task_not_found.
// A refusal is not a failure: the step's recorded outcome stands.
struct report_answer {
  bool recorded = false;
  std::string reason;
};

struct step_task {
  step_info info;
  std::function<json()> body;
  std::function<void(step_outcome)> done;
  // What durin::heartbeat() calls inside the body; null: always go on.
  std::function<bool(const step_progress&)> beat;
};

// Runs one attempt's body on the calling thread, with step_metadata() and
// heartbeat() bound to `info` and `beat`, and classifies how it ended:
// fatal_error and JSON conversion errors are fatal, any other exception
// retryable. Never throws. Used by the executor and by durin::worker.
step_outcome run_step_body(
    step_info& info, const std::function<json()>& body,
    const std::function<bool(const step_progress&)>& beat);

// A bounded pool of threads for step bodies, which may block. Wakes few
// threads for a burst of quick steps: a submit wakes a sleeping thread only
// when no wake is already on its way, and a thread that takes a task while
// more wait wakes one successor, so tasks never wait behind a long body
// while a thread sleeps, yet a burst is not paid for with one wake-up
// (costly on a virtual machine) per task.
class step_executor {
 public:
  step_executor(std::size_t threads, std::size_t queue_max);
  ~step_executor();  // stop()

  // False when the queue is full or the executor stopped; `task` is dropped.
  bool submit(step_task task);
  void stop();

 private:
  void work();
  // Under mutex_: whether a submit or a taken task should wake a thread.
  bool wake_one();

  std::size_t queue_max_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<step_task> queue_;
  // Under mutex_: threads blocked in wake_, and wakes sent that no thread
  // has woken from yet.
  std::size_t sleeping_ = 0;
  std::size_t wakes_on_the_way_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace durin::services
