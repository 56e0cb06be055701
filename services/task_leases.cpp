// The task service's lease table: an attempt is leased to the node's
// executor (start_local) or to the worker whose poll claims it, renewed by
// the holder's heartbeats, and ended once: by the holder's outcome, by a
// lapsed lease or deadline (collect_expired), or by its run (cancelled, or
// moved on to a new attempt). Every later report is fenced with a reason.
#include "services/task_service.hpp"

#include <algorithm>

#include "durin/limits.hpp"
#include "persistence/assert.hpp"

namespace durin::services {

namespace {

constexpr const char* local_owner = "node";

}  // namespace

void task_service::arm_lease_locked(attempt& entry) {
  auto at = now();
  std::int64_t lease = 0;
  if (entry.lease_ms > 0) {
    lease = at + entry.lease_ms;
  }
  if (entry.close_deadline_ms > 0) {
    lease = lease == 0 ? entry.close_deadline_ms
                       : std::min(lease, entry.close_deadline_ms);
  }
  if (entry.step_deadline_ms > 0) {
    lease = lease == 0 ? entry.step_deadline_ms
                       : std::min(lease, entry.step_deadline_ms);
  }
  entry.view.lease_expires_ms = lease;
  if (lease > 0 || entry.start_deadline_ms > 0) {
    with_deadline_.insert(entry.spec.attempt_id);
  }
}

void task_service::replace_live_locked(const std::string& run_id) {
  auto previous = by_run_.find(run_id);
  if (previous == by_run_.end()) {
    return;
  }
  auto it = live_.find(previous->second);
  if (it != live_.end()) {
    // The run moved on (a reload re-dispatched the step): the old attempt
    // can only report late.
    end_locked(it, attempt_state::expired, report_verdict::stale_attempt);
  } else {
    by_run_.erase(previous);
  }
}

void task_service::start_local(task_spec spec) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& entry = admit_locked(std::move(spec), attempt_state::running);
  const auto& timeouts = entry.spec.timeouts;
  if (timeouts.start_to_close.count() > 0) {
    entry.close_deadline_ms =
        entry.view.started_at_ms + timeouts.start_to_close.count();
  }
  // In the node nothing dies silently: no lease beyond the step's own
  // heartbeat timeout.
  entry.lease_ms = std::max<std::int64_t>(0, timeouts.heartbeat.count());
  arm_lease_locked(entry);
  log_locked(entry.view);
}

task_service::attempt& task_service::admit_locked(task_spec spec,
                                                  attempt_state state) {
  replace_live_locked(spec.run_id);
  // A new attempt is one nobody holds: nothing else of the run is live.
  DURIN_ASSERT(
      by_run_.count(spec.run_id) == 0 && live_.count(spec.attempt_id) == 0,
      "a lease is granted only to an attempt nobody holds");
  const bool running = state == attempt_state::running;
  const auto at = now();
  attempt entry;
  entry.view = attempt_view{.tenant = spec.tenant,
                            .run_id = spec.run_id,
                            .step_id = spec.step_id,
                            .step_name = spec.step_name,
                            .attempt_id = spec.attempt_id,
                            .attempt = spec.attempt,
                            .task_queue = running ? "" : spec.task_queue,
                            .state = state,
                            .owner = running ? local_owner : "",
                            .scheduled_at_ms = at,
                            .started_at_ms = running ? at : 0,
                            .session_worker = spec.session_worker};
  if (spec.timeouts.schedule_to_close.count() > 0) {
    entry.step_deadline_ms =
        spec.step_scheduled_at_ms + spec.timeouts.schedule_to_close.count();
  }
  entry.spec = std::move(spec);
  by_run_[entry.spec.run_id] = entry.spec.attempt_id;
  const auto id = entry.spec.attempt_id;
  return live_[id] = std::move(entry);
}

