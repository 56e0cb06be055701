// The runtime seams the gateway relies on, on a real store and real actors:
// a start's key kept in its run's admission batch (with and without a start
// hook), the run-event hub's settled events,
// the event-driven wait that also answers when a run waits, and the store's
// runs-by-status counts (counted at the first call, then kept by writes, and
// counted again after a restart).
//
// Method: a runtime on a temp dir with a manual clock, so a sleeping run
// waits until the test advances time; results are read back from the store.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "actors/admission.hpp"
#include "durin/flow.hpp"
#include "durin/runtime.hpp"
#include "persistence/auth_store.hpp"
#include "persistence/requests.hpp"
#include "services/node.hpp"
#include "services/runtime_access.hpp"
#include "services/start.hpp"
#include "tests/support/storage_faults.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin::testing {
namespace {

constexpr auto long_wait = std::chrono::seconds(30);

flow<json> quick(context&, json input) {
  co_return input;
}

flow<json> nap(context& ctx, json) {
  co_await ctx.sleep(std::chrono::hours(1));
  co_return json{{"slept", true}};
}

// Holds its step until the test opens `gate`.
std::shared_ptr<std::promise<void>> gate;
std::shared_future<void> gate_open;

flow<json> gated(context& ctx, json) {
  auto waited = co_await ctx.step("gate", [] {
    gate_open.wait();
    return true;
  });
  co_return json{{"passed", waited}};
}

// Its step tells whether its own run is in the store.
std::atomic<services::node*> looked_in{nullptr};

flow<json> looks(context& ctx, json) {
  auto stored = co_await ctx.step("look", [] {
    const auto& id = step_metadata().run_id;
    auto run = looked_in.load()->shard_of_run(id).store->get_run(id);
    return run.ok() && run->has_value();
  });
  co_return json{{"stored", stored}};
}

class NodeSeamsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gate = std::make_shared<std::promise<void>>();
    gate_open = gate->get_future().share();
    open();
  }
  void TearDown() override {
    gate->set_value();
    node_.reset();
  }
  void open() {
    node_.reset();
    registry flows;
    flows.flow("quick", quick);
    flows.flow("nap", nap);
    flows.flow("gated", gated);
    flows.flow("looks", looks);
    runtime_options options;
    options.data_dir = dir_.path();
    options.clock = clock_;
    auto opened = runtime::open(options, std::move(flows));
    ASSERT_TRUE(opened.ok()) << opened.error().to_string();
    node_ = std::move(*opened);
  }
  services::node& node() { return runtime_access::services(*node_); }
  // The request store of `key`'s shard.
  persistence::request_store requests(const persistence::request_address& key) {
    auto& shard = node().shard_of_key(key);
    return {*shard.store, *shard.committer};
  }
  // A start's key as the gateway hands it down (plain data), under `key`.
  static persistence::start_key key_named(const std::string& key) {
    return {.address = {"default", "caller", key},
            .fingerprint = "fp",
            .instance_id = "test",
            .lease_ms = 30'000,
            .keep_ms = 3'600'000};
  }
  // Starts through the node's one start, as the gateway does; `told` gets
  // the run-event hub's first settled event of the run, if any.
  struct told_events {
    std::mutex mutex;
    std::vector<services::run_event> events;
    std::vector<services::run_event> when_told() {
      for (int i = 0; i < 500; ++i) {
        {
          std::lock_guard lock(mutex);
          if (!events.empty()) {
            return events;
          }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return {};
    }
  };
  result<run_info> start(const std::string& flow, json input,
                         start_options options, actors::start_answer answer,
                         std::shared_ptr<told_events> told = nullptr) {
    auto& node = runtime_access::services(*node_);
    services::start_request request{.flow = flow,
                                    .input = std::move(input),
                                    .options = std::move(options),
                                    .answer = std::move(answer)};
    request.run_id = services::draw_run_id(node, request);
    if (told) {
      node.events.subscribe(request.run_id,
                            services::run_events::until::settled,
                            [told](const services::run_event& event) {
                              std::lock_guard lock(told->mutex);
                              told->events.push_back(event);
                            });
    }
    std::promise<result<run_info>> answered;
    auto future = answered.get_future();
    services::start_run(node, std::move(request),
                        [&answered](result<run_info> outcome) {
                          answered.set_value(std::move(outcome));
                        });
    return future.get();
  }
  result<run_info> start_keyed(const std::string& flow, json input,
                               const std::string& key,
                               start_options options = {}) {
    return start(flow, std::move(input), std::move(options),
                 {.key = key_named(key)});
  }
  result<run_info> start_settling(const std::string& flow, json input,
                                  const std::string& key,
                                  std::shared_ptr<told_events> told) {
    return start(flow, std::move(input), {},
                 {.key = key_named(key), .when_settled = true},
                 std::move(told));
  }
  // The run a key's record names: its kept answer's, or, when the key lives
  // in another shard than the run, its in-flight marker's (the gateway
  // keeps the answer there afterwards).
  static std::string answered_id(const persistence::request_record& record) {
    if (record.state == persistence::request_state::in_flight) {
      return record.body;
    }
    return json::parse(record.body).value("id", std::string());
  }
  // Counts the node's group writes from now on; the n-th gets `fault`
  // (tests/support/storage_faults.hpp).
  std::shared_ptr<std::atomic<int>> count_writes(
      int n = 0, testing::storage_fault fault = testing::storage_fault::none) {
    auto writes = std::make_shared<std::atomic<int>>(0);
    testing::inject_storage_faults(*node_, [writes, n, fault] {
      return ++*writes == n ? fault : testing::storage_fault::none;
    });
    return writes;
  }
  std::optional<persistence::request_record> record_of(const std::string& key) {
    persistence::request_address address{"default", "caller", key};
    auto found = requests(address).get(address);
    EXPECT_TRUE(found.ok());
    return found.ok() ? *found : std::nullopt;
  }

  temp_dir dir_;
  std::shared_ptr<manual_clock> clock_ =
      std::make_shared<manual_clock>(1'700'000'000'000);
  std::unique_ptr<runtime> node_;
};

TEST_F(NodeSeamsTest, AStartsKeyIsKeptWithTheRunsAdmission) {
  auto run = start_keyed("quick", json{{"a", 1}}, "plain");
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  auto record = record_of("plain");
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->state, persistence::request_state::kept);
  EXPECT_EQ(record->http_status, 202);
  EXPECT_EQ(answered_id(*record), run->id);
  EXPECT_EQ(json::parse(record->body).value("status", ""), "pending");
}

