// Goal: on a replicated primary the committer's fsync and its backups' run
// at the same time (committer.hpp): a group write lands unsynced, is
// shipped, then synced, and its callers are answered only once both halves
// are done, ok only when both are. A sync that fails after the write was
// shipped answers storage-error and gives the shard up at its epoch
// (replication::lost), since the backups may hold a write this copy lacks
// once it reopens.
//
// Method: a real store on a tests/support/faulty_file_system.hpp disk,
// behind a real fence, with a replication seam that records what the
// committer ships and answers when the test says (the real one needs CAF
// peers and etcd: tests/cluster/replication_test.cpp covers it).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <vector>

#include "persistence/committer.hpp"
#include "persistence/fence.hpp"
#include "persistence/replication.hpp"
#include "persistence/store.hpp"
#include "test_support.hpp"
#include "tests/support/faulty_file_system.hpp"

namespace durin::persistence {
namespace {

using namespace std::chrono_literals;
using durin::testing::eventually;
using durin::testing::faulty_file_system;
using testing::temp_dir;

// Holds every shipped write's answer until the test gives it.
class held_replication final : public replication {
 public:
  explicit held_replication(std::function<void()> on_ship = {})
      : on_ship_(std::move(on_ship)) {}

  void ship(std::uint64_t epoch, std::uint64_t position, std::string,
            done_fn done) override {
    if (on_ship_) {
      on_ship_();
    }
    std::lock_guard lock(mutex_);
    shipped_.push_back({epoch, position, std::move(done)});
    changed_.notify_all();
  }

  void lost(std::uint64_t epoch, std::uint64_t position) override {
    std::lock_guard lock(mutex_);
    lost_.emplace_back(epoch, position);
  }

  // Answers the oldest shipped write not answered yet.
  void answer_next(const status& outcome) {
    done_fn done;
    {
      std::unique_lock lock(mutex_);
      changed_.wait_for(lock, 5s, [this] { return shipped_.size() > next_; });
      ASSERT_GT(shipped_.size(), next_);
      done = std::move(shipped_[next_++].done);
    }
    done(outcome);
  }

  std::vector<std::pair<std::uint64_t, std::uint64_t>> lost_writes() {
    std::lock_guard lock(mutex_);
    return lost_;
  }

  std::uint64_t shipped_position(std::size_t index) {
    std::lock_guard lock(mutex_);
    return index < shipped_.size() ? shipped_[index].position : 0;
  }

 private:
  struct entry {
    std::uint64_t epoch;
    std::uint64_t position;
    done_fn done;
  };
  std::function<void()> on_ship_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<entry> shipped_;
  std::size_t next_ = 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> lost_;
};

class ReplicatedCommitTest : public ::testing::Test {
 protected:
  void open(std::shared_ptr<replication> shipping) {
    fence_->set_replication(std::move(shipping));
    store_options options;
    options.fence = fence_;
    options.file_system = disk_;
    options.reopen_backoff_ms_min = 5;
    options.reopen_backoff_ms_max = 50;
    auto opened = store::open(dir_.path(), options);
    ASSERT_TRUE(opened.ok()) << opened.error().to_string();
    store_ = std::move(opened.value());
    fence_->grant(3, std::chrono::steady_clock::now() + 60s);
    ASSERT_TRUE(eventually([this] { return store_->ready(); }, 5000ms));
    writer_ = std::make_unique<committer>(*store_);
  }

  void TearDown() override {
    writer_.reset();
    store_.reset();
  }

  std::future<status> submit_run(const std::string& id) {
    auto batch = store_->batch();
    run_record record;
    record.id = id;
    record.flow = "flow";
    record.status = run_status::pending;
    batch.put_run(record);
    auto answered = std::make_shared<std::promise<status>>();
    auto future = answered->get_future();
    writer_->submit(std::move(batch), [answered](const status& outcome) {
      answered->set_value(outcome);
    });
    return future;
  }

