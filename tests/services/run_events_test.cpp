// The run-event hub's contract: a subscription is told once, by the first
// event it asks for; one waiting for the end is not told a run that only
// waits; an ended subscription is gone; listeners may subscribe again from
// inside a call; clear() ends all of them untold.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "services/run_events.hpp"

namespace durin::testing {
namespace {

using services::run_event;
using services::run_events;

run_event event_of(const std::string& id, run_status status) {
  run_event event;
  event.run.id = id;
  event.run.status = status;
  event.ended = is_terminal(status);
  return event;
}

TEST(RunEventsTest, ASubscriptionIsToldOnceByTheFirstEventItAsksFor) {
  run_events hub;
  std::vector<run_status> settled;
  std::vector<run_status> ended;
  hub.subscribe("run_a", run_events::until::settled,
                [&](const run_event& e) { settled.push_back(e.run.status); });
  hub.subscribe("run_a", run_events::until::ended,
                [&](const run_event& e) { ended.push_back(e.run.status); });
  hub.publish(event_of("run_a", run_status::waiting));
  EXPECT_EQ(settled, std::vector<run_status>{run_status::waiting});
  EXPECT_TRUE(ended.empty());
  EXPECT_TRUE(hub.listening("run_a"));
  hub.publish(event_of("run_a", run_status::completed));
  EXPECT_EQ(settled, std::vector<run_status>{run_status::waiting});
  EXPECT_EQ(ended, std::vector<run_status>{run_status::completed});
  EXPECT_FALSE(hub.listening("run_a"));
}

TEST(RunEventsTest, AnotherRunsEventsAreNotTold) {
  run_events hub;
  int told = 0;
  hub.subscribe("run_a", run_events::until::settled,
                [&](const run_event&) { ++told; });
  hub.publish(event_of("run_b", run_status::completed));
  EXPECT_EQ(told, 0);
  EXPECT_FALSE(hub.listening("run_b"));
}

TEST(RunEventsTest, AnUnsubscribedListenerIsNeverTold) {
  run_events hub;
  int told = 0;
  auto id = hub.subscribe("run_a", run_events::until::settled,
                          [&](const run_event&) { ++told; });
  hub.unsubscribe("run_a", id);
  hub.unsubscribe("run_a", id);  // a second time changes nothing
  hub.publish(event_of("run_a", run_status::completed));
  EXPECT_EQ(told, 0);
}

TEST(RunEventsTest, AListenerMaySubscribeAgainFromItsCall) {
  run_events hub;
  std::vector<run_status> told;
  hub.subscribe("run_a", run_events::until::settled, [&](const run_event& e) {
    told.push_back(e.run.status);
    hub.subscribe("run_a", run_events::until::ended,
                  [&](const run_event& e2) { told.push_back(e2.run.status); });
  });
  hub.publish(event_of("run_a", run_status::waiting));
  hub.publish(event_of("run_a", run_status::failed));
  EXPECT_EQ(told,
            (std::vector<run_status>{run_status::waiting, run_status::failed}));
}

TEST(RunEventsTest, ClearEndsEverySubscriptionUntold) {
  run_events hub;
  int told = 0;
  hub.subscribe("run_a", run_events::until::ended,
                [&](const run_event&) { ++told; });
  hub.clear();
  hub.publish(event_of("run_a", run_status::completed));
  EXPECT_EQ(told, 0);
}

TEST(RunEventsTest, ConcurrentSubscribersOfOneRunAreEachToldOnce) {
  run_events hub;
  std::atomic<int> told{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        hub.subscribe("run_a", run_events::until::ended,
                      [&](const run_event&) { ++told; });
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  hub.publish(event_of("run_a", run_status::completed));
  hub.publish(event_of("run_a", run_status::completed));
  EXPECT_EQ(told.load(), 4000);
}

}  // namespace
}  // namespace durin::testing
