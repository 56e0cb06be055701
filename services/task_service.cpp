#include "services/task_service.hpp"

#include <algorithm>
#include <limits>

#include "persistence/assert.hpp"

namespace durin::services {

namespace {

constexpr const char* local_owner = "node";
constexpr std::size_t progress_message_bytes_max = 1024;

}  // namespace

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
  return out;
}

json refused_report::to_json() const {
  return {{"attemptId", attempt_id}, {"stepId", step_id}, {"owner", owner},
          {"report", what},          {"reason", reason},  {"atMs", at_ms}};
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

std::string task_service::queue_key(const std::string& tenant,
                                    const std::string& queue) {
  // Length-prefixed so that no (tenant, queue) pair collides with another.
  return std::to_string(tenant.size()) + ":" + tenant + queue;
}

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
  replace_live_locked(spec.run_id);
  auto at = now();
  attempt entry;
  entry.view = attempt_view{.tenant = spec.tenant,
                            .run_id = spec.run_id,
                            .step_id = spec.step_id,
                            .step_name = spec.step_name,
                            .attempt_id = spec.attempt_id,
                            .attempt = spec.attempt,
                            .task_queue = {},
                            .state = attempt_state::running,
                            .owner = local_owner,
                            .scheduled_at_ms = at,
                            .started_at_ms = at};
  if (spec.timeouts.start_to_close.count() > 0) {
    entry.close_deadline_ms = at + spec.timeouts.start_to_close.count();
  }
  if (spec.timeouts.schedule_to_close.count() > 0) {
    entry.step_deadline_ms =
        spec.step_scheduled_at_ms + spec.timeouts.schedule_to_close.count();
  }
  // In the node nothing dies silently: no lease beyond the step's own
  // heartbeat timeout.
  entry.lease_ms = std::max<std::int64_t>(0, spec.timeouts.heartbeat.count());
  entry.spec = std::move(spec);
  by_run_[entry.spec.run_id] = entry.spec.attempt_id;
  auto id = entry.spec.attempt_id;
  auto& placed = live_[id] = std::move(entry);
  arm_lease_locked(placed);
  log_locked(placed.view);
}

bool task_service::enqueue(task_spec spec) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto* queue = &queue_locked(spec.tenant, spec.task_queue);
  if (queue->attempt_ids.size() >= options_.queue_tasks_max) {
    return false;
  }
  replace_live_locked(spec.run_id);
  auto at = now();
  attempt entry;
  entry.view = attempt_view{.tenant = spec.tenant,
                            .run_id = spec.run_id,
                            .step_id = spec.step_id,
                            .step_name = spec.step_name,
                            .attempt_id = spec.attempt_id,
                            .attempt = spec.attempt,
                            .task_queue = spec.task_queue,
                            .state = attempt_state::queued,
                            .scheduled_at_ms = at};
  if (spec.timeouts.schedule_to_start.count() > 0) {
    entry.start_deadline_ms = at + spec.timeouts.schedule_to_start.count();
  }
  if (spec.timeouts.schedule_to_close.count() > 0) {
    entry.step_deadline_ms =
        spec.step_scheduled_at_ms + spec.timeouts.schedule_to_close.count();
  }
  if (entry.start_deadline_ms > 0 || entry.step_deadline_ms > 0) {
    with_deadline_.insert(spec.attempt_id);
  }
  entry.spec = std::move(spec);
  by_run_[entry.spec.run_id] = entry.spec.attempt_id;
  auto id = entry.spec.attempt_id;
  log_locked(entry.view);
  live_[id] = std::move(entry);
  queue->attempt_ids.push_back(id);
  // The oldest parked poll takes it, answered once the lock is released.
  std::vector<std::pair<poll_answer, std::vector<claimed_task>>> answers;
  while (!queue->parked.empty() && !queue->attempt_ids.empty()) {
    auto oldest = queue->parked.begin();
    auto claimed =
        claim_now_locked(*queue, oldest->second.worker, oldest->second.poll_id,
                         oldest->second.max_tasks);
    if (claimed.empty()) {
      break;  // what was queued had ended
    }
    answers.emplace_back(unpark_locked(*queue, oldest), std::move(claimed));
  }
  lock.unlock();
  for (auto& [answer, claimed] : answers) {
    answer(std::move(claimed));
  }
  return true;
}

