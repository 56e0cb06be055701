// The task service's frame: its names on the wire, construction, and the
// expiry thread that ends lapsed leases and parked polls. The lease table is
// in task_leases.cpp, the queues and long polls in task_queues.cpp, the
// transport's per-run log, views and counters in task_log.cpp.
#include "services/task_service.hpp"

namespace durin::services {

const char* to_string(timeout_kind kind) {
  switch (kind) {
    case timeout_kind::schedule_to_start:
      return "schedule-to-start";
    case timeout_kind::start_to_close:
      return "start-to-close";
    case timeout_kind::schedule_to_close:
      return "schedule-to-close";
    case timeout_kind::heartbeat:
      return "heartbeat";
    case timeout_kind::worker_lost:
      return "worker-lost";
  }
  return "unknown";
}

const char* to_string(attempt_state state) {
  switch (state) {
    case attempt_state::queued:
      return "queued";
    case attempt_state::running:
      return "running";
    case attempt_state::completed:
      return "completed";
    case attempt_state::failed:
      return "failed";
    case attempt_state::expired:
      return "expired";
    case attempt_state::cancelled:
      return "cancelled";
  }
  return "unknown";
}

const char* to_string(report_verdict verdict) {
  switch (verdict) {
    case report_verdict::accepted:
      return "accepted";
    case report_verdict::stale_attempt:
      return "stale_attempt";
    case report_verdict::run_cancelled:
      return "run_cancelled";
    case report_verdict::task_not_found:
      return "task_not_found";
    case report_verdict::wrong_owner:
      return "wrong_owner";
    case report_verdict::not_claimed:
      return "not_claimed";
  }
  return "unknown";
}

task_service::task_service(std::shared_ptr<durin::clock> clock,
                           deliver_function deliver,
                           task_service_options options)
    : clock_(std::move(clock)),
      deliver_(std::move(deliver)),
      options_(options) {}

task_service::~task_service() {
  stop();
}

void task_service::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (reaper_.joinable() || stopping_) {
    return;
  }
  reaper_ = std::thread([this] { reap_loop(); });
}

void task_service::stop() {
  release_polls();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  reaper_wake_.notify_all();
  if (reaper_.joinable()) {
    reaper_.join();
  }
}

void task_service::reap_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    reaper_wake_.wait_for(lock,
                          std::chrono::milliseconds(options_.reap_interval_ms));
    if (stopping_) {
      return;
    }
    auto ended_polls = expire_polls_locked();
    const bool leases = !with_deadline_.empty();
    if (ended_polls.empty() && !leases) {
      continue;
    }
    lock.unlock();
    for (auto& answer : ended_polls) {
      answer({});
    }
    if (leases) {
      auto lapsed = collect_expired();
      for (auto& lapse : lapsed) {
        deliver_(lapse.run_id, std::move(lapse.report), nullptr);
      }
    }
    lock.lock();
  }
}
}  // namespace durin::services
