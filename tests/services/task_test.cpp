// Goal: the rules of steps as leased tasks (issue 5), on a real runtime with
// a real RocksDB: attempts, leases, heartbeats, every timeout kind, late and
// duplicate reports, cancellation, and redelivery after a restart. Workers
// are played by the test through the node's task service (the HTTP routes on
// top are tested in tests/gateway/worker_test.cpp). Time moves by a manual
// clock.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "actors/attempt_id.hpp"
#include "durin/durin.hpp"
#include "persistence/fence.hpp"
#include "services/node.hpp"
#include "services/runtime_access.hpp"
#include "services/task_service.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin {
namespace {

using namespace std::chrono_literals;

services::task_service& tasks_of(runtime& rt) {
  return *runtime_access::services(rt).tasks;
}
using services::claimed_task;
using services::report_answer;
using services::report_verdict;
using services::step_outcome;

constexpr auto wait_max = std::chrono::milliseconds(20'000);
constexpr std::int64_t start_ms = 1'800'000'000'000;

step_outcome succeeded(json value) {
  step_outcome outcome;
  outcome.value = std::move(value);
  return outcome;
}

step_outcome failed(bool retryable, std::string message) {
  step_outcome outcome;
  outcome.result =
      retryable ? step_outcome::kind::retryable : step_outcome::kind::fatal;
  outcome.message = std::move(message);
  outcome.retry_after_ms = 0;
  return outcome;
}

flow<json> one_remote(context& ctx, json input) {
  auto value = co_await ctx.step<json>("remote", input);
  co_return value;
}

class TaskTest : public ::testing::Test {
 protected:
  registry remote_flows(step_timeouts timeouts, std::uint32_t attempts = 10) {
    registry flows;
    retry_policy retry;
    retry.max_attempts = attempts;
    retry.initial_backoff = 1ms;
    retry.max_backoff = 1ms;
    retry.jitter = 0;
    flows.step(
        "remote", [](json value) { return value; },
        step_config{.retry = retry, .task_queue = "q", .timeouts = timeouts});
    flows.flow("one-remote", one_remote);
    return flows;
  }

  std::unique_ptr<runtime> open(const registry& flows) {
    runtime_options options;
    options.data_dir = dir_.path();
    options.step_threads = 2;
    options.clock = clock_;
    auto opened = runtime::open(options, flows);
    EXPECT_TRUE(opened.ok()) << (opened ? "" : opened.error().to_string());
    return opened ? std::move(*opened) : nullptr;
  }

  static std::optional<claimed_task> poll(runtime& rt, const std::string& who,
                                          const std::string& poll_id = "") {
    return tasks_of(rt).poll("default", "q", who, poll_id, 5000);
  }

  // Reports and waits until the run recorded (or refused) it.
  static std::pair<report_verdict, report_answer> report(
      runtime& rt, const std::string& attempt_id, const std::string& who,
      step_outcome outcome) {
    auto answer = std::make_shared<std::promise<report_answer>>();
    auto future = answer->get_future();
    auto verdict = tasks_of(rt).report(
        "default", attempt_id, who, std::move(outcome),
        [answer](report_answer got) { answer->set_value(std::move(got)); });
    if (verdict != report_verdict::accepted) {
      return {verdict, report_answer{false, services::to_string(verdict)}};
    }
    EXPECT_EQ(future.wait_for(wait_max), std::future_status::ready);
    return {verdict, future.get()};
  }

  static std::vector<history_event> events_of(runtime& rt,
                                              const std::string& id,
                                              std::string_view kind) {
    auto all = rt.history(id);
    EXPECT_TRUE(all.ok());
    std::vector<history_event> out;
    for (auto& event : *all) {
      if (event.kind == kind) {
        out.push_back(event);
      }
    }
    return out;
  }

  testing::temp_dir dir_;
  std::shared_ptr<manual_clock> clock_ =
      std::make_shared<manual_clock>(start_ms);
};

// In a cluster a shard's fence closes when the shard goes to another node,
// whose run dispatches the step again: the attempt queued here is never
// handed out, and ends.
TEST_F(TaskTest, AnAttemptOfAShardThisNodeNoLongerServesIsNeverHandedOut) {
  auto fence = std::make_shared<persistence::fence>();
  fence->grant(1, persistence::fence::clock::now() + std::chrono::hours(1));
  runtime_options options;
  options.data_dir = dir_.path();
  options.step_threads = 2;
  options.clock = clock_;
  auto opened = runtime_access::open(options, remote_flows({}),
                                     persistence::store_options{}, {fence});
  ASSERT_TRUE(opened.ok()) << opened.error().to_string();
  auto& rt = **opened;
  auto run = rt.start("one-remote", json{{"x", 1}});
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  ASSERT_TRUE(
      testing::eventually([&] { return tasks_of(rt).stats().queued == 1; }));
  fence->close();
  EXPECT_FALSE(tasks_of(rt).poll("default", "q", "w1", "", 0).has_value());
  EXPECT_EQ(tasks_of(rt).stats().queued, 0u);
  auto transport = tasks_of(rt).transport_of(run->id);
  ASSERT_FALSE(transport.attempts.empty());
  EXPECT_EQ(transport.attempts.back().state, services::attempt_state::expired);
}

TEST_F(TaskTest, RemoteStepWaitsOnItsQueueAndCompletesWhenAWorkerReports) {
  auto rt = open(remote_flows({}));
  auto run = rt->start("one-remote", json{{"x", 1}});
  ASSERT_TRUE(run.ok());
  auto task = poll(*rt, "w1");
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(task->spec.run_id, run->id);
  EXPECT_EQ(task->spec.step_id, run->id + "/1");
  EXPECT_EQ(task->spec.instance_id, run->id);
  EXPECT_EQ(task->spec.attempt, 1u);
  EXPECT_EQ(task->spec.args, json::array({json{{"x", 1}}}));
  EXPECT_GT(task->lease_expires_ms, clock_->now_ms());
  auto [verdict, answer] =
      report(*rt, task->spec.attempt_id, "w1", succeeded(json{{"y", 2}}));
  EXPECT_EQ(verdict, report_verdict::accepted);
  EXPECT_TRUE(answer.recorded);
  auto done = rt->wait(run->id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->status, run_status::completed);
  EXPECT_EQ(done->output, (json{{"y", 2}}));
  auto completed = events_of(*rt, run->id, "step-completed");
  ASSERT_EQ(completed.size(), 1u);
  EXPECT_EQ(completed[0].detail["attemptId"], task->spec.attempt_id);
  EXPECT_EQ(completed[0].detail["stepId"], run->id + "/1");
}

// While a worker holds its step, a run is seen running, with its start
// recorded: its start is written beside the dispatch, not only with the
// step's outcome.
TEST_F(TaskTest, ARunWhoseStepAWorkerHoldsIsRunningWithItsStartRecorded) {
  auto rt = open(remote_flows({}));
  auto run = rt->start("one-remote", json{{"x", 1}});
  ASSERT_TRUE(run.ok());
  auto task = poll(*rt, "w1");
  ASSERT_TRUE(task.has_value());
  EXPECT_TRUE(testing::eventually([&] {
    auto seen = rt->get(run->id);
    return seen.ok() && seen->status == run_status::running;
  }));
  auto seen = rt->get(run->id);
  ASSERT_TRUE(seen.ok());
  EXPECT_EQ(seen->started_at_ms, clock_->now_ms());
  EXPECT_EQ(events_of(*rt, run->id, "run-started").size(), 1u);
  auto [verdict, answer] =
      report(*rt, task->spec.attempt_id, "w1", succeeded(json{{"y", 2}}));
  EXPECT_EQ(verdict, report_verdict::accepted);
  auto done = rt->wait(run->id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->status, run_status::completed);
  EXPECT_EQ(events_of(*rt, run->id, "run-started").size(), 1u);
}

TEST_F(TaskTest, TaskCarriesTheInstanceIdTheRunWasStartedWith) {
  auto rt = open(remote_flows({}));
  start_options options;
  options.instance_id = "order-42";
  auto run = rt->start("one-remote", json(1), options);
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  auto task = poll(*rt, "w");
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(task->spec.instance_id, "order-42");
  EXPECT_EQ(task->spec.run_id, run->id);
}

TEST_F(TaskTest, LateCompletionAfterLeaseExpiryIsRefusedStaleAttempt) {
  step_timeouts timeouts;
  timeouts.start_to_close = 1000ms;
  auto rt = open(remote_flows(timeouts));
  auto run = rt->start("one-remote", json("input"));
  ASSERT_TRUE(run.ok());
  auto first = poll(*rt, "slow-worker");
  ASSERT_TRUE(first.has_value());
  clock_->advance_ms(1500);
  // The lease lapsed: the step is delivered again, as a new attempt.
  auto second = poll(*rt, "fast-worker");
  ASSERT_TRUE(second.has_value());
  EXPECT_NE(second->spec.attempt_id, first->spec.attempt_id);
  EXPECT_EQ(second->spec.attempt, 2u);
  EXPECT_EQ(second->spec.step_id, first->spec.step_id);
  auto [newer, newer_answer] =
      report(*rt, second->spec.attempt_id, "fast-worker", succeeded("newer"));
  EXPECT_TRUE(newer_answer.recorded);
  auto [late, late_answer] =
      report(*rt, first->spec.attempt_id, "slow-worker", succeeded("late"));
  EXPECT_EQ(late, report_verdict::stale_attempt);
  EXPECT_FALSE(late_answer.recorded);
  auto done = rt->wait(run->id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->output, json("newer"));
  // One outcome per attempt id: a timeout for the first, the value for the
  // second.
  auto all = rt->history(run->id);
  ASSERT_TRUE(all.ok());
  std::map<std::string, int> outcomes;
  for (const auto& event : *all) {
    if (event.detail.contains("attemptId")) {
      outcomes[event.detail["attemptId"].get<std::string>()] += 1;
    }
  }
  EXPECT_EQ(outcomes[first->spec.attempt_id], 1);
  EXPECT_EQ(outcomes[second->spec.attempt_id], 1);
  auto lapsed = events_of(*rt, run->id, "step-attempt-failed");
  ASSERT_EQ(lapsed.size(), 1u);
  EXPECT_EQ(lapsed[0].detail["error"]["code"], "timeout-start-to-close");
  // The transport's view keeps the refused late report.
  auto transport = tasks_of(*rt).transport_of(run->id);
  ASSERT_EQ(transport.refused.size(), 1u);
  EXPECT_EQ(transport.refused[0].reason, "stale_attempt");
  EXPECT_EQ(transport.refused[0].attempt_id, first->spec.attempt_id);
  ASSERT_EQ(transport.attempts.size(), 2u);
  EXPECT_EQ(transport.attempts[0].state, services::attempt_state::expired);
  EXPECT_EQ(transport.attempts[1].state, services::attempt_state::completed);
}

TEST_F(TaskTest, DuplicateCompletionOfOneAttemptIsRefusedAndChangesNothing) {
  auto rt = open(remote_flows({}));
  auto run = rt->start("one-remote", json(1));
  ASSERT_TRUE(run.ok());
  auto task = poll(*rt, "w");
  ASSERT_TRUE(task.has_value());
  EXPECT_TRUE(
      report(*rt, task->spec.attempt_id, "w", succeeded(1)).second.recorded);
  auto [again, answer] = report(*rt, task->spec.attempt_id, "w", succeeded(2));
  EXPECT_EQ(again, report_verdict::stale_attempt);
  auto done = rt->wait(run->id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->output, json(1));
  EXPECT_EQ(events_of(*rt, run->id, "step-completed").size(), 1u);
}

TEST_F(TaskTest, RepeatedPollRequestIdGetsTheSameTaskWhileItsLeaseHolds) {
  auto rt = open(remote_flows({}));
  ASSERT_TRUE(rt->start("one-remote", json(1)).ok());
  ASSERT_TRUE(rt->start("one-remote", json(2)).ok());
  auto first = poll(*rt, "w", "poll-7");
  ASSERT_TRUE(first.has_value());
  auto repeat = poll(*rt, "w", "poll-7");
  ASSERT_TRUE(repeat.has_value());
  EXPECT_EQ(repeat->spec.attempt_id, first->spec.attempt_id);
  // Another worker with the same poll id is another poll.
  auto other = poll(*rt, "v", "poll-7");
  ASSERT_TRUE(other.has_value());
  EXPECT_NE(other->spec.attempt_id, first->spec.attempt_id);
}

TEST_F(TaskTest, HeldNamesWhatARepeatedPollGetsBackAndClaimsNothing) {
  auto rt = open(remote_flows({}));
  auto run = rt->start("one-remote", json(1));
  ASSERT_TRUE(run.ok());
  ASSERT_TRUE(rt->start("one-remote", json(2)).ok());
  EXPECT_TRUE(tasks_of(*rt).held("w", "poll-8").empty());  // nothing polled
  ASSERT_TRUE(
      testing::eventually([&] { return tasks_of(*rt).stats().queued == 2; }));
  auto first = poll(*rt, "w", "poll-8");
  ASSERT_TRUE(first.has_value());
  for (int again = 0; again < 2; ++again) {
    auto held = tasks_of(*rt).held("w", "poll-8");
    ASSERT_EQ(held.size(), 1u);
    EXPECT_EQ(held[0].spec.attempt_id, first->spec.attempt_id);
  }
  EXPECT_EQ(tasks_of(*rt).stats().queued, 1u);  // the second still queued
  EXPECT_TRUE(tasks_of(*rt).held("v", "poll-8").empty());
  EXPECT_TRUE(tasks_of(*rt).held("w", "").empty());
  // An ended attempt is no longer held.
  EXPECT_TRUE(
      report(*rt, first->spec.attempt_id, "w", succeeded(1)).second.recorded);
  EXPECT_TRUE(tasks_of(*rt).held("w", "poll-8").empty());
}

TEST_F(TaskTest, AnAttemptIdNamesItsRun) {
  auto rt = open(remote_flows({}));
  auto run = rt->start("one-remote", json(1));
  ASSERT_TRUE(run.ok());
  auto task = poll(*rt, "w");
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(task->spec.attempt_id.substr(0, 4), "att_");
  auto named = actors::run_of_attempt(task->spec.attempt_id);
  ASSERT_TRUE(named.has_value()) << task->spec.attempt_id;
  EXPECT_EQ(*named, run->id);
  // Ids of before name no run, nor do ids durin did not make.
  EXPECT_FALSE(actors::run_of_attempt("att_0123456789abcdef01234567"));
  EXPECT_FALSE(actors::run_of_attempt("att_0123456789abcdefXXXXXXXX_run_1"));
  EXPECT_FALSE(actors::run_of_attempt("att_0123456789abcdef01234567_"));
  EXPECT_FALSE(actors::run_of_attempt("att_nope"));
  EXPECT_FALSE(actors::run_of_attempt("run_0123456789abcdef01234567_x"));
}

TEST_F(TaskTest, ReportsFromAnotherWorkerAreWrongOwnerAndUnknownIdsNotFound) {
  auto rt = open(remote_flows({}));
  auto run = rt->start("one-remote", json(1));
  ASSERT_TRUE(run.ok());
  auto task = poll(*rt, "owner");
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(report(*rt, task->spec.attempt_id, "intruder", succeeded(9)).first,
            report_verdict::wrong_owner);
  EXPECT_EQ(tasks_of(*rt)
                .heartbeat("default", task->spec.attempt_id, "intruder", {})
                .verdict,
            report_verdict::wrong_owner);
  EXPECT_EQ(report(*rt, "att_unknown", "owner", succeeded(9)).first,
            report_verdict::task_not_found);
  // Another tenant does not see the attempt at all.
  EXPECT_EQ(tasks_of(*rt).report("other", task->spec.attempt_id, "owner",
                                 succeeded(9), nullptr),
            report_verdict::task_not_found);
  // The owner's outcome still counts.
  EXPECT_TRUE(report(*rt, task->spec.attempt_id, "owner", succeeded(3))
                  .second.recorded);
  EXPECT_EQ(rt->wait(run->id, wait_max)->output, json(3));
}

TEST_F(TaskTest, HeartbeatsRenewTheLeaseAndAStaleHeartbeatIsToldToStop) {
  step_timeouts timeouts;
  timeouts.heartbeat = 1000ms;
  auto rt = open(remote_flows(timeouts));
  auto run = rt->start("one-remote", json(1));
  ASSERT_TRUE(run.ok());
  auto task = poll(*rt, "w");
  ASSERT_TRUE(task.has_value());
  for (int i = 0; i < 3; ++i) {
    clock_->advance_ms(800);
    auto beat = tasks_of(*rt).heartbeat("default", task->spec.attempt_id, "w",
                                        {"working", i, 3});
    EXPECT_EQ(beat.verdict, report_verdict::accepted);
    EXPECT_TRUE(beat.go_on);
    EXPECT_EQ(beat.lease_expires_ms, clock_->now_ms() + 1000);
  }
  auto transport = tasks_of(*rt).transport_of(run->id);
  ASSERT_EQ(transport.attempts.size(), 1u);
  EXPECT_EQ(transport.attempts[0].progress.message, "working");
  EXPECT_EQ(transport.attempts[0].heartbeats, 3u);
  clock_->advance_ms(1200);
  auto next = poll(*rt, "w2");
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->spec.attempt, 2u);
  auto stale = tasks_of(*rt).heartbeat("default", task->spec.attempt_id, "w",
                                       {"still here", -1, -1});
  EXPECT_EQ(stale.verdict, report_verdict::stale_attempt);
  EXPECT_FALSE(stale.go_on);
  auto lapsed = events_of(*rt, run->id, "step-attempt-failed");
  ASSERT_EQ(lapsed.size(), 1u);
  EXPECT_EQ(lapsed[0].detail["error"]["code"], "timeout-heartbeat");
}

// Seed 004: a task is delivered again only if its lease expires before the
// worker reports progress. A remote step without timeouts gets the default
// lease (30 s); heartbeats alone hold the attempt for many lease lengths,
// each answer carrying the new expiry, and once they stop the attempt is
// lost after exactly one lease.
TEST_F(TaskTest, HeartbeatsRenewTheLeaseForSeveralLeaseLengths) {
  constexpr std::int64_t lease_ms = 30'000;
  auto rt = open(remote_flows({}));
  auto run = rt->start("one-remote", json(1));
  ASSERT_TRUE(run.ok());
  auto task = poll(*rt, "w");
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(task->lease_expires_ms, clock_->now_ms() + lease_ms);
  // Ten heartbeats 20 s apart: 200 s, more than six lease lengths.
  for (int i = 0; i < 10; ++i) {
    clock_->advance_ms(20'000);
    auto beat = tasks_of(*rt).heartbeat("default", task->spec.attempt_id, "w",
                                        {"working", i, 10});
    ASSERT_EQ(beat.verdict, report_verdict::accepted) << "heartbeat " << i;
    ASSERT_TRUE(beat.go_on);
    EXPECT_EQ(beat.lease_expires_ms, clock_->now_ms() + lease_ms);
    // Nobody else gets it: it was never delivered again.
    EXPECT_FALSE(tasks_of(*rt).poll("default", "q", "w2", "", 0).has_value());
  }
  // Give the reaper time to look (it runs every 20 ms of real time).
  std::this_thread::sleep_for(60ms);
  EXPECT_EQ(tasks_of(*rt).stats().redeliveries, 0u);
  EXPECT_TRUE(events_of(*rt, run->id, "step-attempt-failed").empty());
  // The worker goes silent: it keeps the attempt for one lease, no more.
  clock_->advance_ms(lease_ms - 1);
  std::this_thread::sleep_for(60ms);
  EXPECT_EQ(tasks_of(*rt).stats().redeliveries, 0u);
  clock_->advance_ms(1);
  auto next = poll(*rt, "w2");
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->spec.attempt, 2u);
  EXPECT_NE(next->spec.attempt_id, task->spec.attempt_id);
  auto late =
      tasks_of(*rt).heartbeat("default", task->spec.attempt_id, "w", {});
  EXPECT_EQ(late.verdict, report_verdict::stale_attempt);
  EXPECT_FALSE(late.go_on);
  auto lapsed = events_of(*rt, run->id, "step-attempt-failed");
  ASSERT_EQ(lapsed.size(), 1u);
  EXPECT_EQ(lapsed[0].detail["error"]["code"], "timeout-heartbeat");
  EXPECT_NE(lapsed[0].detail["error"]["message"].get<std::string>().find(
                "lease of 30000 ms"),
            std::string::npos);
  EXPECT_TRUE(
      report(*rt, next->spec.attempt_id, "w2", succeeded(2)).second.recorded);
  EXPECT_EQ(rt->wait(run->id, wait_max)->output, json(2));
}

// A heartbeat that arrives after the lease lapsed, before the reaper ended
// the attempt, does not bring the lease back.
TEST_F(TaskTest, AHeartbeatAfterTheLeaseLapsedIsStale) {
  step_timeouts timeouts;
  timeouts.heartbeat = 1000ms;
  auto rt = open(remote_flows(timeouts));
  ASSERT_TRUE(rt->start("one-remote", json(1)).ok());
  auto task = poll(*rt, "w");
  ASSERT_TRUE(task.has_value());
  clock_->advance_ms(1000);
  auto beat =
      tasks_of(*rt).heartbeat("default", task->spec.attempt_id, "w", {});
  EXPECT_EQ(beat.verdict, report_verdict::stale_attempt);
  EXPECT_FALSE(beat.go_on);
  auto next = poll(*rt, "w2");
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->spec.attempt, 2u);
}

