// The task service holds every step attempt of a node as a task with a
// lease. An attempt of an in-node step is leased at once to the node's step
// executor ("node"); an attempt of a step registered to a task queue waits
// on that queue until a worker claims it with a poll. Claiming gives a lease
// (owner, expiry); each heartbeat renews it, moving the expiry to now plus
// the step's heartbeat timeout, or plus default_lease_ms for a remote step
// with neither a heartbeat nor a start-to-close timeout (never past the
// start-to-close or schedule-to-close deadline); a lease that expires, and
// every other timeout, ends the attempt and reports a timeout to the run, whose
// engine records it and schedules a new attempt (a new attempt id).
//
// Worker sessions: an attempt pinned to a worker (task_spec::session_worker)
// waits apart and is claimed only by that worker's polls. The service
// remembers when it last heard each worker (a poll, a parked poll, a
// heartbeat, a report); a pinned attempt that waits past its worker timeout
// without hearing from the worker, and a session attempt whose lease
// lapses, end as worker_lost: a final failure with code
// session_failed_code.
//
// Fencing: an outcome or heartbeat is taken only from the lease owner of an
// attempt that is still live. The first outcome of an attempt ends it; every
// later report, and every report for an attempt that lost its lease or whose
// run was cancelled, is refused with a reason (stale_attempt, run_cancelled,
// task_not_found) and changes nothing. A report from another worker for a
// live attempt is wrong_owner; for an attempt still queued, not_claimed.
//
// Durability: nothing here is on disk. The run's history is the durable
// truth: an accepted outcome is answered only once the run actor recorded
// it, and after a restart every step without a recorded outcome is
// dispatched again as a new attempt (at least once). Leases of in-node
// attempts stay in memory on purpose: they cost no write.
//
// Long polls: a poll that finds its queue empty is parked without a thread
// (poll_async): a task enqueued on that queue is claimed for the oldest
// parked poll and answered from the enqueuing thread; a poll whose wait
// ends is answered empty by the expiry thread (within `reap_interval_ms`);
// release_polls (the node stops) answers every parked poll empty at once.
// Each caller states how many polls one tenant may have parked.
//
// Thread-safety: every method may be called from any thread. poll() and
// poll_many() block up to their wait (call them from a thread that may
// wait, never an actor); poll_async never blocks.
// Limits: queued tasks per queue `queue_tasks_max`, remembered ended
// attempts `ended_attempts_max`, transport logs of `logged_runs_max` runs,
// parked polls per tenant as the caller of poll_async says.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "actors/messages.hpp"
#include "durin/clock.hpp"
#include "durin/limits.hpp"
#include "durin/step.hpp"

namespace durin::services {

using actors::step_report;

enum class timeout_kind : std::uint8_t {
  schedule_to_start,
  start_to_close,
  schedule_to_close,
  heartbeat,
  // A step of a worker session whose worker went unheard: its lease lapsed,
  // or it did not poll, heartbeat or report for the session's worker
  // timeout while a step pinned to it waited. Fails the session.
  worker_lost,
};
// "schedule-to-start", ...
const char* to_string(timeout_kind kind);

// One attempt handed to the service by a run actor.
struct task_spec {
  std::string tenant = "default";
  std::string run_id;
  std::string instance_id;
  std::string step_id;
  std::string step_name;
  std::string attempt_id;
  std::uint32_t attempt = 1;
  std::uint64_t call = 0;
  std::string task_queue;  // empty: runs in the node
  json args;               // a JSON array: the step's arguments
  step_timeouts timeouts;
  // When the step's first attempt was scheduled (schedule-to-close).
  std::int64_t step_scheduled_at_ms = 0;
  // A step of a worker session (ctx.session) has a worker timeout > 0. It
  // is pinned to `session_worker`: only that worker's polls claim it. An
  // empty worker: the session's first step, which any worker may claim.
  std::string session_worker;
  std::int64_t worker_timeout_ms = 0;
};

enum class attempt_state : std::uint8_t {
  queued,
  running,
  completed,
  failed,
  expired,
  cancelled,
};
const char* to_string(attempt_state state);

// What the service shows of one attempt (tasks list, runs describe).
struct attempt_view {
  std::string tenant;
  std::string run_id;
  std::string step_id;
  std::string step_name;
  std::string attempt_id;
  std::uint32_t attempt = 0;
  std::string task_queue;
  attempt_state state = attempt_state::queued;
  std::string owner;
  std::int64_t scheduled_at_ms = 0;
  std::int64_t started_at_ms = 0;
  std::int64_t lease_expires_ms = 0;
  std::int64_t ended_at_ms = 0;
  std::int64_t last_heartbeat_ms = 0;
  std::uint32_t heartbeats = 0;
  step_progress progress;
  std::string timeout;         // the timeout kind that ended it, if one did
  std::string session_worker;  // the worker a session step is pinned to

