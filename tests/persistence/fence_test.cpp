// Goal: a shard's store is used only behind its fence (persistence/README.md,
// invariant 11). A closed fence refuses reads and writes and keeps the
// database closed; a grant opens it at once; a passed deadline refuses the
// next group write before it reaches the disk; every fenced group write
// carries the epoch and the next log position, which survive a reopen.
#include "persistence/fence.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "persistence/committer.hpp"
#include "persistence/keys.hpp"
#include "persistence/store.hpp"
#include "test_support.hpp"
#include "tests/support/faulty_file_system.hpp"

namespace durin::persistence {
namespace {

using namespace std::chrono_literals;
using testing::temp_dir;

run_record make_run(const std::string& id) {
  run_record record;
  record.id = id;
  record.flow = "flow-a";
  record.status = run_status::running;
  return record;
}

status commit(committer& writer, store& target, const std::string& run_id) {
  auto batch = target.batch();
  batch.put_run(make_run(run_id));
  std::promise<status> done;
  writer.submit(std::move(batch),
                [&done](const status& outcome) { done.set_value(outcome); });
  return done.get_future().get();
}

bool eventually_ready(const store& target) {
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < until) {
    if (target.ready()) {
      return true;
    }
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

std::uint64_t meta_u64(const store& target, std::string_view name) {
  auto value = target.get_meta(name);
  EXPECT_TRUE(value.ok());
  if (!value.ok() || !value->has_value() || (*value)->size() != 8) {
    return 0;
  }
  return keys::get_u64((*value)->data());
}

class FenceTest : public ::testing::Test {
 protected:
  // `backoff_ms`: the store's reopen backoff, at least and at most.
  // `file_system`: null for the operating system's.
  std::shared_ptr<store> open_fenced(
      std::int64_t backoff_ms = 100,
      std::shared_ptr<rocksdb::FileSystem> file_system = nullptr) {
    store_options options;
    options.fence = fence_;
    options.file_system = std::move(file_system);
    options.reopen_backoff_ms_min = backoff_ms;
    options.reopen_backoff_ms_max = std::max<std::int64_t>(backoff_ms, 1000);
    auto opened = store::open(dir_.path(), options);
    EXPECT_TRUE(opened.ok()) << opened.error().to_string();
    return std::shared_ptr<store>(std::move(*opened));
  }

  temp_dir dir_;
  std::shared_ptr<fence> fence_ = std::make_shared<fence>();
};

TEST_F(FenceTest, ClosedFenceRefusesReadsAndOpensNoDatabase) {
  auto target = open_fenced();
  EXPECT_FALSE(target->ready());
  const auto health = target->health();
  EXPECT_TRUE(health.fenced);
  EXPECT_NE(health.fault.find("does not hold the shard"), std::string::npos);
  auto read = target->get_run("run_a");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().code, errc::storage_error);
  // No database was created: another node may own this shard's data.
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/CURRENT"));
}

TEST_F(FenceTest, GrantOpensTheStoreAtOnce) {
  // A reopen backoff of 30 s: ready within 5 s is the grant's poke, not
  // the backoff, however loaded the machine.
  auto target = open_fenced(30'000);
  std::this_thread::sleep_for(50ms);  // its recovery thread waits now
  fence_->grant(3, std::chrono::steady_clock::now() + 10s);
  ASSERT_TRUE(eventually_ready(*target));
  EXPECT_FALSE(target->health().fenced);
  committer writer(*target);
  EXPECT_TRUE(commit(writer, *target, "run_a").ok());
  auto read = target->get_run("run_a");
  ASSERT_TRUE(read.ok());
  EXPECT_TRUE(read->has_value());
}

TEST_F(FenceTest, PassedDeadlineRefusesTheNextGroupWrite) {
  auto target = open_fenced();
  fence_->grant(1, std::chrono::steady_clock::now() + 10s);
  ASSERT_TRUE(eventually_ready(*target));
  committer writer(*target);
  ASSERT_TRUE(commit(writer, *target, "run_before").ok());
  // The deadline moved to now (as a keepalive's would), then passed: on a
  // loaded machine a fixed short deadline could pass before the first
  // write.
  fence_->extend(1, std::chrono::steady_clock::now());
  std::this_thread::sleep_for(10ms);
  const auto refused = commit(writer, *target, "run_after");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::storage_error);
  EXPECT_FALSE(target->ready());
  EXPECT_TRUE(target->health().fenced);
  // Granted again (a new epoch): the refused write never landed.
  fence_->grant(2, std::chrono::steady_clock::now() + 10s);
  ASSERT_TRUE(eventually_ready(*target));
  auto before = target->get_run("run_before");
  auto after = target->get_run("run_after");
  ASSERT_TRUE(before.ok() && after.ok());
  EXPECT_TRUE(before->has_value());
  EXPECT_FALSE(after->has_value());
}

// A shard handed over and taken back while nothing read its store: the
// close must still make the store not ready, or the later grant finds it
// ready, reopens nothing, and the runtime never recovers its runs (which
// it does on each change to ready).
TEST_F(FenceTest, ACloseMakesTheStoreNotReadyAtOnceSoTheNextGrantRecoversIt) {
  auto target = open_fenced();
  std::atomic<int> became_ready{0};
  target->set_health_listener([&](const storage_health& health) {
    if (health.ready) {
      became_ready.fetch_add(1);
    }
  });
  fence_->grant(1, std::chrono::steady_clock::now() + 10s);
  ASSERT_TRUE(eventually_ready(*target));
  ASSERT_TRUE(
      durin::testing::eventually([&] { return became_ready.load() == 1; }));
  fence_->close();
  EXPECT_FALSE(target->ready());  // no read or write needed to notice
  fence_->grant(2, std::chrono::steady_clock::now() + 10s);
  ASSERT_TRUE(eventually_ready(*target));
  EXPECT_TRUE(
      durin::testing::eventually([&] { return became_ready.load() == 2; }));
}

// A hand-over closes the fence while a write is past its check: the write
// lands (its primary must ship it, a copy must never lack it), but it is
// answered failed, since the answer would come from a node that no longer
// holds the shard, and the committer counts it.
TEST_F(FenceTest, AWriteLandingAsTheFenceClosesIsAnsweredFailedAndCounted) {
  auto file_system = std::make_shared<durin::testing::faulty_file_system>();
  auto target = open_fenced(100, file_system);
  fence_->grant(1, std::chrono::steady_clock::now() + 10s);
  ASSERT_TRUE(eventually_ready(*target));
  committer writer(*target);
  ASSERT_TRUE(commit(writer, *target, "run_before").ok());
  EXPECT_EQ(writer.statistics().landed_as_fence_closed, 0u);
  const auto writes_before = writer.statistics().group_writes;
  file_system->before_next_append(".log", [this] { fence_->close(); });
  const auto answered = commit(writer, *target, "run_during");
  ASSERT_FALSE(answered.ok());
  EXPECT_EQ(answered.error().code, errc::storage_error);
  EXPECT_NE(answered.error().message.find("may or may not count"),
            std::string::npos)
      << answered.error().message;
  EXPECT_EQ(writer.statistics().landed_as_fence_closed, 1u);
  EXPECT_EQ(writer.statistics().group_writes, writes_before + 1);  // on disk
  fence_->grant(2, std::chrono::steady_clock::now() + 10s);
  ASSERT_TRUE(eventually_ready(*target));
  auto during = target->get_run("run_during");
  ASSERT_TRUE(during.ok());
  EXPECT_TRUE(during->has_value());  // it landed
  // A refused write (the fence closed before its check) is not counted.
  fence_->close();
  EXPECT_FALSE(commit(writer, *target, "run_after").ok());
  EXPECT_EQ(writer.statistics().landed_as_fence_closed, 1u);
  EXPECT_EQ(writer.statistics().group_writes, writes_before + 1);
}

TEST_F(FenceTest, ExtendKeepsTheCurrentEpochOnlyOpen) {
  const auto now = std::chrono::steady_clock::now();
  fence_->grant(4, now + 100ms);
  fence_->extend(3, now + 10s);  // a keepalive of an older tenure
  EXPECT_FALSE(fence_->open(now + 200ms));
  fence_->extend(4, now + 10s);
  EXPECT_TRUE(fence_->open(now + 200ms));
  fence_->close();
  EXPECT_FALSE(fence_->open(now));
  EXPECT_EQ(fence_->epoch(), 0u);
}

TEST_F(FenceTest, EveryGroupWriteCarriesItsEpochAndTheNextPosition) {
  {
    auto target = open_fenced();
    fence_->grant(7, std::chrono::steady_clock::now() + 10s);
    ASSERT_TRUE(eventually_ready(*target));
    committer writer(*target);
    for (int index = 0; index < 3; ++index) {
      ASSERT_TRUE(commit(writer, *target, "run_" + std::to_string(index)).ok());
    }
    EXPECT_EQ(target->log_position(), 3u);
    EXPECT_EQ(meta_u64(*target, "shard_epoch"), 7u);
    fence_->grant(8, std::chrono::steady_clock::now() + 10s);
    ASSERT_TRUE(commit(writer, *target, "run_3").ok());
    EXPECT_EQ(meta_u64(*target, "shard_epoch"), 8u);
  }
  // Reopened: the position is read back, and counting goes on from it.
  auto target = open_fenced();
  ASSERT_TRUE(eventually_ready(*target));
  EXPECT_EQ(target->log_position(), 4u);
  EXPECT_EQ(meta_u64(*target, "log_position"), 4u);
}

TEST_F(FenceTest, AStoreWithoutAFenceCountsNoPosition) {
  auto opened = store::open(dir_.path());
  ASSERT_TRUE(opened.ok());
  auto& target = **opened;
  committer writer(target);
  ASSERT_TRUE(commit(writer, target, "run_a").ok());
  EXPECT_EQ(target.log_position(), 0u);
  auto epoch = target.get_meta("shard_epoch");
  ASSERT_TRUE(epoch.ok());
  EXPECT_FALSE(epoch->has_value());
}

}  // namespace
}  // namespace durin::persistence