// start-to-close is a deadline for the attempt: heartbeats renew the lease
// up to it, never past it.
TEST_F(TaskTest, HeartbeatsDoNotMoveTheStartToCloseDeadline) {
  step_timeouts timeouts;
  timeouts.heartbeat = 1000ms;
  timeouts.start_to_close = 2500ms;
  auto rt = open(remote_flows(timeouts));
  auto run = rt->start("one-remote", json(1));
  ASSERT_TRUE(run.ok());
  auto task = poll(*rt, "w");
  ASSERT_TRUE(task.has_value());
  auto deadline = clock_->now_ms() + 2500;
  clock_->advance_ms(800);
  auto beat =
      tasks_of(*rt).heartbeat("default", task->spec.attempt_id, "w", {});
  EXPECT_EQ(beat.lease_expires_ms, clock_->now_ms() + 1000);
  clock_->advance_ms(800);
  beat = tasks_of(*rt).heartbeat("default", task->spec.attempt_id, "w", {});
  EXPECT_EQ(beat.lease_expires_ms, deadline);
  clock_->advance_ms(900);
  auto next = poll(*rt, "w2");
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->spec.attempt, 2u);
  auto lapsed = events_of(*rt, run->id, "step-attempt-failed");
  ASSERT_EQ(lapsed.size(), 1u);
  EXPECT_EQ(lapsed[0].detail["error"]["code"], "timeout-start-to-close");
}