claimed_task task_service::claim_locked(attempt& entry,
                                        const std::string& worker,
                                        const std::string& poll_id) {
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

std::optional<claimed_task> task_service::poll(const std::string& tenant,
                                               const std::string& queue,
                                               const std::string& worker,
                                               const std::string& poll_id,
                                               std::int64_t wait_ms) {
  auto claimed = poll_many(tenant, queue, worker, poll_id, wait_ms, 1);
  if (claimed.empty()) {
    return std::nullopt;
  }
  return std::move(claimed.front());
}

task_service::queue_state& task_service::queue_locked(
    const std::string& tenant, const std::string& queue) {
  auto& slot = queues_[queue_key(tenant, queue)];
  if (!slot) {
    slot = std::make_unique<queue_state>();
  }
  return *slot;
}

std::vector<claimed_task> task_service::claim_now_locked(
    queue_state& queue, const std::string& worker, const std::string& poll_id,
    std::size_t max_tasks) {
  std::vector<claimed_task> claimed;
  if (!poll_id.empty()) {
    auto again = polls_.find(worker + '\n' + poll_id);
    if (again != polls_.end()) {
      for (const auto& id : again->second) {
        auto it = live_.find(id);
        if (it != live_.end() && it->second.view.owner == worker &&
            it->second.view.state == attempt_state::running) {
          claimed.push_back(claimed_task{it->second.spec, worker,
                                         it->second.view.lease_expires_ms});
        }
      }
      if (!claimed.empty()) {
        return claimed;
      }
      polls_.erase(again);
    }
  }
  queue.last_poll_ms = now();
  max_tasks = std::max<std::size_t>(max_tasks, 1);
  while (!queue.attempt_ids.empty() && claimed.size() < max_tasks) {
    auto id = std::move(queue.attempt_ids.front());
    queue.attempt_ids.pop_front();
    auto it = live_.find(id);
    if (it == live_.end() || it->second.view.state != attempt_state::queued) {
      continue;  // ended while queued (timeout, cancel, replaced)
    }
    claimed.push_back(claim_locked(it->second, worker, poll_id));
  }
  return claimed;
}

task_service::poll_answer task_service::unpark_locked(
    queue_state& queue, std::map<std::uint64_t, parked_poll>::iterator it) {
  auto answer = std::move(it->second.answer);
  parked_deadlines_.erase({it->second.deadline, it->first});
  parked_where_.erase(it->first);
  auto count = parked_by_tenant_.find(it->second.tenant);
  if (count != parked_by_tenant_.end() && --count->second == 0) {
    parked_by_tenant_.erase(count);
  }
  queue.parked.erase(it);
  return answer;
}

poll_parking task_service::park_or_answer(
    const std::string& tenant, const std::string& queue_name,
    const std::string& worker, const std::string& poll_id, std::int64_t wait_ms,
    std::size_t max_tasks, std::size_t tenant_parked_max, poll_answer answer,
    std::uint64_t& ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto& queue = queue_locked(tenant, queue_name);
  auto claimed = claim_now_locked(queue, worker, poll_id, max_tasks);
  if (!claimed.empty() || wait_ms <= 0 || polls_released_ || stopping_) {
    lock.unlock();
    answer(std::move(claimed));
    return poll_parking::answered;
  }
  auto& parked = parked_by_tenant_[tenant];
  if (parked >= tenant_parked_max) {
    if (parked == 0) {
      parked_by_tenant_.erase(tenant);
    }
    return poll_parking::over_limit;
  }
  ++parked;
  ticket = ++next_ticket_;
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(std::min<std::int64_t>(
                      wait_ms, options_.poll_wait_ms_max));
  queue.parked.emplace(ticket, parked_poll{tenant, worker, poll_id,
                                           std::max<std::size_t>(max_tasks, 1),
                                           deadline, std::move(answer)});
  parked_where_.emplace(ticket, &queue);
  parked_deadlines_.emplace(deadline, ticket);
  return poll_parking::parked;
}

poll_parking task_service::poll_async(
    const std::string& tenant, const std::string& queue,
    const std::string& worker, const std::string& poll_id, std::int64_t wait_ms,
    std::size_t max_tasks, std::size_t tenant_parked_max, poll_answer answer) {
  std::uint64_t ticket = 0;
  return park_or_answer(tenant, queue, worker, poll_id, wait_ms, max_tasks,
                        tenant_parked_max, std::move(answer), ticket);
}

void task_service::unpark(std::uint64_t ticket) {
  poll_answer answer;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto where = parked_where_.find(ticket);
    if (where == parked_where_.end()) {
      return;  // answered meanwhile
    }
    auto& queue = *where->second;
    queue.last_poll_ms = now();
    answer = unpark_locked(queue, queue.parked.find(ticket));
  }
  answer({});
}

std::vector<task_service::poll_answer> task_service::expire_polls_locked() {
  std::vector<poll_answer> answers;
  auto at = std::chrono::steady_clock::now();
  while (!parked_deadlines_.empty() && parked_deadlines_.begin()->first <= at) {
    auto ticket = parked_deadlines_.begin()->second;
    auto& queue = *parked_where_.at(ticket);
    queue.last_poll_ms = now();
    answers.push_back(unpark_locked(queue, queue.parked.find(ticket)));
  }
  return answers;
}