TEST_F(NodeSeamsTest, AStartsKeyRidesInTheTokenActorsBatch) {
  start_options options;
  options.hook = start_hook{"tok:1", nullptr, nullptr};
  auto run = start_keyed("quick", json::object(), "hooked", options);
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  auto record = record_of("hooked");
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(answered_id(*record), run->id);
}

TEST_F(NodeSeamsTest, ARefusedStartKeepsNothingForItsKey) {
  auto missing = start_keyed("no-such-flow", json::object(), "refused-flow");
  EXPECT_EQ(missing.error().code, errc::flow_not_found);
  EXPECT_FALSE(record_of("refused-flow").has_value());
  start_options options;
  options.hook = start_hook{"tok:held", nullptr, nullptr};
  auto owner = start_keyed("nap", json::object(), "owner", options);
  ASSERT_TRUE(owner.ok());
  auto refused = start_keyed("nap", json::object(), "duplicate", options);
  EXPECT_EQ(refused.error().code, errc::hook_conflict);
  EXPECT_FALSE(record_of("duplicate").has_value());
}

// A start whose caller answers once the run settles writes nothing of its
// own: its admission (run, key record) rides in the run's first write, so a
// flow that ends at once costs one fsync'd write in all.
TEST_F(NodeSeamsTest,
       AStartAnsweredWhenItSettlesIsAdmittedInTheRunsFirstWrite) {
  auto told = std::make_shared<told_events>();
  auto writes = count_writes();
  auto run = start_settling("quick", json{{"a", 1}}, "one", told);
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  EXPECT_EQ(run->status, run_status::pending);
  auto ended = node_->wait(run->id, long_wait);
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ(ended->status, run_status::completed);
  EXPECT_EQ(ended->output, json({{"a", 1}}));
  EXPECT_EQ(writes->load(), 1);
  // That one write kept the settled answer, and the hub said so.
  auto record = record_of("one");
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->state, persistence::request_state::kept);
  EXPECT_EQ(record->http_status, 200);
  EXPECT_EQ(answered_id(*record), run->id);
  EXPECT_EQ(json::parse(record->body).value("status", ""), "completed");
  auto events = told->when_told();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(events[0].ended);
  EXPECT_TRUE(events[0].answer_kept);
  EXPECT_EQ(events[0].run.status, run_status::completed);
  EXPECT_EQ(json::parse(record->body), events[0].run.to_json());
  // The same start answered at once writes its admission first.
  auto plain = count_writes();
  auto other = start_keyed("quick", json::object(), "two");
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(node_->wait(other->id, long_wait).ok());
  EXPECT_EQ(plain->load(), 2);
  testing::inject_storage_faults(*node_, nullptr);
}