// The default lease is the runtime's task_lease: a node may choose it.
TEST_F(TaskTest, TheDefaultLeaseIsTheRuntimesTaskLease) {
  auto flows = remote_flows({});
  runtime_options options;
  options.data_dir = dir_.path();
  options.clock = clock_;
  options.task_lease = 5000ms;
  auto opened = runtime::open(options, flows);
  ASSERT_TRUE(opened.ok()) << opened.error().to_string();
  auto& rt = **opened;
  ASSERT_TRUE(rt.start("one-remote", json(1)).ok());
  auto task = poll(rt, "w");
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(task->lease_expires_ms, clock_->now_ms() + 5000);
  for (int i = 0; i < 4; ++i) {
    clock_->advance_ms(4000);
    EXPECT_EQ(tasks_of(rt)
                  .heartbeat("default", task->spec.attempt_id, "w", {})
                  .lease_expires_ms,
              clock_->now_ms() + 5000);
  }
  options.task_lease = 0ms;
  options.data_dir = dir_.path() + "/other";
  auto refused = runtime::open(options, flows);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::invalid_argument);
}

// Issue 12, item 14: one tenant's counters say nothing about another's.
TEST_F(TaskTest, TaskCountsAreScopedToTheCallersTenant) {
  auto rt = open(remote_flows({}));
  start_options in_a;
  in_a.tenant = "tenant-a";
  auto run = rt->start("one-remote", json(1), in_a);
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  auto task = tasks_of(*rt).poll("tenant-a", "q", "w", "", 5000);
  ASSERT_TRUE(task.has_value());
  // A refused report of tenant b counts for tenant b only.
  EXPECT_EQ(tasks_of(*rt).report("tenant-b", task->spec.attempt_id, "w",
                                 succeeded(0), nullptr),
            report_verdict::task_not_found);
  auto a = tasks_of(*rt).stats("tenant-a");
  auto b = tasks_of(*rt).stats("tenant-b");
  EXPECT_EQ(a.running, 1u);
  EXPECT_EQ(a.refused_reports, 0u);
  EXPECT_EQ(b.running, 0u);
  EXPECT_EQ(b.queued, 0u);
  EXPECT_EQ(b.refused_reports, 1u);
  auto answered = std::make_shared<std::promise<report_answer>>();
  ASSERT_EQ(tasks_of(*rt).report(
                "tenant-a", task->spec.attempt_id, "w", succeeded(7),
                [answered](report_answer got) { answered->set_value(got); }),
            report_verdict::accepted);
  ASSERT_TRUE(answered->get_future().get().recorded);
  EXPECT_EQ(tasks_of(*rt).stats("tenant-a").completed, 1u);
  EXPECT_EQ(tasks_of(*rt).stats("tenant-b").completed, 0u);
  EXPECT_EQ(tasks_of(*rt).stats("tenant-c").completed, 0u);
  // The node-wide view, for operators, counts both.
  auto node = tasks_of(*rt).stats();
  EXPECT_EQ(node.completed, 1u);
  EXPECT_EQ(node.refused_reports, 1u);
}

