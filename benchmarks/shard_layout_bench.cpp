// Which on-disk form a node's shards take (issue 11, "the shard as the
// unit"): one RocksDB per shard, or one RocksDB per node with a set of
// column families per shard. Measured at 1, 8 and 64 shards on the write
// patterns of the two runtime benchmarks, with durin's own RocksDB options
// and group commit (one committer thread per database, sync = true):
//
//   no-op   one batch per run (run record, active marker, 2 events, end)
//   10-step 11 batches per run, one after the other (each step's events and
//           the run record; the last also the end)
//
// 64 runs are in flight at once, each in a random shard. Figures: runs/s,
// fsyncs/s and runs per fsync, and the ratio of the column-family form to
// the database-per-shard form at the same shard count, measured in the same
// run. Usage: shard_layout_bench [seconds per case, default 3]
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

// The families of a store (persistence/store.hpp).
const char* const families[] = {"runs",    "history", "timers", "active",
                                "meta",    "tokens",  "inbox",  "requests",
                                "tenants", "api_keys"};
constexpr int family_count = 10;
constexpr int family_runs = 0;
constexpr int family_history = 1;
constexpr int family_active = 3;

rocksdb::ColumnFamilyOptions family_options() {
  rocksdb::ColumnFamilyOptions options;
  options.write_buffer_size = 16u << 20;
  options.level_compaction_dynamic_level_bytes = true;
  return options;
}

// One database and its committer: batches waiting are merged into one
// synced write, like persistence::committer.
class database {
 public:
  database(const fs::path& dir, int shard_sets) {
    rocksdb::DBOptions options;
    options.create_if_missing = true;
    options.create_missing_column_families = true;
    options.IncreaseParallelism(2);
    options.max_background_jobs = 2;
    options.db_write_buffer_size = 64u << 20;
    options.avoid_flush_during_shutdown = true;
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName,
                             family_options());
    for (int set = 0; set < shard_sets; ++set) {
      for (const char* name : families) {
        descriptors.emplace_back(std::string(name) + "." + std::to_string(set),
                                 family_options());
      }
    }
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    auto opened =
        rocksdb::DB::Open(options, dir.string(), descriptors, &handles, &db);
    if (!opened.ok()) {
      std::fprintf(stderr, "open %s: %s\n", dir.c_str(),
                   opened.ToString().c_str());
      std::exit(1);
    }
    db_.reset(db);
    handles_ = std::move(handles);
    thread_ = std::thread([this] { loop(); });
  }
  ~database() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
    for (auto* handle : handles_) {
      (void)db_->DestroyColumnFamilyHandle(handle);
    }
  }
  rocksdb::ColumnFamilyHandle* family(int set, int which) const {
    return handles_[1 + set * family_count + which];
  }
  // `fill` adds the batch's operations to the group's one write (the
  // committer copies each batch's operations the same way).
  void submit(std::function<void(rocksdb::WriteBatch&)> fill,
              std::function<void()> done) {
    {
      std::lock_guard lock(mutex_);
      waiting_.push_back({std::move(fill), std::move(done)});
    }
    wake_.notify_one();
  }
  std::uint64_t fsyncs() const { return fsyncs_.load(); }

 private:
  struct pending {
    std::function<void(rocksdb::WriteBatch&)> fill;
    std::function<void()> done;
  };
  void loop() {
    rocksdb::WriteOptions sync;
    sync.sync = true;
    for (;;) {
      std::deque<pending> group;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [this] { return stopping_ || !waiting_.empty(); });
        if (waiting_.empty()) {
          return;
        }
        group.swap(waiting_);
      }
      rocksdb::WriteBatch merged;
      for (auto& item : group) {
        item.fill(merged);
      }
      auto written = db_->Write(sync, &merged);
      if (!written.ok()) {
        std::fprintf(stderr, "write: %s\n", written.ToString().c_str());
        std::exit(1);
      }
      ++fsyncs_;
      for (auto& item : group) {
        item.done();
      }
    }
  }

  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<pending> waiting_;
  bool stopping_ = false;
  std::atomic<std::uint64_t> fsyncs_{0};
  std::thread thread_;
};

// The shards of a node in one of the two forms.
class layout {
 public:
  layout(const fs::path& dir, int shards, bool one_database) {
    if (one_database) {
      databases_.push_back(std::make_unique<database>(dir / "node", shards));
    } else {
      for (int shard = 0; shard < shards; ++shard) {
        databases_.push_back(std::make_unique<database>(
            dir / ("shard-" + std::to_string(shard)), 1));
      }
    }
    one_ = one_database;
  }
  database& of(int shard) { return *databases_[one_ ? 0 : shard]; }
  int set_of(int shard) const { return one_ ? shard : 0; }
  std::uint64_t fsyncs() const {
    std::uint64_t total = 0;
    for (const auto& db : databases_) {
      total += db->fsyncs();
    }
    return total;
  }

