// Goal: the committer answers every batch exactly once, only after the batch
// is durable, in submission order; it really merges concurrent batches into
// fewer synced writes; injected faults and shutdown give the documented
// errors. Method: a real store in a temporary directory; a fault injector
// that can hold the committer thread at a group so that queued batches form
// a known group; and, for durability, child processes killed by SIGKILL at
// the committer's kill points, after which the parent reopens the database.
#include "persistence/committer.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <rocksdb/write_batch.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "persistence/store.hpp"
#include "test_support.hpp"

extern char** environ;

namespace durin::persistence {
namespace {

using namespace std::chrono_literals;

run_record make_run(const std::string& id) {
  run_record record;
  record.id = id;
  record.flow = "flow-a";
  record.status = run_status::running;
  return record;
}

// Collects the answers of `size` submissions; safe from any thread.
class answers {
 public:
  explicit answers(std::size_t size) : outcomes_(size) {}

  committer::callback slot(std::size_t index) {
    return [this, index](const status& outcome) {
      std::lock_guard lock(mutex_);
      EXPECT_FALSE(outcomes_[index].has_value()) << "answered twice: " << index;
      outcomes_[index] = outcome;
      order_.push_back(index);
      changed_.notify_all();
    };
  }

  // True once `count` answers arrived, false after a generous timeout.
  bool wait_for(std::size_t count) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, 60s, [&] { return order_.size() >= count; });
  }

  status at(std::size_t index) {
    std::lock_guard lock(mutex_);
    EXPECT_TRUE(outcomes_[index].has_value()) << "no answer for " << index;
    return outcomes_[index].value_or(make_error(errc::internal, "none"));
  }

  std::vector<std::size_t> order() {
    std::lock_guard lock(mutex_);
    return order_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::optional<status>> outcomes_;
  std::vector<std::size_t> order_;
};

// Holds the committer thread inside the fault injector of its first group
// until released, so that batches submitted meanwhile queue up behind it.
class gate {
 public:
  std::function<committer::fault()> injector() {
    return [this] {
      std::unique_lock lock(mutex_);
      if (!held_once_) {
        held_once_ = true;
        holding_ = true;
        changed_.notify_all();
        changed_.wait(lock, [&] { return released_; });
      }
      return committer::fault::none;
    };
  }

  void wait_until_holding() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return holding_; });
  }

  void release() {
    std::lock_guard lock(mutex_);
    released_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool held_once_ = false;
  bool holding_ = false;
  bool released_ = false;
};

class CommitterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = store::open(dir_.path());
    ASSERT_TRUE(opened.ok()) << opened.error().message;
    store_ = std::move(*opened);
  }

  // A run record and its active entry: two operations.
  write_batch run_batch(const std::string& id) {
    auto batch = store_->batch();
    batch.put_run(make_run(id));
    batch.put_active(id);
    return batch;
  }

  // Writes run_0 alone (answered in slot 0), holding the committer there
  // while `batches` queue, so that they form the next group together;
  // batch i is answered in slot i + 1. Returns once every one is answered.
  void write_as_one_group(committer& writer, std::vector<write_batch> batches,
                          answers& answered) {
    gate held;
    writer.set_fault_injector(held.injector());
    writer.submit(run_batch("run_0"), answered.slot(0));
    held.wait_until_holding();
    for (std::size_t i = 0; i < batches.size(); ++i) {
      writer.submit(std::move(batches[i]), answered.slot(i + 1));
    }
    held.release();
    ASSERT_TRUE(answered.wait_for(batches.size() + 1));
  }

  // `threads` threads each submit `per_thread` batches at once, run
  // "run_{index}" answered in slot index, and are joined.
  void submit_from_threads(committer& writer, std::size_t threads,
                           std::size_t per_thread, answers& answered) {
    std::vector<std::thread> submitters;
    for (std::size_t t = 0; t < threads; ++t) {
      submitters.emplace_back([&, t] {
        for (std::size_t i = 0; i < per_thread; ++i) {
          const std::size_t index = t * per_thread + i;
          writer.submit(run_batch("run_" + std::to_string(index)),
                        answered.slot(index));
        }
      });
    }
    for (auto& submitter : submitters) {
      submitter.join();
    }
  }

  bool has_run(const std::string& id) {
    auto run = store_->get_run(id);
    EXPECT_TRUE(run.ok());
    return run.ok() && run->has_value();
  }

  testing::temp_dir dir_;
  std::unique_ptr<store> store_;
};