// A step of a run admitted that way never runs before the run is durable:
// the first write is held up, and the step still finds its run stored.
TEST_F(NodeSeamsTest, AStepOfARunAdmittedInItsFirstWriteRunsOnceItIsDurable) {
  auto writes = std::make_shared<std::atomic<int>>(0);
  testing::inject_storage_faults(*node_, [writes] {
    if (++*writes == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return testing::storage_fault::none;
  });
  looked_in = &node();
  auto told = std::make_shared<told_events>();
  auto run = start_settling("looks", json::object(), "stepped", told);
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  auto ended = node_->wait(run->id, long_wait);
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ(ended->status, run_status::completed);
  EXPECT_EQ(ended->output, json({{"stored", true}}));
  testing::inject_storage_faults(*node_, nullptr);
}

// The run's first write fails having landed or not: the start is
// answered as maybe-durable, and the store holds one truth: the run and its
// key record both, going on to its end, or neither.
TEST_F(NodeSeamsTest, AFailedFirstWriteOfARunAdmittedInItLeavesOneTruth) {
  using testing::storage_fault;
  for (auto mode :
       {storage_fault::fail_before_write, storage_fault::fail_after_write}) {
    SCOPED_TRACE(static_cast<int>(mode));
    open();
    auto told = std::make_shared<told_events>();
    count_writes(1, mode);
    std::string key = "failed-" + std::to_string(static_cast<int>(mode));
    auto run = start_settling("quick", json::object(), key, told);
    ASSERT_FALSE(run.ok());
    EXPECT_EQ(run.error().code, errc::storage_error);
    testing::inject_storage_faults(*node_, nullptr);
    auto runs = node_->list(run_filter{});
    ASSERT_TRUE(runs.ok());
    if (mode == storage_fault::fail_before_write) {
      EXPECT_TRUE(runs->runs.empty());
      EXPECT_FALSE(record_of(key).has_value());
      continue;
    }
    ASSERT_EQ(runs->runs.size(), 1u);
    ASSERT_TRUE(record_of(key).has_value());
    auto ended = node_->wait(runs->runs[0].id, long_wait);
    ASSERT_TRUE(ended.ok());
    EXPECT_EQ(ended->status, run_status::completed);
    // The write that failed may have kept the answer, but no one was told
    // so: the reloaded run's events never claim an answer kept.
    for (const auto& event : told->when_told()) {
      EXPECT_FALSE(event.answer_kept);
    }
  }
}

TEST_F(NodeSeamsTest, WaitSettledAnswersOnceTheRunWaits) {
  auto run = node_->start("nap", json::object());
  ASSERT_TRUE(run.ok());
  auto settled = node_->wait_settled(run->id, long_wait);
  ASSERT_TRUE(settled.ok()) << settled.error().to_string();
  EXPECT_EQ(settled->status, run_status::waiting);
}

TEST_F(NodeSeamsTest, WaitSettledAnswersOnceTheRunEnds) {
  auto run = node_->start("gated", json::object());
  ASSERT_TRUE(run.ok());
  std::thread opener([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    gate->set_value();
  });
  auto settled = node_->wait_settled(run->id, long_wait);
  opener.join();
  gate = std::make_shared<std::promise<void>>();  // TearDown opens it again
  ASSERT_TRUE(settled.ok()) << settled.error().to_string();
  EXPECT_EQ(settled->status, run_status::completed);
}

TEST_F(NodeSeamsTest, WaitSettledTimesOutWhileTheRunRuns) {
  auto run = node_->start("gated", json::object());
  ASSERT_TRUE(run.ok());
  auto settled = node_->wait_settled(run->id, std::chrono::milliseconds(300));
  ASSERT_FALSE(settled.ok());
  EXPECT_EQ(settled.error().code, errc::timeout);
  auto other = node_->wait_settled(run->id, long_wait, "another-tenant");
  EXPECT_EQ(other.error().code, errc::run_not_found);
}

TEST_F(NodeSeamsTest, RunsByStatusCountsTheStoreThenFollowsWrites) {
  auto done = node_->start("quick", json::object());
  ASSERT_TRUE(done.ok());
  ASSERT_TRUE(node_->wait(done->id, long_wait).ok());
  auto counted = node().runs_by_status();
  ASSERT_TRUE(counted.ok());
  auto at = [](const persistence::store::status_counts& counts,
               run_status status) {
    return counts[static_cast<std::size_t>(status)];
  };
  EXPECT_EQ(at(*counted, run_status::completed), 1u);
  EXPECT_EQ(at(*counted, run_status::waiting), 0u);
  auto sleeper = node_->start("nap", json::object());
  ASSERT_TRUE(sleeper.ok());
  ASSERT_EQ(node_->wait_settled(sleeper->id, long_wait)->status,
            run_status::waiting);
  auto after = node().runs_by_status();
  EXPECT_EQ(at(*after, run_status::waiting), 1u);
  EXPECT_EQ(at(*after, run_status::pending), 0u);
  EXPECT_EQ(at(*after, run_status::running), 0u);
  // Restart: counted again from the store.
  open();
  auto reopened = node().runs_by_status();
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ(at(*reopened, run_status::completed), 1u);
  EXPECT_EQ(at(*reopened, run_status::waiting), 1u);
  clock_->advance_ms(2 * 3600 * 1000);
  ASSERT_TRUE(node_->wait(sleeper->id, long_wait).ok());
  auto woke = node().runs_by_status();
  EXPECT_EQ(at(*woke, run_status::completed), 2u);
  EXPECT_EQ(at(*woke, run_status::waiting), 0u);
  EXPECT_EQ(at(*woke, run_status::running), 0u);
}

}  // namespace
}  // namespace durin::testing