TEST_F(TaskTest, ReportsAfterCancelAreRefusedRunCancelled) {
  auto rt = open(remote_flows({}));
  auto run = rt->start("one-remote", json(1));
  ASSERT_TRUE(run.ok());
  auto task = poll(*rt, "w");
  ASSERT_TRUE(task.has_value());
  ASSERT_TRUE(rt->cancel(run->id, "changed my mind").ok());
  auto beat =
      tasks_of(*rt).heartbeat("default", task->spec.attempt_id, "w", {});
  EXPECT_EQ(beat.verdict, report_verdict::run_cancelled);
  EXPECT_FALSE(beat.go_on);
  auto [verdict, answer] =
      report(*rt, task->spec.attempt_id, "w", succeeded(1));
  EXPECT_EQ(verdict, report_verdict::run_cancelled);
  EXPECT_EQ(rt->get(run->id)->status, run_status::cancelled);
  EXPECT_TRUE(events_of(*rt, run->id, "step-completed").empty());
}

TEST_F(TaskTest, ScheduleToStartTimeoutIsRecordedAndTheStepQueuedAgain) {
  step_timeouts timeouts;
  timeouts.schedule_to_start = 500ms;
  auto rt = open(remote_flows(timeouts));
  auto run = rt->start("one-remote", json(1));
  ASSERT_TRUE(run.ok());
  ASSERT_TRUE(testing::eventually(
      [&] { return tasks_of(*rt).stats().queued == 1; }, wait_max));
  clock_->advance_ms(600);
  ASSERT_TRUE(testing::eventually(
      [&] {
        return events_of(*rt, run->id, "step-attempt-failed").size() == 1;
      },
      wait_max));
  auto lapsed = events_of(*rt, run->id, "step-attempt-failed");
  EXPECT_EQ(lapsed[0].detail["error"]["code"], "timeout-schedule-to-start");
  auto task = poll(*rt, "w");
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(task->spec.attempt, 2u);
}