TEST_F(CommitterTest, CallbackRunsOnlyAfterTheBatchIsWritten) {
  committer writer(*store_);
  constexpr std::size_t count = 50;
  answers answered(count);
  std::atomic<std::size_t> visible{0};
  for (std::size_t i = 0; i < count; ++i) {
    const std::string id = "run_" + std::to_string(i);
    writer.submit(run_batch(id), [&, id, i](const status& outcome) {
      // Read back inside the callback: the write is already there.
      if (outcome.ok() && has_run(id)) {
        ++visible;
      }
      answered.slot(i)(outcome);
    });
  }
  ASSERT_TRUE(answered.wait_for(count));
  EXPECT_EQ(visible.load(), count);
}

TEST_F(CommitterTest, ManyThreadsSubmittingConcurrentlyAllGetAnswered) {
  committer writer(*store_);
  constexpr std::size_t threads = 8;
  constexpr std::size_t per_thread = 100;
  answers answered(threads * per_thread);
  submit_from_threads(writer, threads, per_thread, answered);
  ASSERT_TRUE(answered.wait_for(threads * per_thread));
  for (std::size_t index = 0; index < threads * per_thread; ++index) {
    EXPECT_TRUE(answered.at(index).ok()) << index;
    EXPECT_TRUE(has_run("run_" + std::to_string(index))) << index;
  }
  const auto stats = writer.statistics();
  EXPECT_EQ(stats.batches, threads * per_thread);
  EXPECT_EQ(stats.operations, 2 * threads * per_thread);
}

TEST_F(CommitterTest, GroupWriteMergesConcurrentBatches) {
  committer writer(*store_);
  constexpr std::size_t threads = 4;
  constexpr std::size_t per_thread = 100;
  answers answered(threads * per_thread);
  submit_from_threads(writer, threads, per_thread, answered);
  ASSERT_TRUE(answered.wait_for(threads * per_thread));
  const auto stats = writer.statistics();
  // Submitters that do not wait outrun one synced write at a time, so
  // batches queue up and share writes.
  EXPECT_EQ(stats.batches, threads * per_thread);
  EXPECT_LT(stats.group_writes, stats.batches);
  EXPECT_GE(stats.group_writes, 1u);
}

TEST_F(CommitterTest, GroupWriteMergesQueuedBatches) {
  committer writer(*store_);
  gate held;
  writer.set_fault_injector(held.injector());
  constexpr std::size_t count = 20;
  answers answered(count);
  writer.submit(run_batch("run_0"), answered.slot(0));
  held.wait_until_holding();  // the first group is {run_0}
  for (std::size_t i = 1; i < count; ++i) {
    writer.submit(run_batch("run_" + std::to_string(i)), answered.slot(i));
  }
  held.release();
  ASSERT_TRUE(answered.wait_for(count));
  const auto stats = writer.statistics();
  EXPECT_EQ(stats.group_writes, 2u);  // {run_0}, then the 19 merged
  EXPECT_EQ(stats.batches, count);
  EXPECT_EQ(stats.operations, 2 * count);
  for (std::size_t i = 0; i < count; ++i) {
    EXPECT_TRUE(answered.at(i).ok());
    EXPECT_TRUE(has_run("run_" + std::to_string(i)));
  }
}