  temp_dir dir_;
  std::shared_ptr<faulty_file_system> disk_ =
      std::make_shared<faulty_file_system>();
  std::shared_ptr<fence> fence_ = std::make_shared<fence>();
  std::unique_ptr<store> store_;
  std::unique_ptr<committer> writer_;
};

TEST_F(ReplicatedCommitTest,
       AReplicatedWriteIsAnsweredOnlyOnceItsBackupsHaveIt) {
  auto shipping = std::make_shared<held_replication>();
  open(shipping);
  auto first = submit_run("run_a");
  // Synced here long since, but not answered: the backups have not said.
  EXPECT_EQ(first.wait_for(300ms), std::future_status::timeout);
  shipping->answer_next({});
  ASSERT_EQ(first.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(first.get().ok());
  EXPECT_EQ(shipping->shipped_position(0), 1u);
  // A backup's failure is the callers' failure, though the write is here.
  auto second = submit_run("run_b");
  shipping->answer_next(make_error(errc::storage_error, "a backup failed"));
  ASSERT_EQ(second.wait_for(5s), std::future_status::ready);
  EXPECT_FALSE(second.get().ok());
  EXPECT_TRUE(shipping->lost_writes().empty());
}

TEST_F(ReplicatedCommitTest,
       AWriteIsShippedBeforeItsOwnSyncAndASyncFailureGivesTheShardUp) {
  // Armed while the committer ships: only a sync after the ship can fail.
  std::shared_ptr<held_replication> shipping;
  shipping = std::make_shared<held_replication>([this] {
    disk_->fail(faulty_file_system::operation::sync,
                faulty_file_system::fault::io_error, 1.0, 1);
  });
  open(shipping);
  auto write = submit_run("run_a");
  shipping->answer_next({});  // every backup has it
  ASSERT_EQ(write.wait_for(5s), std::future_status::ready);
  const status outcome = write.get();
  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.error().code, errc::storage_error);
  EXPECT_NE(outcome.error().message.find("may or may not count"),
            std::string::npos)
      << outcome.error().message;
  const auto lost = shipping->lost_writes();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0], std::make_pair(std::uint64_t{3}, std::uint64_t{1}));
  // Fails closed: not ready until it reopened with writes proven to work.
  EXPECT_FALSE(store_->ready());
}

// A read that may have seen writes landed here unsynced waits for them
// (committer::after_submitted): it is told only once every write submitted
// before it is answered, and told of a failure among them.
TEST_F(ReplicatedCommitTest,
       AReadAfterReplicatedWritesIsAnsweredOnlyOnceTheyAreAnswered) {
  auto shipping = std::make_shared<held_replication>();
  open(shipping);
  // Nothing outstanding: at once.
  std::promise<status> idle;
  writer_->after_submitted([&idle](const status& s) { idle.set_value(s); });
  ASSERT_EQ(idle.get_future().wait_for(1s), std::future_status::ready);

  auto first = submit_run("run_a");
  auto second = submit_run("run_b");
  auto read = std::make_shared<std::promise<status>>();
  auto told = read->get_future();
  writer_->after_submitted([read](const status& s) { read->set_value(s); });
  EXPECT_EQ(told.wait_for(300ms), std::future_status::timeout);
  shipping->answer_next({});  // run_a's write
  ASSERT_EQ(first.wait_for(5s), std::future_status::ready);
  if (second.wait_for(0s) != std::future_status::ready) {
    // run_b had a group write of its own: still on its way.
    EXPECT_EQ(told.wait_for(200ms), std::future_status::timeout);
    shipping->answer_next(make_error(errc::storage_error, "a backup failed"));
  }
  ASSERT_EQ(told.wait_for(5s), std::future_status::ready);
  ASSERT_EQ(second.wait_for(5s), std::future_status::ready);
  const status second_outcome = second.get();
  const status read_outcome = told.get();
  // The read is told of the failure of a write it may have seen.
  EXPECT_EQ(read_outcome.ok(), second_outcome.ok());
}

}  // namespace
}  // namespace durin::persistence