claimed_task task_service::claim_locked(attempt& entry,
                                        const std::string& worker,
                                        const std::string& poll_id) {
  DURIN_ASSERT(
      entry.view.state == attempt_state::queued && entry.view.owner.empty(),
      "a lease is granted only to a queued attempt nobody holds");
  auto at = now();
  entry.view.state = attempt_state::running;
  entry.view.owner = worker;
  entry.view.started_at_ms = at;
  entry.poll_id = poll_id;
  entry.start_deadline_ms = 0;
  const auto& timeouts = entry.spec.timeouts;
  if (timeouts.start_to_close.count() > 0) {
    entry.close_deadline_ms = at + timeouts.start_to_close.count();
  }
  if (timeouts.heartbeat.count() > 0) {
    entry.lease_ms = timeouts.heartbeat.count();
  } else if (timeouts.start_to_close.count() <= 0) {
    // A remote worker may die silently: some lease is always needed, and
    // like a heartbeat timeout each heartbeat renews it.
    entry.lease_ms = options_.default_lease_ms;
  }
  arm_lease_locked(entry);
  if (!poll_id.empty()) {
    polls_[worker + '\n' + poll_id].push_back(entry.spec.attempt_id);
  }
  log_locked(entry.view);
  return claimed_task{entry.spec, worker, entry.view.lease_expires_ms};
}

report_verdict task_service::ended_verdict_locked(
    const std::string& attempt_id) const {
  auto it = ended_.find(attempt_id);
  return it == ended_.end() ? report_verdict::task_not_found
                            : it->second.reason;
}

report_verdict task_service::report(const std::string& tenant,
                                    const std::string& attempt_id,
                                    const std::string& owner,
                                    step_outcome outcome,
                                    std::function<void(report_answer)> reply) {
  std::string run_id;
  step_report report;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(attempt_id);
    report_verdict verdict = report_verdict::accepted;
    if (it == live_.end() || it->second.spec.tenant != tenant) {
      verdict = it == live_.end() ? ended_verdict_locked(attempt_id)
                                  : report_verdict::task_not_found;
    } else if (it->second.view.state == attempt_state::queued) {
      verdict = report_verdict::not_claimed;
    } else if (it->second.view.owner != owner) {
      verdict = report_verdict::wrong_owner;
    }
    if (verdict != report_verdict::accepted) {
      ++refused_;
      ++counters_[tenant].refused;
      refuse_locked(
          it != live_.end() ? it->second.spec.run_id : std::string(),
          refused_report{
              .attempt_id = attempt_id,
              .step_id = it != live_.end() ? it->second.spec.step_id : "",
              .owner = owner,
              .what = outcome.result == step_outcome::kind::succeeded
                          ? "complete"
                          : "fail",
              .reason = to_string(verdict),
              .at_ms = now()});
      return verdict;
    }
    DURIN_ASSERT(it->second.view.state == attempt_state::running &&
                     it->second.view.owner == owner,
                 "an outcome ends a lease only when its holder reports it");
    run_id = it->second.spec.run_id;
    report.call = it->second.spec.call;
    report.attempt_id = attempt_id;
    if (!it->second.spec.task_queue.empty()) {
      heard_locked(tenant, owner);  // a remote worker
    }
    if (it->second.spec.worker_timeout_ms > 0) {
      outcome.worker = owner;
    }
    ++completed_;
    ++counters_[tenant].completed;
    end_locked(it,
               outcome.result == step_outcome::kind::succeeded
                   ? attempt_state::completed
                   : attempt_state::failed,
               report_verdict::stale_attempt);
  }
  report.outcome = std::move(outcome);
  if (!deliver_(run_id, std::move(report), reply) && reply) {
    reply(report_answer{false, to_string(report_verdict::task_not_found)});
  }
  return report_verdict::accepted;
}

heartbeat_answer task_service::heartbeat(const std::string& tenant,
                                         const std::string& attempt_id,
                                         const std::string& owner,
                                         const step_progress& progress) {
  std::lock_guard<std::mutex> lock(mutex_);
  heartbeat_answer answer;
  auto it = live_.find(attempt_id);
  if (it == live_.end() || it->second.spec.tenant != tenant) {
    answer.verdict = it == live_.end() ? ended_verdict_locked(attempt_id)
                                       : report_verdict::task_not_found;
  } else if (it->second.view.state == attempt_state::queued) {
    answer.verdict = report_verdict::not_claimed;
  } else if (it->second.view.owner != owner) {
    answer.verdict = report_verdict::wrong_owner;
  } else if (it->second.view.lease_expires_ms > 0 &&
             now() >= it->second.view.lease_expires_ms) {
    // Lapsed, not yet reaped: renewing it now would let a lease outlive
    // its expiry by the reaper's interval. The reaper ends it next.
    answer.verdict = report_verdict::stale_attempt;
  }
  if (answer.verdict != report_verdict::accepted) {
    ++refused_;
    ++counters_[tenant].refused;
    refuse_locked(it != live_.end() ? it->second.spec.run_id : std::string(),
                  refused_report{.attempt_id = attempt_id,
                                 .owner = owner,
                                 .what = "heartbeat",
                                 .reason = to_string(answer.verdict),
                                 .at_ms = now()});
    return answer;
  }
  auto& entry = it->second;
  DURIN_ASSERT(
      entry.view.state == attempt_state::running && entry.view.owner == owner,
      "a lease is renewed only by its holder");
  if (!entry.spec.task_queue.empty()) {
    heard_locked(tenant, owner);  // a remote worker
  }
  entry.view.heartbeats += 1;
  entry.view.last_heartbeat_ms = now();
  entry.view.progress = progress;
  if (entry.view.progress.message.size() > limits::progress_message_bytes_max) {
    entry.view.progress.message.resize(limits::progress_message_bytes_max);
  }
  arm_lease_locked(entry);
  log_locked(entry.view);
  answer.go_on = true;
  answer.lease_expires_ms = entry.view.lease_expires_ms;
  return answer;
}