TEST_F(CommitterTest, GroupBytesMaxSplitsGroupsButAlwaysTakesOneBatch) {
  committer writer(*store_, committer::options{.group_bytes_max = 1});
  gate held;
  writer.set_fault_injector(held.injector());
  constexpr std::size_t count = 6;
  answers answered(count);
  writer.submit(run_batch("run_0"), answered.slot(0));
  held.wait_until_holding();
  for (std::size_t i = 1; i < count; ++i) {
    writer.submit(run_batch("run_" + std::to_string(i)), answered.slot(i));
  }
  held.release();
  ASSERT_TRUE(answered.wait_for(count));
  // Every batch is larger than the limit, so each is written on its own.
  EXPECT_EQ(writer.statistics().group_writes, count);
  for (std::size_t i = 0; i < count; ++i) {
    EXPECT_TRUE(answered.at(i).ok());
  }
}

TEST_F(CommitterTest, CallbacksRunInSubmissionOrder) {
  committer writer(*store_);
  constexpr std::size_t count = 300;
  answers answered(count);
  for (std::size_t i = 0; i < count; ++i) {
    writer.submit(run_batch("run_" + std::to_string(i)), answered.slot(i));
  }
  ASSERT_TRUE(answered.wait_for(count));
  const auto order = answered.order();
  for (std::size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ(order[i], i);
  }
}

TEST_F(CommitterTest, FailBeforeWriteWritesNothing) {
  committer writer(*store_);
  writer.set_fault_injector([] { return committer::fault::fail_before_write; });
  answers answered(1);
  writer.submit(run_batch("run_1"), answered.slot(0));
  ASSERT_TRUE(answered.wait_for(1));
  ASSERT_FALSE(answered.at(0).ok());
  EXPECT_EQ(answered.at(0).error().code, errc::storage_error);
  EXPECT_FALSE(has_run("run_1"));
  EXPECT_TRUE(store_->active_runs()->empty());
  EXPECT_EQ(writer.statistics().group_writes, 0u);
  EXPECT_EQ(writer.statistics().batches, 0u);
}

TEST_F(CommitterTest, FailAfterWriteWritesButReportsStorageError) {
  committer writer(*store_);
  writer.set_fault_injector([] { return committer::fault::fail_after_write; });
  answers answered(1);
  writer.submit(run_batch("run_1"), answered.slot(0));
  ASSERT_TRUE(answered.wait_for(1));
  ASSERT_FALSE(answered.at(0).ok());
  EXPECT_EQ(answered.at(0).error().code, errc::storage_error);
  // Indefinite for the caller, but in fact durable.
  EXPECT_TRUE(has_run("run_1"));
  EXPECT_EQ(writer.statistics().group_writes, 1u);
}

TEST_F(CommitterTest, FaultsApplyPerGroupAndClearWhenTheInjectorSaysNone) {
  committer writer(*store_);
  std::atomic<int> groups{0};
  writer.set_fault_injector([&] {
    return groups++ == 0 ? committer::fault::fail_before_write
                         : committer::fault::none;
  });
  answers answered(2);
  writer.submit(run_batch("run_1"), answered.slot(0));
  ASSERT_TRUE(answered.wait_for(1));
  writer.submit(run_batch("run_2"), answered.slot(1));
  ASSERT_TRUE(answered.wait_for(2));
  EXPECT_EQ(answered.at(0).error().code, errc::storage_error);
  EXPECT_TRUE(answered.at(1).ok());
  EXPECT_FALSE(has_run("run_1"));
  EXPECT_TRUE(has_run("run_2"));
}

