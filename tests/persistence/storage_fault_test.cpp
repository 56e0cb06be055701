// Goal: a storage fault (a full disk, no file descriptors left, a failing
// device) never aborts the process, never acknowledges a write that is not
// durable, makes the store say it is not ready (and why, without a path),
// and heals by itself once the cause is gone, within a stated time: the
// reopen backoff (at most reopen_backoff_ms_max, 1 s by default) plus one
// open of the database; these tests allow recovery_ms_max (5 s).
//
// Method: a real RocksDB in a temporary directory, opened through
// tests/support/faulty_file_system.hpp, which fails chosen appends, syncs,
// file creations, opens and reads with ENOSPC, EMFILE or EIO. Writers
// submit batches to the real committer from several threads while faults
// come and go; every answer is recorded; then the database is opened again
// without faults and every acknowledged write must be there, and every batch
// refused as "storage unavailable" (nothing written) must be absent.
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "persistence/committer.hpp"
#include "persistence/store.hpp"
#include "test_support.hpp"
#include "tests/support/faulty_file_system.hpp"
#include "tests/support/tmpfs.hpp"

namespace durin::persistence {
namespace {

using namespace std::chrono_literals;
using durin::testing::eventually;
using durin::testing::faulty_file_system;
using operation = faulty_file_system::operation;
using fault = faulty_file_system::fault;

constexpr auto recovery_ms_max = 5000ms;

run_record make_run(const std::string& id) {
  run_record record;
  record.id = id;
  record.flow = "flow";
  record.status = run_status::pending;
  record.created_at_ms = 1;
  record.tenant = "default";
  return record;
}

class StorageFaultTest : public ::testing::Test {
 protected:
  void SetUp() override { open_faulty(); }

  void open_faulty() {
    store_options options;
    options.file_system = disk_;
    options.reopen_backoff_ms_min = 5;
    options.reopen_backoff_ms_max = 50;
    auto opened = store::open(dir_.path(), options);
    ASSERT_TRUE(opened.ok()) << opened.error().to_string();
    store_ = std::move(opened.value());
    writer_ = std::make_unique<committer>(*store_);
  }

  void close() {
    writer_.reset();
    store_.reset();
  }

  // Writes one run record through the committer and waits for the answer.
  status write_run(const std::string& id) {
    auto batch = store_->batch();
    batch.put_run(make_run(id));
    batch.put_active(id);
    std::promise<status> done;
    auto answer = done.get_future();
    writer_->submit(std::move(batch), [&done](const status& outcome) {
      done.set_value(outcome);
    });
    return answer.get();
  }

  // Makes the next flush need a new file: the memtable switch creates a WAL
  // and the flush an SST.
  void force_flush() {
    auto pinned = store_->hold();
    if (pinned) {
      (void)store_->raw_db().Flush(rocksdb::FlushOptions(),
                                   store_->handle(family::runs));
    }
  }

  bool recovers() {
    return eventually([this] { return store_->ready(); }, recovery_ms_max);
  }

  // What the writers learned of their batches.
  struct write_log {
    std::mutex mutex;
    std::vector<std::string> acknowledged;
    std::vector<std::string> not_written;  // "storage unavailable"
    std::vector<std::string> indefinite;   // the write itself failed
  };

  // `writers` threads writing fresh runs until `stop`.
  std::vector<std::thread> start_writers(int writers,
                                         const std::atomic<bool>& stop,
                                         write_log& log) {
    std::vector<std::thread> threads;
    for (int w = 0; w < writers; ++w) {
      threads.emplace_back([&, w] {
        for (int n = 0; !stop.load(); ++n) {
          const std::string id =
              "run_w" + std::to_string(w) + "_" + std::to_string(n);
          auto outcome = write_run(id);
          std::lock_guard lock(log.mutex);
          if (outcome.ok()) {
            log.acknowledged.push_back(id);
          } else if (outcome.error().message.find("storage unavailable") !=
                     std::string::npos) {
            log.not_written.push_back(id);
            std::this_thread::sleep_for(1ms);
          } else {
            log.indefinite.push_back(id);
          }
        }
      });
    }
    return threads;
  }