TEST_F(TaskTest, ScheduleToCloseTimeoutFailsTheStepForGood) {
  step_timeouts timeouts;
  timeouts.schedule_to_close = 1000ms;
  timeouts.start_to_close = 400ms;
  auto rt = open(remote_flows(timeouts, 100));
  auto run = rt->start("one-remote", json(1));
  ASSERT_TRUE(run.ok());
  // Attempts keep timing out until the step's own deadline passes.
  for (int i = 0; i < 4; ++i) {
    auto task = poll(*rt, "w");
    if (!task) {
      break;
    }
    clock_->advance_ms(450);
  }
  auto done = rt->wait(run->id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->status, run_status::failed);
  auto failed_events = events_of(*rt, run->id, "step-failed");
  ASSERT_EQ(failed_events.size(), 1u);
  EXPECT_EQ(failed_events[0].detail["error"]["code"],
            "timeout-schedule-to-close");
}

TEST_F(TaskTest, WorkerFailureIsRetriedUnlessNotRetryable) {
  auto rt = open(remote_flows({}));
  auto run = rt->start("one-remote", json(1));
  ASSERT_TRUE(run.ok());
  auto first = poll(*rt, "w");
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(report(*rt, first->spec.attempt_id, "w", failed(true, "flaky"))
                  .second.recorded);
  auto second = poll(*rt, "w");
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->spec.attempt, 2u);
  EXPECT_TRUE(
      report(*rt, second->spec.attempt_id, "w", failed(false, "card declined"))
          .second.recorded);
  auto done = rt->wait(run->id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->status, run_status::failed);
  EXPECT_NE(done->error->message.find("card declined"), std::string::npos);
}