TEST_F(CommitterTest, RefusedBatchFailsAloneInItsGroup) {
  committer writer(*store_);
  answers answered(4);
  std::vector<write_batch> group;
  group.push_back(run_batch("run_1"));
  group.push_back(store_->batch());
  run_record blocked = make_run("run_bad");
  blocked.status = run_status::blocked;  // never stored
  group.back().put_run(blocked);
  group.push_back(run_batch("run_3"));
  write_as_one_group(writer, std::move(group), answered);
  EXPECT_TRUE(answered.at(0).ok());
  EXPECT_TRUE(answered.at(1).ok());
  EXPECT_EQ(answered.at(2).error().code, errc::invalid_argument);
  EXPECT_TRUE(answered.at(3).ok());
  EXPECT_TRUE(has_run("run_3"));
  EXPECT_FALSE(has_run("run_bad"));
  EXPECT_EQ(writer.statistics().group_writes, 2u);
  EXPECT_EQ(writer.statistics().batches, 3u);
}

// A merged group is the batches' records in submission order: a later
// batch's delete of a key an earlier one put leaves it deleted, and puts in
// several families of the group all land.
TEST_F(CommitterTest, MergedBatchesApplyInSubmissionOrder) {
  committer writer(*store_);
  answers answered(4);
  std::vector<write_batch> group;
  group.push_back(store_->batch());
  group.back().put_active("run_gone");
  group.back().put_active("run_kept");
  group.push_back(store_->batch());
  group.back().delete_active("run_gone");
  group.push_back(run_batch("run_3"));
  write_as_one_group(writer, std::move(group), answered);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(answered.at(i).ok());
  }
  EXPECT_EQ(writer.statistics().group_writes, 2u);
  EXPECT_EQ(writer.statistics().operations, 2u + 2u + 1u + 2u);
  auto active = store_->active_runs();
  ASSERT_TRUE(active.ok());
  std::set<std::string> ids(active->begin(), active->end());
  EXPECT_EQ(ids.count("run_gone"), 0u);
  EXPECT_EQ(ids.count("run_kept"), 1u);
  EXPECT_EQ(ids.count("run_3"), 1u);
  EXPECT_TRUE(has_run("run_3"));
}

// A batch holding an operation durin never writes (here a merge) cannot join
// a group's write: it is refused alone, and the rest of its group lands.
TEST_F(CommitterTest, ABatchThatCannotBeMergedFailsAloneInItsGroup) {
  committer writer(*store_);
  answers answered(4);
  std::vector<write_batch> group;
  group.push_back(run_batch("run_1"));
  group.push_back(run_batch("run_odd"));
  group.back().raw().Merge("key", "value");
  group.push_back(run_batch("run_3"));
  write_as_one_group(writer, std::move(group), answered);
  EXPECT_TRUE(answered.at(1).ok());
  ASSERT_FALSE(answered.at(2).ok());
  EXPECT_EQ(answered.at(2).error().code, errc::invalid_argument);
  EXPECT_TRUE(answered.at(3).ok());
  EXPECT_TRUE(has_run("run_1"));
  EXPECT_TRUE(has_run("run_3"));
  EXPECT_FALSE(has_run("run_odd"));
  EXPECT_EQ(writer.statistics().group_writes, 2u);
}

TEST_F(CommitterTest, EmptyBatchIsAnsweredOk) {
  committer writer(*store_);
  answers answered(1);
  writer.submit(store_->batch(), answered.slot(0));
  ASSERT_TRUE(answered.wait_for(1));
  EXPECT_TRUE(answered.at(0).ok());
}

TEST_F(CommitterTest, SubmitAfterStopAnswersShuttingDownOnTheCallersThread) {
  committer writer(*store_);
  writer.stop();
  std::optional<status> outcome;
  std::thread::id answered_on;
  writer.submit(run_batch("run_1"), [&](const status& result) {
    outcome = result;
    answered_on = std::this_thread::get_id();
  });
  ASSERT_TRUE(outcome.has_value());  // at once, before submit returned
  EXPECT_EQ(outcome->error().code, errc::shutting_down);
  EXPECT_EQ(answered_on, std::this_thread::get_id());
  EXPECT_FALSE(has_run("run_1"));
}