  json to_json() const;
};

// A report the service refused (late, stale, wrong owner...).
struct refused_report {
  std::string attempt_id;
  std::string step_id;
  std::string owner;
  std::string what;    // "complete", "fail", "heartbeat"
  std::string reason;  // stale_attempt, run_cancelled, wrong_owner, ...
  std::int64_t at_ms = 0;

  json to_json() const;
};

// The transport's side of one run: every attempt the service saw and every
// report it refused, beside what the history records.
struct run_transport {
  std::vector<attempt_view> attempts;
  std::vector<refused_report> refused;
};

// A claimed task as a worker gets it.
struct claimed_task {
  task_spec spec;
  std::string owner;
  std::int64_t lease_expires_ms = 0;
};

enum class report_verdict : std::uint8_t {
  accepted,        // handed to the run; the reply says whether it recorded
  stale_attempt,   // the attempt ended or lost its lease
  run_cancelled,   // the run was cancelled
  task_not_found,  // no such attempt (unknown, or forgotten after a restart)
  wrong_owner,     // the attempt's lease is held by another worker
  not_claimed,     // the attempt is queued: nobody holds its lease
};
const char* to_string(report_verdict verdict);

// What became of a poll handed to poll_async.
enum class poll_parking : std::uint8_t {
  answered,    // its answer was called before poll_async returned
  parked,      // it waits without a thread; its answer is called later
  over_limit,  // the tenant has its limit of polls parked; never answered
};

struct heartbeat_answer {
  report_verdict verdict = report_verdict::accepted;
  bool go_on = false;  // true only for an accepted heartbeat
  std::int64_t lease_expires_ms = 0;
};

struct task_service_options {
  // The lease of a remote attempt whose step has neither a heartbeat nor a
  // start-to-close timeout; each heartbeat renews it by this much.
  std::int64_t default_lease_ms = 30'000;
  // How often expiries are looked for: a lapsed lease is redelivered at most
  // this much after its expiry (plus the run's retry write).
  std::int64_t reap_interval_ms = 20;
  std::size_t queue_tasks_max = 100'000;
  std::size_t ended_attempts_max = 100'000;
  std::size_t logged_runs_max = 10'000;
  std::size_t log_entries_max = 64;  // attempts and refusals, per run
  // A lease held longer than this without a heartbeat counts as stuck.
  std::int64_t stuck_after_ms = 60'000;
  // A queue not polled for this long counts as unpolled.
  std::int64_t unpolled_after_ms = 30'000;
  // Workers whose last contact the service remembers (for worker sessions);
  // past it the least recently heard half is forgotten, and a step pinned
  // to a forgotten worker waits its whole worker timeout from its enqueue.
  std::size_t workers_heard_max = 100'000;
  std::int64_t poll_wait_ms_max = limits::poll_wait_ms_max;
  // Whether this node serves `run_id`'s shard now (empty: every run). An
  // attempt of a run whose shard went to another node (a move, a failover)
  // is never handed out here: the new owner dispatches the step again.
  // Called under the service's lock: it must not block.
  std::function<bool(const std::string& run_id)> serves;
};

struct task_stats {
  std::size_t queued = 0;
  std::size_t running = 0;
  std::size_t stuck_leases = 0;
  std::size_t queued_unpolled = 0;  // waiting on a queue nobody polls
  std::uint64_t redeliveries = 0;   // attempts ended by a timeout
  std::uint64_t refused_reports = 0;
  std::uint64_t completed = 0;
};

class task_service {
 public:
  // Where a finished or timed-out attempt goes: the run's actor. `reply`,
  // when set, is told whether the run recorded it (see report()).
  using deliver_function =
      std::function<bool(const std::string& run_id, step_report report,
                         std::function<void(report_answer)> reply)>;