TEST_F(TaskTest, AttemptInFlightAtRestartIsDeliveredAgainAsANewAttempt) {
  std::string run_id;
  std::string old_attempt;
  {
    auto rt = open(remote_flows({}));
    auto run = rt->start("one-remote", json(1));
    ASSERT_TRUE(run.ok());
    run_id = run->id;
    auto task = poll(*rt, "w");
    ASSERT_TRUE(task.has_value());
    old_attempt = task->spec.attempt_id;
  }
  auto rt = open(remote_flows({}));
  auto task = poll(*rt, "w");
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(task->spec.run_id, run_id);
  EXPECT_NE(task->spec.attempt_id, old_attempt);
  // The old worker's report reaches a node that never leased it.
  EXPECT_EQ(report(*rt, old_attempt, "w", succeeded(0)).first,
            report_verdict::task_not_found);
  EXPECT_TRUE(
      report(*rt, task->spec.attempt_id, "w", succeeded(5)).second.recorded);
  EXPECT_EQ(rt->wait(run_id, wait_max)->output, json(5));
}

TEST_F(TaskTest, OperatorCountersShowUnpolledQueuesStuckLeasesRedeliveries) {
  step_timeouts timeouts;
  timeouts.start_to_close = 120'000ms;
  auto rt = open(remote_flows(timeouts));
  auto run = rt->start("one-remote", json(1));
  ASSERT_TRUE(run.ok());
  ASSERT_TRUE(testing::eventually(
      [&] { return tasks_of(*rt).stats().queued == 1; }, wait_max));
  // Nobody ever polled queue q.
  EXPECT_EQ(tasks_of(*rt).stats().queued_unpolled, 1u);
  auto task = poll(*rt, "w");
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(tasks_of(*rt).stats().queued_unpolled, 0u);
  EXPECT_EQ(tasks_of(*rt).stats().stuck_leases, 0u);
  clock_->advance_ms(61'000);
  EXPECT_EQ(tasks_of(*rt).stats().stuck_leases, 1u);
  EXPECT_TRUE(
      tasks_of(*rt).heartbeat("default", task->spec.attempt_id, "w", {}).go_on);
  EXPECT_EQ(tasks_of(*rt).stats().stuck_leases, 0u);
  clock_->advance_ms(120'000);
  ASSERT_TRUE(testing::eventually(
      [&] { return tasks_of(*rt).stats().redeliveries == 1; }, wait_max));
  ASSERT_TRUE(testing::eventually(
      [&] { return tasks_of(*rt).list("default", 10).size() == 1; }, wait_max));
  EXPECT_EQ(tasks_of(*rt).list("default", 10)[0].attempt, 2u);
  EXPECT_TRUE(tasks_of(*rt).list("other", 10).empty());
}

// In-node steps: the same rules without a worker process.
std::atomic<int> release_gate{0};

flow<json> local_blocking(context& ctx, json) {
  step_options options("blocking");
  options.retry.max_attempts = 3;
  options.retry.initial_backoff = 1ms;
  options.timeouts.start_to_close = 1000ms;
  auto value = co_await ctx.step(options, []() -> json {
    const auto& meta = step_metadata();
    if (meta.attempt == 1) {
      while (release_gate.load() == 0) {
        std::this_thread::sleep_for(1ms);
      }
      return json("late first attempt");
    }
    return json{{"attempt", meta.attempt},
                {"stepId", meta.step_id},
                {"attemptId", meta.attempt_id},
                {"runId", meta.run_id},
                {"instanceId", meta.instance_id}};
  });
  co_return value;
}

TEST_F(TaskTest, InNodeStartToCloseTimeoutRefusesTheLateOutcome) {
  registry flows;
  flows.flow("local-blocking", local_blocking);
  auto rt = open(flows);
  release_gate = 0;
  auto run = rt->start("local-blocking", json());
  ASSERT_TRUE(run.ok());
  ASSERT_TRUE(testing::eventually(
      [&] { return tasks_of(*rt).stats().running == 1; }, wait_max));
  clock_->advance_ms(1100);
  auto done = rt->wait(run->id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->output["attempt"], 2);
  EXPECT_EQ(done->output["stepId"], run->id + "/1");
  EXPECT_EQ(done->output["runId"], run->id);
  EXPECT_EQ(done->output["instanceId"], run->id);
  release_gate = 1;
  ASSERT_TRUE(testing::eventually(
      [&] { return tasks_of(*rt).stats().refused_reports >= 1; }, wait_max));
  EXPECT_EQ(events_of(*rt, run->id, "step-completed").size(), 1u);
  auto lapsed = events_of(*rt, run->id, "step-attempt-failed");
  ASSERT_EQ(lapsed.size(), 1u);
  EXPECT_EQ(lapsed[0].detail["error"]["code"], "timeout-start-to-close");
}

std::atomic<int> beats_seen{0};
std::atomic<bool> told_to_stop{false};

flow<json> local_heartbeats(context& ctx, json) {
  auto value = co_await ctx.step("beating", []() -> json {
    int beats = 0;
    while (heartbeat({"tick", beats, -1})) {
      ++beats;
      beats_seen = beats;
      std::this_thread::sleep_for(1ms);
    }
    told_to_stop = true;
    return json(beats);
  });
  co_return value;
}

TEST_F(TaskTest, InNodeHeartbeatAnswersStopOnceTheRunIsCancelled) {
  registry flows;
  flows.flow("local-heartbeats", local_heartbeats);
  auto rt = open(flows);
  beats_seen = 0;
  told_to_stop = false;
  auto run = rt->start("local-heartbeats", json());
  ASSERT_TRUE(run.ok());
  ASSERT_TRUE(
      testing::eventually([&] { return beats_seen.load() > 3; }, wait_max));
  ASSERT_TRUE(rt->cancel(run->id).ok());
  // The body sees false and returns; its outcome changes nothing.
  ASSERT_TRUE(
      testing::eventually([&] { return told_to_stop.load(); }, wait_max));
  EXPECT_EQ(rt->get(run->id)->status, run_status::cancelled);
  EXPECT_TRUE(events_of(*rt, run->id, "step-completed").empty());
}

TEST_F(TaskTest, StepMetadataOutsideAStepThrows) {
  EXPECT_THROW((void)step_metadata(), std::logic_error);
  EXPECT_THROW((void)heartbeat(), std::logic_error);
}

// Worker sessions (ctx.session): `steps` steps in one session, going on
// past failed ones, then one step in a second session.
flow<json> two_sessions(context& ctx, json input) {
  auto first = ctx.session({"sq", 5000ms});
  json results = json::array();
  json failures = json::array();
  for (int i = 0; i < input.value("steps", 3); ++i) {
    try {
      results.push_back(co_await first.step<json>("remote", i));
    } catch (const step_failed_error& e) {
      failures.push_back(
          {{"step", i}, {"code", e.code()}, {"attempts", e.attempts()}});
    }
  }
  auto second = ctx.session({"sq", 5000ms});
  auto last = co_await second.step<json>("remote", "second");
  co_return json{
      {"results", results}, {"failures", failures}, {"second", last}};
}

flow<json> bad_session(context& ctx, json) {
  auto session = ctx.session({"", 5000ms});
  co_return co_await session.step<json>("remote", 1);
}

class SessionTest : public TaskTest {
 protected:
  std::unique_ptr<runtime> open_sessions(step_timeouts timeouts = {}) {
    auto flows = remote_flows(timeouts);
    flows.flow("two-sessions", two_sessions);
    flows.flow("bad-session", bad_session);
    return open(flows);
  }

  static std::optional<claimed_task> poll_sessions(runtime& rt,
                                                   const std::string& who,
                                                   std::int64_t wait_ms) {
    return tasks_of(rt).poll("default", "sq", who, "", wait_ms);
  }

  // Returns once the task service's expiry thread has looked for lapsed
  // attempts at least once after this call began: a parked poll (on a
  // queue of its own, by a worker of its own) is answered only by that
  // thread, and the second is parked after the first's pass ended.
  static void reaper_pass(runtime& rt) {
    for (int i = 0; i < 2; ++i) {
      auto answered = std::make_shared<std::promise<void>>();
      auto future = answered->get_future();
      auto parking = tasks_of(rt).poll_async(
          "default", "barrier", "barrier-worker", "", 30, 1, 1000,
          [answered](std::vector<claimed_task>) { answered->set_value(); });
      ASSERT_EQ(parking, services::poll_parking::parked);
      ASSERT_EQ(future.wait_for(wait_max), std::future_status::ready);
    }
  }

  // Waits until `count` attempts are queued.
  static void wait_queued(runtime& rt, std::size_t count) {
    ASSERT_TRUE(testing::eventually(
        [&] { return tasks_of(rt).stats().queued == count; }, wait_max));
  }
};

TEST_F(SessionTest, EveryStepOfASessionGoesToTheWorkerOfItsFirstReport) {
  auto rt = open_sessions();
  auto run = rt->start("two-sessions", json{{"steps", 3}});
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  for (int i = 0; i < 3; ++i) {
    wait_queued(*rt, 1);
    if (i > 0) {
      // Pinned to w1: another worker of the queue never gets it.
      EXPECT_FALSE(poll_sessions(*rt, "w2", 0).has_value()) << i;
    }
    auto task = poll_sessions(*rt, "w1", 5000);
    ASSERT_TRUE(task.has_value()) << i;
    EXPECT_EQ(task->spec.session_worker, i == 0 ? "" : "w1");
    EXPECT_EQ(task->spec.args, json::array({i}));
    auto [verdict, answer] =
        report(*rt, task->spec.attempt_id, "w1", succeeded(json(i * 10)));
    EXPECT_TRUE(answer.recorded) << answer.reason;
  }
  // The second session is bound anew, to whoever reports its first step.
  wait_queued(*rt, 1);
  auto last = poll_sessions(*rt, "w2", 5000);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->spec.session_worker, "");
  EXPECT_TRUE(report(*rt, last->spec.attempt_id, "w2", succeeded("second"))
                  .second.recorded);
  auto done = rt->wait(run->id, wait_max);
  ASSERT_TRUE(done.ok());
  ASSERT_EQ(done->status, run_status::completed) << done->error->message;
  EXPECT_EQ(done->output["results"], json::array({0, 10, 20}));
  EXPECT_EQ(done->output["failures"], json::array());
  auto bound = events_of(*rt, run->id, "session-bound");
  ASSERT_EQ(bound.size(), 2u);
  EXPECT_EQ(bound[0].detail["call"], 1);
  EXPECT_EQ(bound[0].detail["value"], (json{{"session", 1}, {"worker", "w1"}}));
  EXPECT_EQ(bound[1].detail["call"], 4);
  EXPECT_EQ(bound[1].detail["value"], (json{{"session", 2}, {"worker", "w2"}}));
}

TEST_F(SessionTest,
       AStepWaitingForALostWorkerFailsTheSessionAndEveryLaterStepOfIt) {
  auto rt = open_sessions();
  auto run = rt->start("two-sessions", json{{"steps", 3}});
  ASSERT_TRUE(run.ok());
  wait_queued(*rt, 1);
  auto first = poll_sessions(*rt, "w1", 5000);
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(report(*rt, first->spec.attempt_id, "w1", succeeded("one"))
                  .second.recorded);
  wait_queued(*rt, 1);
  // w1 goes silent; w2 polls. Within the worker timeout nothing is lost.
  clock_->advance_ms(4000);
  EXPECT_FALSE(poll_sessions(*rt, "w2", 0).has_value());
  reaper_pass(*rt);
  EXPECT_EQ(tasks_of(*rt).stats().queued, 1u);
  clock_->advance_ms(1500);
  // Past it, the step fails, the session's next step fails at once, and
  // the second session's step waits for any worker.
  wait_queued(*rt, 1);
  auto last = poll_sessions(*rt, "w2", 5000);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->spec.args, json::array({"second"}));
  EXPECT_EQ(last->spec.session_worker, "");
  EXPECT_TRUE(report(*rt, last->spec.attempt_id, "w2", succeeded("two"))
                  .second.recorded);
  auto done = rt->wait(run->id, wait_max);
  ASSERT_TRUE(done.ok());
  ASSERT_EQ(done->status, run_status::completed);
  EXPECT_EQ(done->output["results"], json::array({"one"}));
  EXPECT_EQ(done->output["failures"],
            json::array(
                {{{"step", 1}, {"code", "session-failed"}, {"attempts", 1}},
                 {{"step", 2}, {"code", "session-failed"}, {"attempts", 0}}}));
  auto failed = events_of(*rt, run->id, "step-failed");
  ASSERT_EQ(failed.size(), 2u);
  EXPECT_NE(failed[0].detail["error"]["message"].get<std::string>().find(
                "'w1' was lost"),
            std::string::npos)
      << failed[0].detail.dump();
  EXPECT_EQ(failed[1].detail["attempt"], 0);
  auto transport = tasks_of(*rt).transport_of(run->id);
  ASSERT_EQ(transport.attempts.size(), 3u);
  EXPECT_EQ(transport.attempts[1].timeout, "worker-lost");
  EXPECT_EQ(transport.attempts[1].session_worker, "w1");
}