TEST_F(CommitterTest, StopWritesEverythingAlreadyQueued) {
  constexpr std::size_t count = 200;
  answers answered(count);
  {
    committer writer(*store_);
    for (std::size_t i = 0; i < count; ++i) {
      writer.submit(run_batch("run_" + std::to_string(i)), answered.slot(i));
    }
    writer.stop();
    EXPECT_EQ(answered.order().size(), count);  // answered before stop returned
  }
  for (std::size_t i = 0; i < count; ++i) {
    EXPECT_TRUE(answered.at(i).ok());
    EXPECT_TRUE(has_run("run_" + std::to_string(i)));
  }
}

TEST_F(CommitterTest, StopIsIdempotentAndSafeFromManyThreads) {
  committer writer(*store_);
  answers answered(1);
  writer.submit(run_batch("run_1"), answered.slot(0));
  std::vector<std::thread> stoppers;
  for (int i = 0; i < 4; ++i) {
    stoppers.emplace_back([&] { writer.stop(); });
  }
  for (auto& stopper : stoppers) {
    stopper.join();
  }
  writer.stop();
  EXPECT_TRUE(answered.at(0).ok());
}  // and the destructor stops once more

TEST_F(CommitterTest, StopFromACallbackDoesNotDeadlock) {
  committer writer(*store_);
  answers answered(2);
  writer.submit(run_batch("run_1"), [&](const status& outcome) {
    writer.stop();
    answered.slot(0)(outcome);
  });
  ASSERT_TRUE(answered.wait_for(1));
  writer.submit(run_batch("run_2"), answered.slot(1));
  ASSERT_TRUE(answered.wait_for(2));
  EXPECT_TRUE(answered.at(0).ok());
  EXPECT_EQ(answered.at(1).error().code, errc::shutting_down);
}

TEST_F(CommitterTest, CallbackMaySubmitTheNextBatch) {
  committer writer(*store_);
  constexpr std::size_t count = 10;
  answers answered(count);
  std::function<void(std::size_t)> submit_from = [&](std::size_t i) {
    writer.submit(run_batch("run_" + std::to_string(i)),
                  [&, i](const status& outcome) {
                    answered.slot(i)(outcome);
                    if (i + 1 < count) {
                      submit_from(i + 1);
                    }
                  });
  };
  submit_from(0);
  ASSERT_TRUE(answered.wait_for(count));
  EXPECT_EQ(writer.statistics().batches, count);
}

TEST_F(CommitterTest, ThrowingCallbackDoesNotStopTheCommitter) {
  committer writer(*store_);
  answers answered(1);
  writer.submit(run_batch("run_1"),
                [](const status&) { throw std::runtime_error("careless"); });
  writer.submit(run_batch("run_2"), answered.slot(0));
  ASSERT_TRUE(answered.wait_for(1));
  EXPECT_TRUE(answered.at(0).ok());
  EXPECT_TRUE(has_run("run_1"));
}

// ---- crash tests: a child process killed at a kill point
// ---------------------

// The child's part of CommitterCrashTest, run only in a child process (it is
// disabled, so a normal test run skips it): commits run_crash_1, then
// run_crash_2, each through the committer, and marks each answer in a file.
TEST(CommitterCrashChild, DISABLED_CommitsTwoRunsOneAfterTheOther) {
  const char* dir = std::getenv("DURIN_TEST_CHILD_DIR");
  ASSERT_NE(dir, nullptr);
  auto opened = store::open(std::string(dir) + "/db");
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  committer writer(**opened);
  for (int n = 1; n <= 2; ++n) {
    const std::string id = "run_crash_" + std::to_string(n);
    auto batch = (*opened)->batch();
    batch.put_run(make_run(id));
    std::promise<status> answer;
    writer.submit(std::move(batch),
                  [&](const status& outcome) { answer.set_value(outcome); });
    const status outcome = answer.get_future().get();
    ASSERT_TRUE(outcome.ok());
    std::ofstream(std::string(dir) + "/answered_" + std::to_string(n)) << "ok";
  }
}

