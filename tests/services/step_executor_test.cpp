// The step executor's wake-ups: it wakes few threads for a burst of quick
// steps, yet a step never waits behind a long body while a thread sleeps,
// and no submitted step is ever left in the queue.
//
// Method: a real executor; bodies block on promises the test fulfils, and
// every wait is bounded so that a lost wake-up fails instead of hanging.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "services/step_executor.hpp"

namespace durin::testing {
namespace {

using namespace std::chrono_literals;

services::step_task task_of(std::function<json()> body,
                            std::function<void()> done) {
  services::step_task task;
  task.info.step_name = "test";
  task.body = std::move(body);
  task.done = [done = std::move(done)](services::step_outcome) { done(); };
  return task;
}

TEST(StepExecutorTest, AStepQueuedBehindALongBodyRunsWhileAThreadSleeps) {
  services::step_executor executor(2, 100);
  std::promise<void> release;
  auto released = release.get_future().share();
  std::promise<void> long_started;
  std::promise<void> quick_done;
  // Submitted back to back: the second finds a wake already on its way,
  // so the thread that takes the first must wake a successor for it.
  ASSERT_TRUE(executor.submit(task_of(
      [&long_started, released] {
        long_started.set_value();
        released.wait();
        return json();
      },
      [] {})));
  ASSERT_TRUE(executor.submit(task_of(
      [] { return json(); }, [&quick_done] { quick_done.set_value(); })));
  EXPECT_EQ(quick_done.get_future().wait_for(5s), std::future_status::ready);
  ASSERT_EQ(long_started.get_future().wait_for(5s), std::future_status::ready);
  release.set_value();
}

TEST(StepExecutorTest, EveryStepOfBurstsFromManyThreadsRuns) {
  services::step_executor executor(8, 100'000);
  constexpr int submitters = 8;
  constexpr int rounds = 200;
  constexpr int per_round = 10;
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < submitters; ++t) {
    threads.emplace_back([&] {
      for (int r = 0; r < rounds; ++r) {
        for (int i = 0; i < per_round; ++i) {
          EXPECT_TRUE(executor.submit(
              task_of([] { return json(1); }, [&done] { done.fetch_add(1); })));
        }
        // Let the pool fall asleep now and then, so that bursts find
        // sleeping threads.
        if (r % 20 == 0) {
          std::this_thread::sleep_for(2ms);
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  const int expected = submitters * rounds * per_round;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (done.load() < expected &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(done.load(), expected);
}

TEST(StepExecutorTest, LongBodiesOccupyEveryThreadBeforeAnyStepWaits) {
  // Four blocking bodies on four threads: all four run at once.
  services::step_executor executor(4, 100);
  std::promise<void> release;
  auto released = release.get_future().share();
  std::atomic<int> running{0};
  std::promise<void> all_running;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(executor.submit(task_of(
        [&, released] {
          if (running.fetch_add(1) + 1 == 4) {
            all_running.set_value();
          }
          released.wait();
          return json();
        },
        [] {})));
  }
  EXPECT_EQ(all_running.get_future().wait_for(5s), std::future_status::ready);
  release.set_value();
}

}  // namespace
}  // namespace durin::testing
