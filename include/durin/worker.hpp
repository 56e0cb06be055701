// durin::worker runs a registry's steps in a process of its own, against a
// `durin serve` node over HTTP: it long-polls a task queue, runs each task's
// step body (with step_metadata() and heartbeat() bound to the attempt),
// and reports the outcome. The node fences every report by lease owner and
// attempt, so a worker that lost its lease learns it from the answer
// (recorded: false) and nothing changes; killing a worker at any moment
// loses at most the attempts in hand, which the node delivers again once
// their leases expire. Steps run at least once: make their effects
// idempotent with step_metadata().step_id.
//
//   durin::registry steps;
//   steps.step("charge", charge, {.task_queue = "payments"});
//   durin::worker w({.server_url = "http://127.0.0.1:7070",
//                    .api_key = key, .task_queue = "payments"}, steps);
//   w.run();  // until w.stop() from another thread
//
// One poll claims as many tasks as runners are free (`maxTasks`); finished
// outcomes are reported in batches (POST /v1/tasks/report): whatever
// finished while the previous report was on its way goes in the next one,
// so a lone outcome waits for nothing and batches grow with the load.
//
// Thread-safety: run() blocks its caller (which polls) and uses
// `concurrency` runner threads and one reporter thread of its own; stop()
// may be called from any thread (a signal handler must not: set a flag and
// call stop() from a normal thread).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "durin/registry.hpp"

namespace durin {

struct worker_options {
  std::string server_url = "http://127.0.0.1:7070";
  std::string api_key;
  std::string task_queue;
  std::string worker_id;        // empty: "<hostname>-<pid>"
  std::size_t concurrency = 1;  // tasks in hand at once, 1..256
  // How long one poll waits for a task; stop() waits at most this long.
  std::chrono::milliseconds poll_wait{2000};
  // A failed request (node down) is retried after this.
  std::chrono::milliseconds retry_delay{200};
  // Told what went wrong with each request that failed (the node down, a
  // refusal), as text naming the status and the node's code; called on
  // the worker's threads, so it must not block. A poll refused 401 or 403
  // (an unknown, revoked or under-privileged key) also ends run(): no
  // poll would ever be answered otherwise.
  std::function<void(const std::string&)> on_problem;
};

struct worker_stats {
  std::uint64_t tasks = 0;     // claimed
  std::uint64_t recorded = 0;  // outcomes the node recorded
  std::uint64_t refused = 0;   // outcomes refused as late (stale, cancelled)
  std::uint64_t errors = 0;    // failed requests
};

class worker_impl;

class worker {
 public:
  worker(worker_options options, registry steps);
  ~worker();  // stop(), then waits for run() to return

  worker(const worker&) = delete;
  worker& operator=(const worker&) = delete;

  // Polls and runs tasks until stop(). Returns once every claimed task ran
  // and its outcome was reported (or given up after 5 failed tries: its
  // lease then expires and the node delivers it again).
  void run();
  // Graceful: no new poll starts; tasks in hand finish and are reported.
  void stop();

  worker_stats stats() const;
  const std::string& worker_id() const;

 private:
  std::unique_ptr<worker_impl> impl_;
};

}  // namespace durin