  task_service(std::shared_ptr<durin::clock> clock, deliver_function deliver,
               task_service_options options = {});
  ~task_service();  // stop()

  // The answer of a poll: the tasks it claimed (none when its wait ended).
  using poll_answer = std::function<void(std::vector<claimed_task>)>;

  // Starts the expiry thread.
  void start();
  // Stops it and answers every poll (release_polls).
  void stop();

  // Registers an in-node attempt, leased to "node" from now. A live attempt
  // of the same run is replaced (it becomes stale).
  void start_local(task_spec spec);
  // Queues a remote attempt on spec.task_queue. False when the queue is full.
  bool enqueue(task_spec spec);

  // Claims up to `max_tasks` tasks of (tenant, queue) for `worker`, waiting
  // up to `wait_ms` for the first (it does not wait for more). A poll
  // repeating `poll_id` of the same worker claims nothing new while a task
  // of that poll is still leased to the worker: it gets those tasks back, so
  // a lost answer costs no lease. wait_ms 0 never blocks (only the lock).
  std::vector<claimed_task> poll_many(const std::string& tenant,
                                      const std::string& queue,
                                      const std::string& worker,
                                      const std::string& poll_id,
                                      std::int64_t wait_ms,
                                      std::size_t max_tasks);
  // poll_many with max_tasks 1.
  std::optional<claimed_task> poll(const std::string& tenant,
                                   const std::string& queue,
                                   const std::string& worker,
                                   const std::string& poll_id,
                                   std::int64_t wait_ms);
  // poll_many without a waiting thread: claims at once and calls `answer`
  // before returning (answered) when the queue has a task, the poll repeats
  // a held `poll_id`, wait_ms is 0 or polls are released. Otherwise parks
  // the poll (parked) unless `tenant` already has `tenant_parked_max`
  // parked (over_limit: nothing claimed, `answer` never called). A parked
  // poll is answered exactly once: by enqueue on its queue (from the
  // enqueuing thread, often an actor's: `answer` must not block), empty
  // at the end of its wait (expiry thread) or on release_polls.
  poll_parking poll_async(const std::string& tenant, const std::string& queue,
                          const std::string& worker, const std::string& poll_id,
                          std::int64_t wait_ms, std::size_t max_tasks,
                          std::size_t tenant_parked_max, poll_answer answer);
  // The tasks a poll of `poll_id` claimed for `worker` that are still
  // leased to it: what a repeat of that poll gets back. Claims nothing;
  // empty for an empty `poll_id`. Never blocks (only the lock).
  std::vector<claimed_task> held(const std::string& worker,
                                 const std::string& poll_id) const;
  // The node stops: answers every parked poll empty now; later polls are
  // answered at once, without waiting.
  void release_polls();
  // Polls of `tenant` parked now.
  std::size_t parked_polls(const std::string& tenant) const;

  // An attempt's outcome from `owner`. When accepted, the run gets it and
  // `reply` is called (on an actor thread; it must not block) with whether
  // it was recorded, once that is durable. Otherwise `reply` is not called.
  report_verdict report(const std::string& tenant,
                        const std::string& attempt_id, const std::string& owner,
                        step_outcome outcome,
                        std::function<void(report_answer)> reply);

  heartbeat_answer heartbeat(const std::string& tenant,
                             const std::string& attempt_id,
                             const std::string& owner,
                             const step_progress& progress);

  // The run was cancelled: its attempts end, later reports are refused
  // run_cancelled.
  void cancel_run(const std::string& run_id);
  // True when cancel_run was called for the run (remembered for the last
  // `ended_attempts_max` cancellations): what an in-node step without
  // timeouts, which the service does not track, learns from a heartbeat.
  bool run_cancelled(const std::string& run_id) const;
  // The attempt never started (the executor refused it): it ends silently.
  void cancel_attempt(const std::string& attempt_id);