bool task_service::run_cancelled(const std::string& run_id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cancelled_runs_.count(run_id) != 0;
}

void task_service::cancel_run(const std::string& run_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (cancelled_runs_.insert(run_id).second) {
    cancelled_order_.push_back(run_id);
    while (cancelled_order_.size() > options_.ended_attempts_max) {
      cancelled_runs_.erase(cancelled_order_.front());
      cancelled_order_.pop_front();
    }
  }
  auto found = by_run_.find(run_id);
  if (found == by_run_.end()) {
    return;
  }
  auto it = live_.find(found->second);
  if (it != live_.end()) {
    end_locked(it, attempt_state::cancelled, report_verdict::run_cancelled);
  } else {
    by_run_.erase(found);
  }
}

void task_service::cancel_attempt(const std::string& attempt_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(attempt_id);
  if (it != live_.end()) {
    end_locked(it, attempt_state::failed, report_verdict::stale_attempt);
  }
}

void task_service::end_locked(
    std::unordered_map<std::string, attempt>::iterator it, attempt_state state,
    report_verdict later) {
  auto& entry = it->second;
  DURIN_ASSERT(entry.view.state == attempt_state::queued ||
                   entry.view.state == attempt_state::running,
               "an attempt's lease ends once");
  DURIN_ASSERT(
      state != attempt_state::queued && state != attempt_state::running,
      "an attempt ends in an end state");
  const bool was_queued = entry.view.state == attempt_state::queued;
  entry.view.state = state;
  entry.view.ended_at_ms = now();
  log_locked(entry.view);
  auto run = by_run_.find(entry.spec.run_id);
  if (run != by_run_.end() && run->second == entry.spec.attempt_id) {
    by_run_.erase(run);
  }
  if (!entry.poll_id.empty()) {
    auto batch = polls_.find(entry.view.owner + '\n' + entry.poll_id);
    if (batch != polls_.end()) {
      auto& ids = batch->second;
      ids.erase(std::remove(ids.begin(), ids.end(), entry.spec.attempt_id),
                ids.end());
      if (ids.empty()) {
        polls_.erase(batch);
      }
    }
  }
  with_deadline_.erase(entry.spec.attempt_id);
  if (was_queued && !entry.spec.session_worker.empty()) {
    // A worker that is lost never polls again to skip it.
    unpin_locked(entry.spec);
  }
  ended_[entry.spec.attempt_id] = ended_attempt{later};
  ended_order_.push_back(entry.spec.attempt_id);
  while (ended_order_.size() > options_.ended_attempts_max) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
  // A queued id stays in its queue's deque; poll skips ended attempts.
  live_.erase(it);
}

bool task_service::pinned_worker_lost_locked(const attempt& entry,
                                             std::int64_t at_ms) const {
  const auto& spec = entry.spec;
  if (spec.session_worker.empty() || spec.worker_timeout_ms <= 0) {
    return false;
  }
  auto key = worker_key(spec.tenant, spec.session_worker);
  if (parked_by_worker_.count(key) != 0) {
    return false;  // it is polling now
  }
  auto heard = heard_.find(key);
  auto since = entry.view.scheduled_at_ms;
  if (heard != heard_.end()) {
    since = std::max(since, heard->second);
  }
  return at_ms >= since + spec.worker_timeout_ms;
}

