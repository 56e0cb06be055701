// The task service's queues: remote attempts wait on (tenant, queue) until
// a poll claims them; a poll that finds nothing is parked without a thread
// and answered by the next enqueue, at the end of its wait, or when polls
// are released. A repeated poll id gets back what it still holds.
#include "services/task_service.hpp"

#include <algorithm>
#include <limits>

namespace durin::services {

std::string task_service::queue_key(const std::string& tenant,
                                    const std::string& queue) {
  // Length-prefixed so that no (tenant, queue) pair collides with another.
  return std::to_string(tenant.size()) + ":" + tenant + queue;
}

std::string task_service::worker_key(const std::string& tenant,
                                     const std::string& worker) {
  return queue_key(tenant, worker);
}

void task_service::heard_locked(const std::string& tenant,
                                const std::string& worker) {
  heard_[worker_key(tenant, worker)] = now();
  if (heard_.size() <= options_.workers_heard_max) {
    return;
  }
  // Forget the least recently heard half: a pinned attempt of a forgotten
  // worker then waits its whole worker timeout from its enqueue.
  std::vector<std::int64_t> times;
  times.reserve(heard_.size());
  for (const auto& [key, at] : heard_) {
    times.push_back(at);
  }
  auto middle = times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2);
  std::nth_element(times.begin(), middle, times.end());
  std::erase_if(
      heard_, [cut = *middle](const auto& item) { return item.second < cut; });
}

bool task_service::enqueue(task_spec spec) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto* queue = &queue_locked(spec.tenant, spec.task_queue);
  if (queue->attempt_ids.size() + queue->pinned_ids >=
      options_.queue_tasks_max) {
    return false;
  }
  auto& entry = admit_locked(std::move(spec), attempt_state::queued);
  const auto to_start = entry.spec.timeouts.schedule_to_start.count();
  if (to_start > 0) {
    entry.start_deadline_ms = entry.view.scheduled_at_ms + to_start;
  }
  const auto& worker = entry.spec.session_worker;
  const bool pinned = !worker.empty();
  if (entry.start_deadline_ms > 0 || entry.step_deadline_ms > 0 || pinned) {
    with_deadline_.insert(entry.spec.attempt_id);
  }
  log_locked(entry.view);
  if (pinned) {
    queue->pinned[worker].push_back(entry.spec.attempt_id);
    ++queue->pinned_ids;
  } else {
    queue->attempt_ids.push_back(entry.spec.attempt_id);
  }
  // The oldest parked poll that may take it takes it (for a pinned attempt,
  // the oldest of its worker's), answered once the lock is released.
  std::vector<std::pair<poll_answer, std::vector<claimed_task>>> answers;
  auto it = queue->parked.begin();
  while (it != queue->parked.end()) {
    if (pinned && it->second.worker != worker) {
      ++it;
      continue;
    }
    auto claimed = claim_now_locked(*queue, it->second.worker,
                                    it->second.poll_id, it->second.max_tasks);
    if (claimed.empty()) {
      break;  // what was queued had ended
    }
    answers.emplace_back(unpark_locked(*queue, it), std::move(claimed));
    if (pinned || queue->attempt_ids.empty()) {
      break;
    }
    it = queue->parked.begin();
  }
  lock.unlock();
  for (auto& [answer, claimed] : answers) {
    answer(std::move(claimed));
  }
  return true;
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

std::vector<claimed_task> task_service::held_locked(
    const std::string& worker, const std::string& poll_id) const {
  std::vector<claimed_task> out;
  if (poll_id.empty()) {
    return out;
  }
  auto again = polls_.find(worker + '\n' + poll_id);
  if (again == polls_.end()) {
    return out;
  }
  for (const auto& id : again->second) {
    auto it = live_.find(id);
    if (it != live_.end() && it->second.view.owner == worker &&
        it->second.view.state == attempt_state::running) {
      out.push_back(claimed_task{it->second.spec, worker,
                                 it->second.view.lease_expires_ms});
    }
  }
  return out;
}

std::vector<claimed_task> task_service::held(const std::string& worker,
                                             const std::string& poll_id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return held_locked(worker, poll_id);
}

std::vector<claimed_task> task_service::claim_now_locked(
    queue_state& queue, const std::string& worker, const std::string& poll_id,
    std::size_t max_tasks) {
  auto claimed = held_locked(worker, poll_id);
  if (!claimed.empty()) {
    return claimed;
  }
  if (!poll_id.empty()) {
    polls_.erase(worker + '\n' + poll_id);  // nothing of it is held
  }
  queue.last_poll_ms = now();
  max_tasks = std::max<std::size_t>(max_tasks, 1);
  // Takes the next attempt of `ids` when it is still queued here; false
  // when `ids` is empty.
  auto take = [&](std::deque<std::string>& ids) {
    if (ids.empty()) {
      return false;
    }
    auto id = std::move(ids.front());
    ids.pop_front();
    auto it = live_.find(id);
    if (it == live_.end() || it->second.view.state != attempt_state::queued) {
      return true;  // ended while queued (timeout, cancel, replaced)
    }
    if (options_.serves && !options_.serves(it->second.spec.run_id)) {
      end_locked(it, attempt_state::expired, report_verdict::stale_attempt);
      return true;
    }
    claimed.push_back(claim_locked(it->second, worker, poll_id));
    return true;
  };
  // The worker's pinned attempts first: nobody else may take them.
  if (auto mine = queue.pinned.find(worker); mine != queue.pinned.end()) {
    while (claimed.size() < max_tasks && take(mine->second)) {
      --queue.pinned_ids;
    }
    if (mine->second.empty()) {
      queue.pinned.erase(mine);
    }
  }
  while (claimed.size() < max_tasks && take(queue.attempt_ids)) {
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
  auto key = worker_key(it->second.tenant, it->second.worker);
  auto by_worker = parked_by_worker_.find(key);
  if (by_worker != parked_by_worker_.end() && --by_worker->second == 0) {
    parked_by_worker_.erase(by_worker);
  }
  heard_locked(it->second.tenant, it->second.worker);
  queue.parked.erase(it);
  return answer;
}

poll_parking task_service::park_or_answer(
    const std::string& tenant, const std::string& queue_name,
    const std::string& worker, const std::string& poll_id, std::int64_t wait_ms,
    std::size_t max_tasks, std::size_t tenant_parked_max, poll_answer answer,
    std::uint64_t& ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  heard_locked(tenant, worker);
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
  ++parked_by_worker_[worker_key(tenant, worker)];
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