void task_service::release_polls() {
  std::vector<poll_answer> answers;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    polls_released_ = true;
    while (!parked_where_.empty()) {
      auto& queue = *parked_where_.begin()->second;
      answers.push_back(unpark_locked(queue, queue.parked.begin()));
    }
  }
  for (auto& answer : answers) {
    answer({});
  }
}

std::size_t task_service::parked_polls(const std::string& tenant) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = parked_by_tenant_.find(tenant);
  return it == parked_by_tenant_.end() ? 0 : it->second;
}

std::vector<claimed_task> task_service::poll_many(const std::string& tenant,
                                                  const std::string& queue,
                                                  const std::string& worker,
                                                  const std::string& poll_id,
                                                  std::int64_t wait_ms,
                                                  std::size_t max_tasks) {
  // The parked poll of poll_async, with this thread waiting for its answer.
  struct waiter {
    std::mutex mutex;
    std::condition_variable answered;
    bool done = false;
    std::vector<claimed_task> tasks;
  };
  auto wait = std::make_shared<waiter>();
  std::uint64_t ticket = 0;
  auto parking = park_or_answer(
      tenant, queue, worker, poll_id, wait_ms, max_tasks,
      std::numeric_limits<std::size_t>::max(),
      [wait](std::vector<claimed_task> tasks) {
        std::lock_guard<std::mutex> lock(wait->mutex);
        wait->tasks = std::move(tasks);
        wait->done = true;
        wait->answered.notify_all();
      },
      ticket);
  std::unique_lock<std::mutex> lock(wait->mutex);
  if (parking == poll_parking::parked &&
      !wait->answered.wait_for(lock,
                               std::chrono::milliseconds(std::min<std::int64_t>(
                                   wait_ms, options_.poll_wait_ms_max)),
                               [&] { return wait->done; })) {
    lock.unlock();
    unpark(ticket);  // answers it empty, unless it was answered meanwhile
    lock.lock();
    wait->answered.wait(lock, [&] { return wait->done; });
  }
  return std::move(wait->tasks);
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
    run_id = it->second.spec.run_id;
    report.call = it->second.spec.call;
    report.attempt_id = attempt_id;
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
  entry.view.heartbeats += 1;
  entry.view.last_heartbeat_ms = now();
  entry.view.progress = progress;
  if (entry.view.progress.message.size() > progress_message_bytes_max) {
    entry.view.progress.message.resize(progress_message_bytes_max);
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
  ended_[entry.spec.attempt_id] = ended_attempt{later};
  ended_order_.push_back(entry.spec.attempt_id);
  while (ended_order_.size() > options_.ended_attempts_max) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
  // A queued id stays in its queue's deque; poll skips ended attempts.
  live_.erase(it);
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
    const auto& entry = it->second;
    if (entry.step_deadline_ms > 0 && at >= entry.step_deadline_ms) {
      lapsed.emplace_back(id, timeout_kind::schedule_to_close);
    } else if (entry.view.state == attempt_state::queued) {
      if (entry.start_deadline_ms > 0 && at >= entry.start_deadline_ms) {
        lapsed.emplace_back(id, timeout_kind::schedule_to_start);
      }
    } else if (entry.view.lease_expires_ms > 0 &&
               at >= entry.view.lease_expires_ms) {
      bool closed =
          entry.close_deadline_ms > 0 && at >= entry.close_deadline_ms;
      lapsed.emplace_back(
          id, closed ? timeout_kind::start_to_close : timeout_kind::heartbeat);
    }
  }
  for (auto& [id, kind] : lapsed) {
    auto it = live_.find(id);
    auto& entry = it->second;
    step_outcome outcome;
    outcome.result = kind == timeout_kind::schedule_to_close
                         ? step_outcome::kind::fatal
                         : step_outcome::kind::retryable;
    outcome.error_code = std::string("timeout-") + to_string(kind);
    outcome.retry_after_ms = 0;  // a lapsed lease is redelivered at once
    outcome.message =
        std::string("attempt ") + std::to_string(entry.spec.attempt) +
        " timed out (" + to_string(kind) + ")" +
        (kind == timeout_kind::heartbeat
             ? ": no heartbeat or outcome within its lease of " +
                   std::to_string(entry.lease_ms) + " ms"
             : std::string()) +
        (entry.view.owner.empty() ? std::string()
                                  : "; lease owner " + entry.view.owner);
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

std::vector<std::string> task_service::queues(const std::string& tenant) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  auto prefix = std::to_string(tenant.size()) + ":" + tenant;
  for (const auto& [key, queue] : queues_) {
    if (key.compare(0, prefix.size(), prefix) == 0) {
      out.push_back(key.substr(prefix.size()));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace durin::services