step_outcome task_service::lapse_outcome(const attempt& entry,
                                         timeout_kind kind) {
  step_outcome outcome;
  const auto& owner = entry.view.owner;
  if (kind == timeout_kind::worker_lost) {
    // Final for the step: its session's worker is gone, and no other
    // worker may run a step of that session.
    outcome.result = step_outcome::kind::fatal;
    outcome.error_code = session_failed_code;
    const auto& worker = owner.empty() ? entry.spec.session_worker : owner;
    outcome.message =
        "the worker session's worker '" + worker + "' was lost: " +
        (entry.view.state == attempt_state::queued
             ? "no poll, heartbeat or report from it within the session's "
               "worker timeout of " +
                   std::to_string(entry.spec.worker_timeout_ms) + " ms"
             : "attempt " + std::to_string(entry.spec.attempt) +
                   " got no heartbeat or outcome within its lease of " +
                   std::to_string(entry.lease_ms) + " ms");
    return outcome;
  }
  outcome.result = kind == timeout_kind::schedule_to_close
                       ? step_outcome::kind::fatal
                       : step_outcome::kind::retryable;
  outcome.error_code = std::string("timeout-") + to_string(kind);
  outcome.retry_after_ms = 0;  // a lapsed lease is redelivered at once
  outcome.message = std::string("attempt ") +
                    std::to_string(entry.spec.attempt) + " timed out (" +
                    to_string(kind) + ")" +
                    (kind == timeout_kind::heartbeat
                         ? ": no heartbeat or outcome within its lease of " +
                               std::to_string(entry.lease_ms) + " ms"
                         : std::string()) +
                    (owner.empty() ? std::string() : "; lease owner " + owner);
  return outcome;
}

void task_service::unpin_locked(const task_spec& spec) {
  auto queue = queues_.find(queue_key(spec.tenant, spec.task_queue));
  if (queue == queues_.end()) {
    return;
  }
  auto& pinned = queue->second->pinned;
  auto ids = pinned.find(spec.session_worker);
  if (ids == pinned.end()) {
    return;
  }
  auto it = std::find(ids->second.begin(), ids->second.end(), spec.attempt_id);
  if (it != ids->second.end()) {
    ids->second.erase(it);
    --queue->second->pinned_ids;
  }
  if (ids->second.empty()) {
    pinned.erase(ids);
  }
}

std::optional<timeout_kind> task_service::lapse_locked(
    const attempt& entry, std::int64_t at_ms) const {
  if (entry.step_deadline_ms > 0 && at_ms >= entry.step_deadline_ms) {
    return timeout_kind::schedule_to_close;
  }
  if (entry.view.state == attempt_state::queued) {
    if (entry.start_deadline_ms > 0 && at_ms >= entry.start_deadline_ms) {
      return timeout_kind::schedule_to_start;
    }
    if (pinned_worker_lost_locked(entry, at_ms)) {
      return timeout_kind::worker_lost;
    }
    return std::nullopt;
  }
  if (entry.view.lease_expires_ms > 0 && at_ms >= entry.view.lease_expires_ms) {
    bool closed =
        entry.close_deadline_ms > 0 && at_ms >= entry.close_deadline_ms;
    if (closed) {
      return timeout_kind::start_to_close;
    }
    // A session step's worker that lets its lease lapse is lost to the
    // session: its next steps could go nowhere else.
    return entry.spec.worker_timeout_ms > 0 ? timeout_kind::worker_lost
                                            : timeout_kind::heartbeat;
  }
  return std::nullopt;
}

std::vector<task_service::expiry> task_service::collect_expired() {
  std::vector<expiry> out;
  std::lock_guard<std::mutex> lock(mutex_);
  auto at = now();
  std::vector<std::pair<std::string, timeout_kind>> lapsed;
  for (const auto& id : with_deadline_) {
    auto it = live_.find(id);
    if (it == live_.end()) {
      continue;
    }
    if (auto kind = lapse_locked(it->second, at)) {
      lapsed.emplace_back(id, *kind);
    }
  }
  for (auto& [id, kind] : lapsed) {
    auto it = live_.find(id);
    auto& entry = it->second;
    DURIN_ASSERT(lapse_locked(entry, at) == kind,
                 "a lease ends by expiry only once it lapsed");
    step_outcome outcome = lapse_outcome(entry, kind);
    entry.view.timeout = to_string(kind);
    expiry lapse{entry.spec.run_id,
                 step_report{entry.spec.call, id, std::move(outcome)}};
    ++redeliveries_;
    ++counters_[entry.spec.tenant].redeliveries;
    end_locked(it, attempt_state::expired, report_verdict::stale_attempt);
    out.push_back(std::move(lapse));
  }
  return out;
}
}  // namespace durin::services
