// The runtime seams the gateway relies on, on a real store and real actors:
// records added to a run's admission batch (with and without a start hook),
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
std::atomic<persistence::store*> looked_in{nullptr};

flow<json> looks(context& ctx, json) {
  auto stored = co_await ctx.step("look", [] {
    auto run = looked_in.load()->get_run(step_metadata().run_id);
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
  persistence::store& store() { return *services::services_of(*node_).store; }
  persistence::request_store requests() {
    auto& services = services::services_of(*node_);
    return {*services.store, *services.committer};
  }
  // Options whose admission also writes a kept request record naming the
  // run under `key`.
  start_options with_record(const std::string& key) {
    start_options options;
    auto records = std::make_shared<detail::admission_records>();
    auto& services = services::services_of(*node_);
    auto* target = services.store.get();
    auto* writer = services.committer.get();
    records->add = [target, writer, key](const run_info& run,
                                         persistence::write_batch& batch) {
      persistence::request_store store(*target, *writer);
      persistence::request_record record;
      record.state = persistence::request_state::kept;
      record.fingerprint = "fp";
      record.expires_at_ms = 1LL << 50;
      record.http_status = 202;
      record.body = run.id;
      ASSERT_TRUE(store.add_to(batch, {"default", "caller", key}, record).ok());
    };
    options.admission = std::move(records);
    return options;
  }
  // with_record(key), for a caller answered once the run settles: what
  // the run told its settle hooks lands in `told`.
  struct settle_log {
    std::mutex mutex;
    std::vector<run_status> settled_as;  // the status each settle call saw
    std::vector<bool> outcomes;          // each settled() call
    // The settled() calls once there is one (they come on the run's actor,
    // after the store already shows the write): empty after 5 s without.
    std::vector<bool> outcomes_when_told() {
      for (int i = 0; i < 500; ++i) {
        {
          std::lock_guard lock(mutex);
          if (!outcomes.empty()) {
            return outcomes;
          }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return {};
    }
  };
  start_options settling(const std::string& key,
                         std::shared_ptr<settle_log> told) {
    auto options = with_record(key);
    auto records =
        std::make_shared<detail::admission_records>(*options.admission);
    records->settle = [told](const run_info& run, persistence::write_batch&) {
      std::lock_guard lock(told->mutex);
      told->settled_as.push_back(run.status);
    };
    records->settled = [told](bool durable) {
      std::lock_guard lock(told->mutex);
      told->outcomes.push_back(durable);
    };
    options.admission = std::move(records);
    return options;
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
    auto found = requests().get({"default", "caller", key});
    EXPECT_TRUE(found.ok());
    return found.ok() ? *found : std::nullopt;
  }

  temp_dir dir_;
  std::shared_ptr<manual_clock> clock_ =
      std::make_shared<manual_clock>(1'700'000'000'000);
  std::unique_ptr<runtime> node_;
};

TEST_F(NodeSeamsTest, AdmissionRecordsAreWrittenWithTheRun) {
  auto run = node_->start("quick", json{{"a", 1}}, with_record("plain"));
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  auto record = record_of("plain");
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->body, run->id);
}

TEST_F(NodeSeamsTest, AdmissionRecordsRideInTheTokenActorsBatch) {
  auto options = with_record("hooked");
  options.hook = start_hook{"tok:1", nullptr, nullptr};
  auto run = node_->start("quick", json::object(), options);
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  auto record = record_of("hooked");
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->body, run->id);
}

TEST_F(NodeSeamsTest, ARefusedStartWritesNoAdmissionRecords) {
  auto missing =
      node_->start("no-such-flow", json::object(), with_record("refused-flow"));
  EXPECT_EQ(missing.error().code, errc::flow_not_found);
  EXPECT_FALSE(record_of("refused-flow").has_value());
  auto options = with_record("owner");
  options.hook = start_hook{"tok:held", nullptr, nullptr};
  auto owner = node_->start("nap", json::object(), options);
  ASSERT_TRUE(owner.ok());
  auto duplicate = with_record("duplicate");
  duplicate.hook = start_hook{"tok:held", nullptr, nullptr};
  auto refused = node_->start("nap", json::object(), duplicate);
  EXPECT_EQ(refused.error().code, errc::hook_conflict);
  EXPECT_FALSE(record_of("duplicate").has_value());
}

// A start whose caller answers once the run settles writes nothing of its
// own: its admission (run, key record) rides in the run's first write, so a
// flow that ends at once costs one fsync'd write in all.
TEST_F(NodeSeamsTest,
       AStartAnsweredWhenItSettlesIsAdmittedInTheRunsFirstWrite) {
  auto told = std::make_shared<settle_log>();
  auto writes = count_writes();
  auto run = node_->start("quick", json{{"a", 1}}, settling("one", told));
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  EXPECT_EQ(run->status, run_status::pending);
  auto ended = node_->wait(run->id, long_wait);
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ(ended->status, run_status::completed);
  EXPECT_EQ(ended->output, json({{"a", 1}}));
  EXPECT_EQ(writes->load(), 1);
  ASSERT_TRUE(record_of("one").has_value());
  EXPECT_EQ(record_of("one")->body, run->id);
  EXPECT_EQ(told->outcomes_when_told(), std::vector<bool>{true});
  {
    std::lock_guard lock(told->mutex);
    EXPECT_EQ(told->settled_as, std::vector<run_status>{run_status::completed});
  }
  // The same start without settle hooks writes its admission first.
  auto plain = count_writes();
  auto other = node_->start("quick", json::object(), with_record("two"));
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
  looked_in = &store();
  auto told = std::make_shared<settle_log>();
  auto run = node_->start("looks", json::object(), settling("stepped", told));
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
    auto told = std::make_shared<settle_log>();
    count_writes(1, mode);
    std::string key = "failed-" + std::to_string(static_cast<int>(mode));
    auto run = node_->start("quick", json::object(), settling(key, told));
    ASSERT_FALSE(run.ok());
    EXPECT_EQ(run.error().code, errc::storage_error);
    EXPECT_EQ(told->outcomes_when_told(), std::vector<bool>{false});
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
  auto counted = store().runs_by_status();
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
  auto after = store().runs_by_status();
  EXPECT_EQ(at(*after, run_status::waiting), 1u);
  EXPECT_EQ(at(*after, run_status::pending), 0u);
  EXPECT_EQ(at(*after, run_status::running), 0u);
  // Restart: counted again from the store.
  open();
  auto reopened = store().runs_by_status();
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ(at(*reopened, run_status::completed), 1u);
  EXPECT_EQ(at(*reopened, run_status::waiting), 1u);
  clock_->advance_ms(2 * 3600 * 1000);
  ASSERT_TRUE(node_->wait(sleeper->id, long_wait).ok());
  auto woke = store().runs_by_status();
  EXPECT_EQ(at(*woke, run_status::completed), 2u);
  EXPECT_EQ(at(*woke, run_status::waiting), 0u);
  EXPECT_EQ(at(*woke, run_status::running), 0u);
}

}  // namespace
}  // namespace durin::testing