  // One episode: one or two injected faults (a flush forced for a failed
  // create), healed after a while; the store must recover. `took_ms` is how
  // long after the healing it did.
  void fault_episode(std::mt19937_64& random, int episode,
                     std::int64_t& took_ms) {
    const std::array<operation, 3> operations = {
        operation::write, operation::sync, operation::create};
    const std::array<fault, 3> kinds = {fault::no_space, fault::no_descriptors,
                                        fault::io_error};
    const auto which = operations[random() % operations.size()];
    const auto kind = kinds[random() % kinds.size()];
    disk_->fail(which, kind);
    // Often a second fault at once: a full disk fails appends and syncs.
    if (random() % 2 == 0) {
      disk_->fail(operations[random() % operations.size()],
                  kinds[random() % kinds.size()]);
    }
    if (which == operation::create) {
      force_flush();
    }
    // Long enough for a few reopens to fail too.
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + random() % 30));
    disk_->heal();
    const auto healed = std::chrono::steady_clock::now();
    ASSERT_TRUE(recovers())
        << "episode " << episode << ": " << store_->health().fault;
    took_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - healed)
                  .count();
  }

  // How many of `ids` `truth` holds.
  static void count_stored(store& truth, const std::vector<std::string>& ids,
                           std::size_t& stored) {
    stored = 0;
    for (const auto& id : ids) {
      auto found = truth.get_run(id);
      ASSERT_TRUE(found.ok()) << found.error().to_string();
      stored += found->has_value() ? 1 : 0;
    }
  }

  durin::testing::temp_dir dir_;
  std::shared_ptr<faulty_file_system> disk_ =
      std::make_shared<faulty_file_system>();
  std::unique_ptr<store> store_;
  std::unique_ptr<committer> writer_;
};

TEST_F(StorageFaultTest, WritesResumeOnceTheDiskHasSpaceAgain) {
  ASSERT_TRUE(write_run("run_before").ok());
  disk_->fail(operation::write, fault::no_space);
  auto failed = write_run("run_full");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().code, errc::storage_error);
  EXPECT_NE(failed.error().message.find("the disk is full"), std::string::npos)
      << failed.error().message;

  auto health = store_->health();
  EXPECT_FALSE(health.ready);
  EXPECT_NE(health.fault.find("the disk is full"), std::string::npos);
  EXPECT_EQ(health.faults, 1u);
  // Fail closed: while not ready nothing is read or written, without
  // touching the disk.
  auto refused = write_run("run_refused");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::storage_error);
  EXPECT_NE(refused.error().message.find("storage unavailable"),
            std::string::npos);
  auto read = store_->get_run("run_before");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().code, errc::storage_error);

  // Still full: it stays not ready however long it tries.
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(store_->ready());

  disk_->heal();
  const auto healed = std::chrono::steady_clock::now();
  ASSERT_TRUE(recovers()) << store_->health().fault;
  const auto took = std::chrono::steady_clock::now() - healed;
  EXPECT_LT(took, recovery_ms_max);
  EXPECT_GE(store_->health().reopens, 1u);
  ASSERT_TRUE(write_run("run_after").ok());
  auto before = store_->get_run("run_before");
  ASSERT_TRUE(before.ok() && before->has_value());
  // The refused batch never reached the disk.
  auto never = store_->get_run("run_refused");
  ASSERT_TRUE(never.ok());
  EXPECT_FALSE(never->has_value());
}

TEST_F(StorageFaultTest, FaultMessagesNameTheFaultNotThePath) {
  for (const auto kind :
       {fault::no_space, fault::no_descriptors, fault::io_error}) {
    SCOPED_TRACE(static_cast<int>(kind));
    disk_->fail(operation::sync, kind);
    auto failed = write_run("run_" + std::to_string(static_cast<int>(kind)));
    ASSERT_FALSE(failed.ok());
    const auto health = store_->health();
    for (const auto& text : {failed.error().message, health.fault}) {
      EXPECT_EQ(text.find(dir_.path()), std::string::npos) << text;
      EXPECT_EQ(text.find("/tmp"), std::string::npos) << text;
      EXPECT_EQ(text.find(".log"), std::string::npos) << text;
    }
    const char* expected = kind == fault::no_space ? "the disk is full"
                           : kind == fault::no_descriptors
                               ? "no file descriptors left"
                               : "an I/O error";
    EXPECT_NE(health.fault.find(expected), std::string::npos) << health.fault;
    disk_->heal();
    ASSERT_TRUE(recovers()) << store_->health().fault;
  }
}