  // Live attempts (queued, running) of `tenant`, at most `max`.
  std::vector<attempt_view> list(const std::string& tenant,
                                 std::size_t max) const;
  // What the service remembers of the run's attempts and refusals.
  run_transport transport_of(const std::string& run_id) const;
  // Node-wide: every tenant's attempts and counters (operators, /metrics).
  task_stats stats() const;
  // Only `tenant`'s: its live attempts, and the redeliveries, refused
  // reports and outcomes of its attempts (a refusal counts for the tenant
  // that sent it).
  task_stats stats(const std::string& tenant) const;
  // Names of queues polled or used, for the operator view.
  std::vector<std::string> queues(const std::string& tenant) const;

 private:
  struct attempt {
    task_spec spec;
    attempt_view view;
    std::string poll_id;
    std::int64_t start_deadline_ms = 0;  // schedule-to-start
    std::int64_t close_deadline_ms = 0;  // start-to-close
    std::int64_t step_deadline_ms = 0;   // schedule-to-close
    // What a heartbeat renews the lease by (the heartbeat timeout, else the
    // default lease of a remote attempt); 0: the lease is the deadlines'.
    std::int64_t lease_ms = 0;
  };
  struct parked_poll {
    std::string tenant;
    std::string worker;
    std::string poll_id;
    std::size_t max_tasks = 1;
    std::chrono::steady_clock::time_point deadline;
    poll_answer answer;
  };
  struct queue_state {
    std::deque<std::string> attempt_ids;
    // Attempts pinned to one worker (worker sessions), by worker.
    std::unordered_map<std::string, std::deque<std::string>> pinned;
    std::size_t pinned_ids = 0;  // in every deque of `pinned`
    // Parked polls by ticket: the oldest first.
    std::map<std::uint64_t, parked_poll> parked;
    std::int64_t last_poll_ms = 0;
  };
  struct ended_attempt {
    report_verdict reason = report_verdict::stale_attempt;
  };
  struct run_log {
    std::vector<attempt_view> attempts;
    std::vector<refused_report> refused;
  };
  struct expiry {
    std::string run_id;
    step_report report;
  };
  struct tenant_counters {
    std::uint64_t redeliveries = 0;
    std::uint64_t refused = 0;
    std::uint64_t completed = 0;
  };