TEST_F(SessionTest, ASessionStepWhoseLeaseLapsesFailsTheSession) {
  step_timeouts timeouts;
  timeouts.heartbeat = 1000ms;
  auto rt = open_sessions(timeouts);
  auto run = rt->start("two-sessions", json{{"steps", 2}});
  ASSERT_TRUE(run.ok());
  wait_queued(*rt, 1);
  auto first = poll_sessions(*rt, "w1", 5000);
  ASSERT_TRUE(first.has_value());
  // Its worker dies holding the session's first step: no other worker
  // gets that step again, the session fails.
  clock_->advance_ms(1200);
  wait_queued(*rt, 1);
  auto last = poll_sessions(*rt, "w2", 5000);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->spec.args, json::array({"second"}));
  EXPECT_TRUE(report(*rt, last->spec.attempt_id, "w2", succeeded("two"))
                  .second.recorded);
  auto done = rt->wait(run->id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->output["failures"].size(), 2u) << done->output.dump();
  EXPECT_EQ(done->output["failures"][0]["code"], "session-failed");
  EXPECT_TRUE(events_of(*rt, run->id, "step-attempt-failed").empty());
}

TEST_F(SessionTest,
       APinnedStepWaitsForItsWorkerThroughManyTimeoutsWhileItPolls) {
  auto rt = open_sessions();
  auto run = rt->start("two-sessions", json{{"steps", 2}});
  ASSERT_TRUE(run.ok());
  wait_queued(*rt, 1);
  auto first = poll_sessions(*rt, "w1", 5000);
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(report(*rt, first->spec.attempt_id, "w1", succeeded("one"))
                  .second.recorded);
  wait_queued(*rt, 1);
  // Four worker timeouts pass; w1 polls another queue every 3 s of them.
  for (int i = 0; i < 4; ++i) {
    clock_->advance_ms(3000);
    EXPECT_FALSE(
        tasks_of(*rt).poll("default", "other", "w1", "", 0).has_value());
    reaper_pass(*rt);
    EXPECT_EQ(tasks_of(*rt).stats().queued, 1u) << i;
  }
  auto second = poll_sessions(*rt, "w1", 5000);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->spec.session_worker, "w1");
  EXPECT_EQ(second->spec.args, json::array({1}));
  EXPECT_EQ(second->spec.attempt, 1u);
}