// A database whose files are deleted while its store runs is never
// reopened as a new, empty one, which would answer its runs as never
// started (and a keyed retry with a second run): the store stays not
// ready, saying why, and reopens once the files are back.
TEST_F(StorageFaultTest, FilesDeletedUnderARunningStoreAreNeverMadeAfresh) {
  namespace fs = std::filesystem;
  ASSERT_TRUE(write_run("kept").ok());
  // Every write is synced: a copy of the idle store is a crash-consistent
  // backup of it.
  durin::testing::temp_dir aside;
  const fs::path saved = fs::path(aside.path()) / "db";
  fs::copy(dir_.path(), saved, fs::copy_options::recursive);
  fs::remove_all(dir_.path());
  disk_->fail(operation::write, fault::io_error);
  EXPECT_FALSE(write_run("lost").ok());
  disk_->heal();
  // A reopen ran, found no database and made none.
  EXPECT_TRUE(eventually(
      [&] {
        return store_->health().fault.find("files are gone") !=
               std::string::npos;
      },
      recovery_ms_max))
      << store_->health().fault;
  EXPECT_FALSE(store_->ready());
  EXPECT_FALSE(fs::exists(fs::path(dir_.path()) / "CURRENT"));
  // Restored, CURRENT last (a reopen may run meanwhile).
  fs::create_directories(dir_.path());
  for (const auto& entry : fs::directory_iterator(saved)) {
    if (entry.path().filename() != "CURRENT") {
      fs::copy_file(entry.path(),
                    fs::path(dir_.path()) / entry.path().filename(),
                    fs::copy_options::overwrite_existing);
    }
  }
  fs::copy_file(saved / "CURRENT", fs::path(dir_.path()) / "CURRENT",
                fs::copy_options::overwrite_existing);
  ASSERT_TRUE(recovers()) << store_->health().fault;
  auto found = store_->get_run("kept");
  ASSERT_TRUE(found.ok()) << found.error().to_string();
  EXPECT_TRUE(found->has_value());
}

TEST_F(StorageFaultTest, DescriptorExhaustionDoesNotWedgeTheStore) {
  ASSERT_TRUE(write_run("run_0").ok());
  // No descriptor for any new file: WAL switches, flushes, table opens.
  disk_->fail(operation::create, fault::no_descriptors);
  disk_->fail(operation::open, fault::no_descriptors);
  int refused = 0;
  for (int i = 1; i <= 20; ++i) {
    force_flush();
    if (!write_run("run_" + std::to_string(i)).ok()) {
      ++refused;
    }
  }
  EXPECT_GT(disk_->injected(), 0u);
  EXPECT_GT(refused, 0);
  EXPECT_FALSE(store_->ready());
  EXPECT_NE(store_->health().fault.find("no file descriptors left"),
            std::string::npos)
      << store_->health().fault;
  disk_->heal();
  ASSERT_TRUE(recovers()) << store_->health().fault;
  ASSERT_TRUE(write_run("run_after").ok());
  force_flush();
  ASSERT_TRUE(write_run("run_after_flush").ok());
}

TEST_F(StorageFaultTest, AnOpenOnAFullDiskComesUpNotReadyAndRecovers) {
  ASSERT_TRUE(write_run("run_kept").ok());
  close();
  disk_->fail(operation::create, fault::no_space);
  disk_->fail(operation::write, fault::no_space);
  open_faulty();
  ASSERT_TRUE(store_);
  EXPECT_FALSE(store_->ready());
  EXPECT_NE(store_->health().fault.find("the disk is full"), std::string::npos)
      << store_->health().fault;
  EXPECT_FALSE(store_->get_run("run_kept").ok());
  EXPECT_FALSE(write_run("run_refused").ok());
  disk_->heal();
  ASSERT_TRUE(recovers()) << store_->health().fault;
  auto kept = store_->get_run("run_kept");
  ASSERT_TRUE(kept.ok() && kept->has_value());
  ASSERT_TRUE(write_run("run_new").ok());
}

// A store that failed reopens only with reopen_free_bytes_min free: on a
// disk a little short of full its open and probe would succeed and the next
// write fail, so readiness would flap with every write. On a real tmpfs
// (root only, else skipped): a fault while 4 MiB are free leaves the store
// not ready through many reopen attempts, saying how much is free; freeing
// the space brings it back.
TEST_F(StorageFaultTest, AStoreThatFailedStaysNotReadyUntilItsDiskHasRoom) {
  close();
  const std::string mount_point = dir_.path() + "/disk";
  durin::testing::tmpfs disk(mount_point, 64);
  if (!disk.mounted()) {
    GTEST_SKIP() << disk.why();
  }
  store_options options;
  options.file_system = disk_;
  options.reopen_backoff_ms_min = 5;
  options.reopen_backoff_ms_max = 20;
  options.reopen_free_bytes_min = 8u << 20;
  auto opened = store::open(mount_point + "/db", options);
  ASSERT_TRUE(opened.ok()) << opened.error().to_string();
  store_ = std::move(opened.value());
  writer_ = std::make_unique<committer>(*store_);
  ASSERT_TRUE(write_run("run_before").ok());

  disk.fill("ballast", 4u << 20);
  disk_->fail(operation::write, fault::no_space);
  ASSERT_FALSE(write_run("run_full").ok());
  disk_->heal();  // the injected fault is gone; the real room is not there

  // Looked at all along 400 ms, 20 or more attempts at 20 ms: never ready.
  const auto reopens = store_->health().reopens;
  const auto until = std::chrono::steady_clock::now() + 400ms;
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_FALSE(store_->ready());
    std::this_thread::sleep_for(10ms);
  }
  auto health = store_->health();
  EXPECT_FALSE(health.ready);
  EXPECT_EQ(health.reopens, reopens);
  EXPECT_NE(health.fault.find("the disk is full"), std::string::npos)
      << health.fault;
  EXPECT_NE(health.fault.find("reopens once 8 MiB"), std::string::npos)
      << health.fault;
  EXPECT_EQ(health.fault.find(mount_point), std::string::npos) << health.fault;
  EXPECT_FALSE(write_run("run_refused").ok());

  std::filesystem::remove(mount_point + "/ballast");
  ASSERT_TRUE(recovers()) << store_->health().fault;
  ASSERT_TRUE(write_run("run_after").ok());
  auto before = store_->get_run("run_before");
  ASSERT_TRUE(before.ok() && before->has_value());
  close();
}