 private:
  bool one_ = false;
  std::vector<std::unique_ptr<database>> databases_;
};

struct outcome {
  double runs_per_s = 0;
  double fsyncs_per_s = 0;
};

std::string value_of(std::size_t bytes, std::mt19937_64& random) {
  std::string out(bytes, 'x');
  for (auto& c : out) {
    c = static_cast<char>('a' + random() % 26);
  }
  return out;
}

// One run: `batches` writes in series to its shard; the last ends it.
void run_once(layout& node, int shard, int batches, std::uint64_t id,
              std::mt19937_64& random, std::function<void()> done) {
  struct state {
    layout* node;
    int shard;
    int batches;
    int next = 0;
    std::string key;
    std::string record;
    std::function<void()> done;
  };
  auto s = std::make_shared<state>();
  s->node = &node;
  s->shard = shard;
  s->batches = batches;
  s->key = "run_" + std::to_string(id);
  s->record = value_of(200, random);
  s->done = std::move(done);
  auto step = std::make_shared<std::function<void()>>();
  *step = [s, step] {
    if (s->next == s->batches) {
      s->done();
      *step = nullptr;  // ends the cycle
      return;
    }
    auto& db = s->node->of(s->shard);
    const int set = s->node->set_of(s->shard);
    const int at = s->next++;
    auto fill = [s, &db, set, at](rocksdb::WriteBatch& batch) {
      if (at == 0) {
        (void)batch.Put(db.family(set, family_active), s->key, "");
      }
      for (int event = 0; event < 2; ++event) {
        (void)batch.Put(db.family(set, family_history),
                        s->key + "/" + std::to_string(at * 2 + event),
                        s->record.substr(0, 120));
      }
      (void)batch.Put(db.family(set, family_runs), s->key, s->record);
      if (at + 1 == s->batches) {
        (void)batch.Delete(db.family(set, family_active), s->key);
      }
    };
    auto again = *step;
    db.submit(std::move(fill), std::move(again));
  };
  (*step)();
}

outcome measure(const fs::path& dir, int shards, bool one_database, int batches,
                double seconds) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  layout node(dir, shards, one_database);
  constexpr int in_flight = 64;
  std::atomic<std::uint64_t> finished{0};
  std::atomic<bool> stop{false};
  std::atomic<int> running{0};
  std::mutex random_mutex;
  std::mt19937_64 random(42);
  std::atomic<std::uint64_t> ids{0};
  std::function<void()> launch;
  launch = [&] {
    if (stop) {
      --running;
      return;
    }
    int shard;
    {
      std::lock_guard lock(random_mutex);
      shard = static_cast<int>(random() % shards);
    }
    std::mt19937_64 local(ids.load());
    run_once(node, shard, batches, ids++, local, [&] {
      ++finished;
      launch();
    });
  };
  const auto fsyncs_before = node.fsyncs();
  const auto began = clock_type::now();
  for (int i = 0; i < in_flight; ++i) {
    ++running;
    launch();
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const auto done_runs = finished.load();
  const auto done_fsyncs = node.fsyncs() - fsyncs_before;
  const double elapsed =
      std::chrono::duration<double>(clock_type::now() - began).count();
  stop = true;
  while (running.load() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return {done_runs / elapsed, done_fsyncs / elapsed};
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 3.0;
  auto dir = fs::temp_directory_path() /
             ("durin-shard-layout-" + std::to_string(::getpid()));
  std::printf("# shard layout: %.1f s per case, 64 runs in flight\n", seconds);
  std::printf("%-8s %6s %-14s %12s %12s %10s %8s\n", "workload", "shards",
              "form", "runs/s", "fsyncs/s", "runs/fsync", "cf/db");
  for (int batches : {1, 11}) {
    for (int shards : {1, 8, 64}) {
      outcome per_db = measure(dir, shards, false, batches, seconds);
      outcome one_db = measure(dir, shards, true, batches, seconds);
      const char* workload = batches == 1 ? "no-op" : "10-step";
      std::printf("%-8s %6d %-14s %12.0f %12.0f %10.2f\n", workload, shards,
                  "db-per-shard", per_db.runs_per_s, per_db.fsyncs_per_s,
                  per_db.runs_per_s / per_db.fsyncs_per_s);
      std::printf("%-8s %6d %-14s %12.0f %12.0f %10.2f %8.2f\n", workload,
                  shards, "cf-set", one_db.runs_per_s, one_db.fsyncs_per_s,
                  one_db.runs_per_s / one_db.fsyncs_per_s,
                  one_db.runs_per_s / per_db.runs_per_s);
      std::fflush(stdout);
    }
  }
  fs::remove_all(dir);
  return 0;
}