  std::int64_t now() const { return clock_->now_ms(); }
  static std::string queue_key(const std::string& tenant,
                               const std::string& queue);
  static std::string worker_key(const std::string& tenant,
                                const std::string& worker);
  void reap_loop();
  // REQUIRES: mutex_ held. The timeout that has ended `entry` by `at_ms`,
  // if any.
  std::optional<timeout_kind> lapse_locked(const attempt& entry,
                                           std::int64_t at_ms) const;
  // What a run is told of an attempt that `kind` ended.
  static step_outcome lapse_outcome(const attempt& entry, timeout_kind kind);
  // REQUIRES: mutex_ held. Takes a queued pinned attempt out of its
  // worker's deque.
  void unpin_locked(const task_spec& spec);
  // REQUIRES: mutex_ held. The worker polled, heartbeat or reported now.
  void heard_locked(const std::string& tenant, const std::string& worker);
  // REQUIRES: mutex_ held. Whether a step pinned to `entry`'s worker, still
  // queued, has waited past its session's worker timeout for that worker.
  bool pinned_worker_lost_locked(const attempt& entry,
                                 std::int64_t at_ms) const;
  std::vector<expiry> collect_expired();
  // REQUIRES: mutex_ held. The tasks of (worker, poll_id) still leased to
  // the worker.
  std::vector<claimed_task> held_locked(const std::string& worker,
                                        const std::string& poll_id) const;
  // REQUIRES: mutex_ held. The tasks a poll claims now: those of its
  // repeated poll_id still leased to it, else up to max_tasks queued ones.
  std::vector<claimed_task> claim_now_locked(queue_state& queue,
                                             const std::string& worker,
                                             const std::string& poll_id,
                                             std::size_t max_tasks);
  // REQUIRES: mutex_ held. The queue of (tenant, queue), made when missing.
  queue_state& queue_locked(const std::string& tenant,
                            const std::string& queue);
  // poll_async; `ticket` names the poll when parked.
  poll_parking park_or_answer(const std::string& tenant,
                              const std::string& queue,
                              const std::string& worker,
                              const std::string& poll_id, std::int64_t wait_ms,
                              std::size_t max_tasks,
                              std::size_t tenant_parked_max, poll_answer answer,
                              std::uint64_t& ticket);
  // REQUIRES: mutex_ held. Unparks a poll; its answer is the caller's to
  // call, outside the lock.
  poll_answer unpark_locked(queue_state& queue,
                            std::map<std::uint64_t, parked_poll>::iterator it);
  // Answers a still parked poll empty (a blocking poll's wait ended).
  void unpark(std::uint64_t ticket);
  // REQUIRES: mutex_ held. Unparks the polls whose wait ended.
  std::vector<poll_answer> expire_polls_locked();
  // REQUIRES: mutex_ held. Ends `it`, remembering why later reports are
  // refused, and updates the run's log. Invariant: an attempt ends once,
  // and only through its holder's outcome (report), a lapsed lease or
  // deadline (collect_expired), or its run: cancelled (cancel_run), moved
  // on to a new attempt (replace_live_locked), or refused by the executor
  // (cancel_attempt).
  void end_locked(std::unordered_map<std::string, attempt>::iterator it,
                  attempt_state state, report_verdict later);
  void replace_live_locked(const std::string& run_id);
  // REQUIRES: mutex_ held. The run's new attempt, live in `state` (queued
  // for a worker, or running on this node) with its step's deadline; the
  // run's older attempt ended. The caller adds the state's deadlines.
  attempt& admit_locked(task_spec spec, attempt_state state);
  void log_locked(const attempt_view& view);
  void refuse_locked(const std::string& run_id, refused_report refusal);
  report_verdict ended_verdict_locked(const std::string& attempt_id) const;
  void arm_lease_locked(attempt& entry);
  claimed_task claim_locked(attempt& entry, const std::string& worker,
                            const std::string& poll_id);
  // REQUIRES: mutex_ held. Live attempts counted, of one tenant or (null)
  // of all; the counters are left 0.
  task_stats live_stats_locked(const std::string* tenant) const;

  std::shared_ptr<durin::clock> clock_;
  deliver_function deliver_;
  task_service_options options_;

  mutable std::mutex mutex_;
  std::unordered_map<std::string, attempt> live_;        // by attempt id
  std::unordered_map<std::string, std::string> by_run_;  // run -> attempt
  std::unordered_set<std::string> with_deadline_;        // attempt ids
  std::unordered_map<std::string, std::unique_ptr<queue_state>> queues_;
  std::unordered_map<std::string, ended_attempt> ended_;
  std::deque<std::string> ended_order_;
  std::unordered_set<std::string> cancelled_runs_;
  std::deque<std::string> cancelled_order_;
  std::unordered_map<std::string, run_log> logs_;
  std::deque<std::string> log_order_;
  // (worker, poll id) -> the attempts that poll claimed and still holds
  std::unordered_map<std::string, std::vector<std::string>> polls_;
  // (tenant, worker) -> when it last polled, heartbeat or reported, and
  // how many polls it has parked now (a parked poll is a worker heard).
  std::unordered_map<std::string, std::int64_t> heard_;
  std::unordered_map<std::string, std::size_t> parked_by_worker_;
  std::uint64_t redeliveries_ = 0;
  std::uint64_t refused_ = 0;
  std::uint64_t completed_ = 0;
  // The same counters by tenant; one entry per tenant that had a task.
  std::unordered_map<std::string, tenant_counters> counters_;

  // Parked polls: where each is, and by deadline.
  std::unordered_map<std::uint64_t, queue_state*> parked_where_;
  std::set<std::pair<std::chrono::steady_clock::time_point, std::uint64_t>>
      parked_deadlines_;
  std::unordered_map<std::string, std::size_t> parked_by_tenant_;
  std::uint64_t next_ticket_ = 0;
  bool polls_released_ = false;

  bool stopping_ = false;
  std::condition_variable reaper_wake_;
  std::thread reaper_;
};

}  // namespace durin::services
