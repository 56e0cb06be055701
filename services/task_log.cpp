// The task service's transport log: per run, every attempt it saw and every
// report it refused (bounded by logged_runs_max and log_entries_max), the
// views of attempts and refusals, and the counters of the tasks list and
// /metrics. Memory only; the history is the durable truth.
#include "services/task_service.hpp"

#include <algorithm>

namespace durin::services {

json attempt_view::to_json() const {
  json out = {{"runId", run_id},
              {"stepId", step_id},
              {"stepName", step_name},
              {"attemptId", attempt_id},
              {"attempt", attempt},
              {"taskQueue", task_queue},
              {"state", to_string(state)},
              {"leaseOwner", owner},
              {"scheduledAtMs", scheduled_at_ms},
              {"heartbeats", heartbeats}};
  if (started_at_ms != 0) {
    out["startedAtMs"] = started_at_ms;
  }
  if (lease_expires_ms != 0) {
    out["leaseExpiresAtMs"] = lease_expires_ms;
  }
  if (ended_at_ms != 0) {
    out["endedAtMs"] = ended_at_ms;
  }
  if (last_heartbeat_ms != 0) {
    out["lastHeartbeatAtMs"] = last_heartbeat_ms;
  }
  if (!progress.message.empty() || progress.current >= 0) {
    out["progress"] = {{"message", progress.message},
                       {"current", progress.current},
                       {"total", progress.total}};
  }
  if (!timeout.empty()) {
    out["timeout"] = timeout;
  }
  if (!session_worker.empty()) {
    out["sessionWorker"] = session_worker;
  }
  return out;
}

json refused_report::to_json() const {
  return {{"attemptId", attempt_id}, {"stepId", step_id}, {"owner", owner},
          {"report", what},          {"reason", reason},  {"atMs", at_ms}};
}

void task_service::log_locked(const attempt_view& view) {
  auto [it, fresh] = logs_.try_emplace(view.run_id);
  if (fresh) {
    log_order_.push_back(view.run_id);
    while (log_order_.size() > options_.logged_runs_max) {
      logs_.erase(log_order_.front());
      log_order_.pop_front();
    }
  }
  auto& attempts = it->second.attempts;
  for (auto rit = attempts.rbegin(); rit != attempts.rend(); ++rit) {
    if (rit->attempt_id == view.attempt_id) {
      *rit = view;
      return;
    }
  }
  if (attempts.size() >= options_.log_entries_max) {
    attempts.erase(attempts.begin());
  }
  attempts.push_back(view);
}

void task_service::refuse_locked(const std::string& run_id,
                                 refused_report refusal) {
  std::string run = run_id;
  if (run.empty()) {
    // Ended attempts are found through the logs: small, and only on the
    // refusal path.
    for (const auto& [logged_run, log] : logs_) {
      for (const auto& view : log.attempts) {
        if (view.attempt_id == refusal.attempt_id) {
          run = logged_run;
          refusal.step_id = view.step_id;
          break;
        }
      }
      if (!run.empty()) {
        break;
      }
    }
  }
  if (run.empty()) {
    return;  // nothing known: counted only
  }
  auto& refused = logs_[run].refused;
  if (refused.size() >= options_.log_entries_max) {
    refused.erase(refused.begin());
  }
  refused.push_back(std::move(refusal));
}

std::vector<attempt_view> task_service::list(const std::string& tenant,
                                             std::size_t max) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<attempt_view> out;
  for (const auto& [id, entry] : live_) {
    if (out.size() >= max) {
      break;
    }
    if (entry.spec.tenant == tenant) {
      out.push_back(entry.view);
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.scheduled_at_ms < b.scheduled_at_ms;
  });
  return out;
}

run_transport task_service::transport_of(const std::string& run_id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = logs_.find(run_id);
  if (it == logs_.end()) {
    return {};
  }
  return run_transport{it->second.attempts, it->second.refused};
}

task_stats task_service::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto out = live_stats_locked(nullptr);
  out.redeliveries = redeliveries_;
  out.refused_reports = refused_;
  out.completed = completed_;
  return out;
}

task_stats task_service::stats(const std::string& tenant) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto out = live_stats_locked(&tenant);
  if (auto it = counters_.find(tenant); it != counters_.end()) {
    out.redeliveries = it->second.redeliveries;
    out.refused_reports = it->second.refused;
    out.completed = it->second.completed;
  }
  return out;
}

task_stats task_service::live_stats_locked(const std::string* tenant) const {
  task_stats out;
  auto at = now();
  for (const auto& [id, entry] : live_) {
    if (tenant != nullptr && entry.spec.tenant != *tenant) {
      continue;
    }
    if (entry.view.state == attempt_state::queued) {
      ++out.queued;
      auto queue =
          queues_.find(queue_key(entry.spec.tenant, entry.spec.task_queue));
      bool polled =
          queue != queues_.end() &&
          (!queue->second->parked.empty() ||
           at - queue->second->last_poll_ms < options_.unpolled_after_ms);
      if (!polled) {
        ++out.queued_unpolled;
      }
    } else {
      ++out.running;
      auto since =
          std::max(entry.view.started_at_ms, entry.view.last_heartbeat_ms);
      if (at - since > options_.stuck_after_ms) {
        ++out.stuck_leases;
      }
    }
  }
  return out;
}
}  // namespace durin::services