TEST_F(StorageFaultTest, ReadErrorsFailTheReadAloneAndPassWithTheirCause) {
  ASSERT_TRUE(write_run("run_read").ok());
  force_flush();  // the record now lives in a table file
  close();
  open_faulty();
  disk_->fail(operation::read, fault::io_error);
  auto read = store_->get_run("run_read");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().code, errc::storage_error);
  EXPECT_EQ(read.error().message.find(dir_.path()), std::string::npos)
      << read.error().message;
  disk_->heal();
  ASSERT_TRUE(eventually(
      [&] {
        auto again = store_->get_run("run_read");
        return again.ok() && again->has_value();
      },
      recovery_ms_max));
}

// Several writers, hundreds of injected faults of every kind on appends,
// syncs and file creations, each episode ended by healing the disk. Every
// acknowledged batch must survive a fault-free reopen; every batch refused
// without a write must be absent from it.
TEST_F(StorageFaultTest, NothingAcknowledgedIsLostAcrossInjectedFaults) {
  const auto seed = testing::test_seed();
  std::mt19937_64 random(seed);
  constexpr int writers = 4;
  // At least this many episodes, and more until 200 faults were injected
  // (how many a window injects depends on how often the store retried in
  // it, so on the machine's load), within a bound.
  constexpr int episodes_min = 90;
  constexpr int episodes_max = 400;
  int episodes = 0;
  std::atomic<bool> stop{false};
  write_log log;
  auto threads = start_writers(writers, stop, log);
  std::int64_t recovery_ms_worst = 0;
  std::int64_t recovery_ms_total = 0;
  for (int episode = 0; episode < episodes_min ||
                        (disk_->injected() < 200u && episode < episodes_max);
       ++episode, ++episodes) {
    std::int64_t took = 0;
    ASSERT_NO_FATAL_FAILURE(fault_episode(random, episode, took));
    recovery_ms_worst = std::max<std::int64_t>(recovery_ms_worst, took);
    recovery_ms_total += took;
    std::this_thread::sleep_for(std::chrono::milliseconds(random() % 10));
  }
  stop = true;
  for (auto& thread : threads) {
    thread.join();
  }
  const auto injected = disk_->injected();
  const auto health = store_->health();
  close();

  // A fault-free reopen: the truth after a restart.
  auto reopened = store::open(dir_.path());
  ASSERT_TRUE(reopened.ok()) << reopened.error().to_string();
  auto& truth = **reopened;
  ASSERT_TRUE(truth.ready());
  std::size_t kept = 0;
  ASSERT_NO_FATAL_FAILURE(count_stored(truth, log.acknowledged, kept));
  const std::size_t lost = log.acknowledged.size() - kept;
  std::size_t written_anyway = 0;
  ASSERT_NO_FATAL_FAILURE(count_stored(truth, log.not_written, written_anyway));
  std::size_t landed = 0;
  ASSERT_NO_FATAL_FAILURE(count_stored(truth, log.indefinite, landed));
  std::printf(
      "[ figures  ] %d episodes, %llu faults injected, %llu times not ready, "
      "%llu reopens; %zu acknowledged, %zu lost; %zu refused unwritten, %zu "
      "of them written; %zu indefinite, %zu landed; recovery after healing "
      "%lld ms worst, %lld ms mean\n",
      episodes, static_cast<unsigned long long>(injected),
      static_cast<unsigned long long>(health.faults),
      static_cast<unsigned long long>(health.reopens), log.acknowledged.size(),
      lost, log.not_written.size(), written_anyway, log.indefinite.size(),
      landed, static_cast<long long>(recovery_ms_worst),
      static_cast<long long>(recovery_ms_total / episodes));
  EXPECT_GE(injected, 200u);
  EXPECT_GT(health.faults, 0u);
  EXPECT_GT(log.acknowledged.size(), 0u);
  EXPECT_EQ(lost, 0u);
  EXPECT_EQ(written_anyway, 0u);
}

}  // namespace
}  // namespace durin::persistence