class CommitterCrashTest : public ::testing::Test {
 protected:
  // Runs the child with DURIN_KILL_AT=kill_at; its wait status.
  int run_child(const std::string& kill_at) {
    std::vector<std::string> variables;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      const std::string_view text(*entry);
      if (!text.starts_with("DURIN_KILL_AT=") &&
          !text.starts_with("DURIN_TEST_CHILD_DIR=")) {
        variables.emplace_back(text);
      }
    }
    variables.push_back("DURIN_KILL_AT=" + kill_at);
    variables.push_back("DURIN_TEST_CHILD_DIR=" + dir_.path());
    std::vector<char*> env;
    for (auto& variable : variables) {
      env.push_back(variable.data());
    }
    env.push_back(nullptr);
    std::string program = "/proc/self/exe";
    std::string also_disabled = "--gtest_also_run_disabled_tests";
    std::string filter =
        "--gtest_filter=CommitterCrashChild."
        "DISABLED_CommitsTwoRunsOneAfterTheOther";
    char* argv[] = {program.data(), also_disabled.data(), filter.data(),
                    nullptr};
    // The child's report goes to a file, not into this test's output.
    const std::string log = dir_.path() + "/child.log";
    const pid_t child = ::fork();
    if (child == 0) {
      const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (out >= 0) {
        ::dup2(out, STDOUT_FILENO);
        ::dup2(out, STDERR_FILENO);
      }
      ::execve(program.c_str(), argv, env.data());
      ::_exit(127);
    }
    int wait_status = 0;
    EXPECT_EQ(::waitpid(child, &wait_status, 0), child);
    return wait_status;
  }

  bool killed(int wait_status) {
    return WIFSIGNALED(wait_status) && WTERMSIG(wait_status) == SIGKILL;
  }

  bool answered(int n) {
    return std::filesystem::exists(dir_.path() + "/answered_" +
                                   std::to_string(n));
  }

  bool stored(const std::string& id) {
    auto opened = store::open(dir_.path() + "/db");
    EXPECT_TRUE(opened.ok()) << opened.error().message;
    if (!opened.ok()) {
      return false;
    }
    auto run = (*opened)->get_run(id);
    EXPECT_TRUE(run.ok());
    return run.ok() && run->has_value();
  }

  testing::temp_dir dir_;
};

TEST_F(CommitterCrashTest, KilledBeforeTheWriteLeavesNothing) {
  ASSERT_TRUE(killed(run_child("committer.before_write:1")));
  EXPECT_FALSE(answered(1));
  EXPECT_FALSE(stored("run_crash_1"));
}

TEST_F(CommitterCrashTest, KilledAfterTheWriteKeepsTheUnansweredBatch) {
  ASSERT_TRUE(killed(run_child("committer.after_write:1")));
  EXPECT_FALSE(answered(1));           // never acknowledged...
  EXPECT_TRUE(stored("run_crash_1"));  // ...but durable: the sync returned
}

TEST_F(CommitterCrashTest, KillPointFiresOnTheNthHit) {
  ASSERT_TRUE(killed(run_child("committer.before_write:2")));
  EXPECT_TRUE(answered(1));
  EXPECT_FALSE(answered(2));
  EXPECT_TRUE(stored("run_crash_1"));
  EXPECT_FALSE(stored("run_crash_2"));
}

TEST_F(CommitterCrashTest, MalformedKillPlanIsIgnored) {
  const int wait_status = run_child("committer.before_write:0");
  ASSERT_TRUE(WIFEXITED(wait_status));
  EXPECT_EQ(WEXITSTATUS(wait_status), 0);
  EXPECT_TRUE(answered(2));
  EXPECT_TRUE(stored("run_crash_2"));
}

}  // namespace
}  // namespace durin::persistence