TEST_F(SessionTest, ASessionKeepsItsWorkerAcrossARestart) {
  std::string id;
  {
    auto rt = open_sessions();
    auto run = rt->start("two-sessions", json{{"steps", 2}});
    ASSERT_TRUE(run.ok());
    id = run->id;
    wait_queued(*rt, 1);
    auto first = poll_sessions(*rt, "w1", 5000);
    ASSERT_TRUE(first.has_value());
    EXPECT_TRUE(report(*rt, first->spec.attempt_id, "w1", succeeded("one"))
                    .second.recorded);
    wait_queued(*rt, 1);
  }
  // Replay binds the session from its history: the step in flight is
  // pinned to w1 again.
  auto rt = open_sessions();
  wait_queued(*rt, 1);
  EXPECT_FALSE(poll_sessions(*rt, "w2", 0).has_value());
  auto again = poll_sessions(*rt, "w1", 5000);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->spec.session_worker, "w1");
  EXPECT_EQ(again->spec.run_id, id);
  EXPECT_EQ(again->spec.args, json::array({1}));
}

TEST_F(SessionTest, ASessionWithoutATaskQueueIsRefusedNamingIt) {
  auto rt = open_sessions();
  auto run = rt->start("bad-session", json());
  ASSERT_TRUE(run.ok());
  auto done = rt->wait(run->id, wait_max);
  ASSERT_TRUE(done.ok());
  ASSERT_EQ(done->status, run_status::failed);
  EXPECT_EQ(done->error->code, "invalid-argument");
  EXPECT_NE(done->error->message.find("ctx.session"), std::string::npos)
      << done->error->message;
}

}  // namespace
}  // namespace durin
