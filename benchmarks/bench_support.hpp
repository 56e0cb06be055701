// Shared helpers of durin's benchmarks: temporary data directories, sizes
// read from the environment, the process's resident memory, the raw RocksDB
// baselines every benchmark reports against, and the plain-text summary
// printed after Google Benchmark's table.
//
// The baselines run on the same disk as the benchmarks (under
// $DURIN_BENCH_DIR, else /tmp) through persistence::store, so they use the
// RocksDB options the runtime uses:
//   (a) single: one admission-sized batch per synced write, one thread;
//   (b) committer: many threads submitting admission-sized batches to the
//       runtime's group-commit writer (persistence::committer) with a bounded
//       number in flight: what the runtime's batching can achieve at best;
//   (c) group loop: one thread, `records_per_write` admission batches merged
//       into each synced write: the same batching without threads.
// A "record" is one admission batch: a run record and its `active` marker.
//
// Thread-safety: process_baselines() measures once per process
// (std::call_once) and may be called from any thread; the summary is guarded
// by a mutex. Everything else is a plain function of its arguments.
#pragma once

#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <semaphore>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "persistence/committer.hpp"
#include "persistence/records.hpp"
#include "persistence/store.hpp"

namespace durin::bench {

using steady = std::chrono::steady_clock;

inline double seconds_since(steady::time_point start) {
  return std::chrono::duration<double>(steady::now() - start).count();
}

// Data directories alive now, so that fail() can remove them: it ends the
// process at once, without the destructors of the objects that own them.
inline std::mutex& live_dirs_mutex() {
  static std::mutex mutex;
  return mutex;
}
inline std::set<std::string>& live_dirs() {
  static std::set<std::string> dirs;
  return dirs;
}

// Stops the benchmark binary with a message, removing its data
// directories: a benchmark whose setup failed has no figure worth printing.
[[noreturn]] inline void fail(const std::string& message) {
  std::fprintf(stderr, "bench: %s\n", message.c_str());
  std::fflush(stderr);
  {
    std::lock_guard<std::mutex> lock(live_dirs_mutex());
    for (const auto& dir : live_dirs()) {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  }
  std::_Exit(2);
}

// Where data directories go: $DURIN_BENCH_DIR, else /tmp.
inline std::string bench_root() {
  const char* dir = std::getenv("DURIN_BENCH_DIR");
  return dir != nullptr && *dir != '\0' ? std::string(dir)
                                        : std::string("/tmp");
}

// A positive integer from the environment, or `fallback` when unset. A set
// but malformed value stops the benchmark rather than being ignored.
inline std::uint64_t env_count(const char* name, std::uint64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') {
    return fallback;
  }
  char* end = nullptr;
  auto value = std::strtoull(text, &end, 10);
  if (end == nullptr || *end != '\0' || value == 0) {
    fail(std::string(name) + " must be a positive integer; got '" + text + "'");
  }
  return value;
}

// A directory made with mkdtemp under bench_root(), removed with everything
// in it when this object goes away.
class temp_dir {
 public:
  explicit temp_dir(std::string_view tag) {
    std::string pattern =
        bench_root() + "/durin-bench-" + std::string(tag) + "-XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (::mkdtemp(buffer.data()) == nullptr) {
      fail("mkdtemp failed for " + pattern);
    }
    path_ = buffer.data();
    std::lock_guard<std::mutex> lock(live_dirs_mutex());
    live_dirs().insert(path_);
  }
  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
    std::lock_guard<std::mutex> lock(live_dirs_mutex());
    live_dirs().erase(path_);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  const std::string& path() const { return path_; }
  std::string sub(std::string_view name) const {
    return path_ + "/" + std::string(name);
  }

 private:
  std::string path_;
};

// Resident memory now and at its peak, from /proc/self/status, in KiB.
struct memory_kib {
  std::int64_t rss = 0;   // VmRSS
  std::int64_t peak = 0;  // VmHWM
};

inline memory_kib process_memory() {
  memory_kib out;
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    std::istringstream fields(line);
    std::string name;
    std::int64_t value = 0;
    fields >> name >> value;
    if (name == "VmRSS:") {
      out.rss = value;
    } else if (name == "VmHWM:") {
      out.peak = value;
    }
  }
  return out;
}

// CPU time this process has used so far, user and system, in seconds.
inline double process_cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& value) {
    return static_cast<double>(value.tv_sec) +
           static_cast<double>(value.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Cores of this machine, for what a CPU cost per unit allows at best.
inline double cores() {
  return static_cast<double>(std::max(1u, std::thread::hardware_concurrency()));
}

inline double mib(std::int64_t kib) {
  return static_cast<double>(kib) / 1024.0;
}

// The 1-minute load average, to print next to figures: other work on this
// machine competes for its cores.
inline double load_average() {
  std::ifstream file("/proc/loadavg");
  double one_minute = 0;
  file >> one_minute;
  return one_minute;
}

// Polls `done` every `period` until it holds or `limit` passes.
inline bool poll_until(
    const std::function<bool()>& done, std::chrono::milliseconds limit,
    std::chrono::milliseconds period = std::chrono::milliseconds(5)) {
  auto deadline = steady::now() + limit;
  while (!done()) {
    if (steady::now() >= deadline) {
      return false;
    }
    std::this_thread::sleep_for(period);
  }
  return true;
}

// ---------------------------------------------------------------------------
// Raw RocksDB baselines.

// A run record the size of a no-op admission: "run_" + 26 characters, a
// short flow name, input {} as MessagePack, creation time.
inline persistence::run_record sample_record(std::uint64_t number) {
  char id[64];
  std::snprintf(id, sizeof id, "run_BENCH%021llu",
                static_cast<unsigned long long>(number));
  persistence::run_record record;
  record.id = id;
  record.flow = "bench.noop";
  record.status = run_status::pending;
  record.input = std::string(1, '\x80');  // MessagePack {}
  record.created_at_ms = 1'700'000'000'000 + static_cast<std::int64_t>(number);
  return record;
}

// Adds one admission (run record + active marker) to `batch`.
inline void add_admission(persistence::write_batch& batch,
                          std::uint64_t number) {
  auto record = sample_record(number);
  batch.put_run(record);
  batch.put_active(record.id);
}

inline std::unique_ptr<persistence::store> open_store(const std::string& dir) {
  auto opened = persistence::store::open(dir);
  if (!opened) {
    fail("cannot open a store in " + dir + ": " + opened.error().to_string());
  }
  return std::move(*opened);
}

struct rate {
  std::uint64_t records = 0;
  std::uint64_t writes = 0;  // synced RocksDB writes
  double seconds = 0;
  double cpu_seconds = 0;  // the whole process's, over the same interval

  double cpu_us_per_record() const {
    return records > 0 ? cpu_seconds * 1e6 / static_cast<double>(records) : 0;
  }

  double per_second() const {
    return seconds > 0 ? static_cast<double>(records) / seconds : 0;
  }
  double records_per_write() const {
    return writes > 0 ? static_cast<double>(records) / writes : 0;
  }
  double write_latency_us() const {
    return writes > 0 ? seconds * 1e6 / static_cast<double>(writes) : 0;
  }
};

// (a) One admission per synced write, one thread.
inline rate measure_single_sync_writes(const std::string& dir,
                                       std::uint64_t writes) {
  auto db = open_store(dir);
  rate out;
  auto cpu_start = process_cpu_seconds();
  auto start = steady::now();
  for (std::uint64_t i = 0; i < writes; ++i) {
    auto batch = db->batch();
    add_admission(batch, i);
    if (auto written = db->write(batch); !written) {
      fail("baseline write failed: " + written.error().to_string());
    }
  }
  out.seconds = seconds_since(start);
  out.cpu_seconds = process_cpu_seconds() - cpu_start;
  out.records = writes;
  out.writes = writes;
  return out;
}

// (b) `threads` threads submit one admission per batch to the committer,
// with at most `in_flight_max` batches not yet durable.
inline rate measure_committer(const std::string& dir, std::uint64_t batches,
                              std::size_t threads, std::size_t in_flight_max) {
  auto db = open_store(dir);
  persistence::committer writer(*db);
  std::counting_semaphore<1 << 24> slots(
      static_cast<std::ptrdiff_t>(in_flight_max));
  std::atomic<std::uint64_t> answered{0};
  std::atomic<std::uint64_t> failed{0};
  std::mutex mutex;
  std::condition_variable all_answered;
  auto cpu_start = process_cpu_seconds();
  auto start = steady::now();
  std::vector<std::thread> submitters;
  for (std::size_t t = 0; t < threads; ++t) {
    submitters.emplace_back([&, t] {
      for (std::uint64_t i = t; i < batches; i += threads) {
        slots.acquire();
        auto batch = db->batch();
        add_admission(batch, i);
        writer.submit(std::move(batch), [&](const status& outcome) {
          if (!outcome) {
            failed.fetch_add(1);
          }
          slots.release();
          if (answered.fetch_add(1) + 1 == batches) {
            std::lock_guard<std::mutex> lock(mutex);
            all_answered.notify_all();
          }
        });
      }
    });
  }
  {
    std::unique_lock<std::mutex> lock(mutex);
    all_answered.wait(lock, [&] { return answered.load() == batches; });
  }
  rate out;
  out.seconds = seconds_since(start);
  out.cpu_seconds = process_cpu_seconds() - cpu_start;
  for (auto& thread : submitters) {
    thread.join();
  }
  if (failed.load() != 0) {
    fail(std::to_string(failed.load()) + " baseline committer writes failed");
  }
  auto stats = writer.statistics();
  out.records = stats.batches;
  out.writes = stats.group_writes;
  return out;
}

// (c) One thread; `per_write` admissions merged into each synced write.
inline rate measure_group_loop(const std::string& dir, std::uint64_t records,
                               std::uint64_t per_write) {
  auto db = open_store(dir);
  rate out;
  auto cpu_start = process_cpu_seconds();
  auto start = steady::now();
  for (std::uint64_t first = 0; first < records; first += per_write) {
    auto batch = db->batch();
    for (std::uint64_t i = first; i < std::min(records, first + per_write);
         ++i) {
      add_admission(batch, i);
    }
    if (auto written = db->write(batch); !written) {
      fail("baseline group write failed: " + written.error().to_string());
    }
    out.writes += 1;
  }
  out.seconds = seconds_since(start);
  out.cpu_seconds = process_cpu_seconds() - cpu_start;
  out.records = records;
  return out;
}

struct baselines {
  rate single;     // (a)
  rate committer;  // (b)
  rate group;      // (c)
  std::size_t committer_threads = 0;
  std::size_t committer_in_flight = 0;
};

// Sizes: DURIN_BENCH_BASELINE_SINGLE (default 1000 writes),
// DURIN_BENCH_BASELINE_BATCHES (default 100,000 committer batches and group
// loop records), DURIN_BENCH_BASELINE_THREADS (default 8 submitters),
// DURIN_BENCH_BASELINE_IN_FLIGHT (default 4,000), DURIN_BENCH_GROUP_RECORDS
// (default 256 records per group-loop write).
inline baselines measure_baselines() {
  temp_dir dir("baseline");
  baselines out;
  out.committer_threads = env_count("DURIN_BENCH_BASELINE_THREADS", 8);
  out.committer_in_flight = env_count("DURIN_BENCH_BASELINE_IN_FLIGHT", 4000);
  auto batches = env_count("DURIN_BENCH_BASELINE_BATCHES", 100'000);
  out.single = measure_single_sync_writes(
      dir.sub("single"), env_count("DURIN_BENCH_BASELINE_SINGLE", 1000));
  out.committer =
      measure_committer(dir.sub("committer"), batches, out.committer_threads,
                        out.committer_in_flight);
  out.group = measure_group_loop(dir.sub("group"), batches,
                                 env_count("DURIN_BENCH_GROUP_RECORDS", 256));
  return out;
}

// Measured once, on first use, so every benchmark of a process prints the
// same baseline from its own run.
inline const baselines& process_baselines() {
  static std::once_flag once;
  static baselines measured;
  std::call_once(once, [] {
    measured = measure_baselines();
    std::printf(
        "BASELINE single sync write: %.0f records/s (%.0f us/write); "
        "committer (%zu threads, %zu in flight): %.0f records/s "
        "(%.1f records/write, %.1f us CPU/record); group loop: %.0f "
        "records/s (%.0f records/write, %.1f us CPU/record); load %.2f\n",
        measured.single.per_second(), measured.single.write_latency_us(),
        measured.committer_threads, measured.committer_in_flight,
        measured.committer.per_second(), measured.committer.records_per_write(),
        measured.committer.cpu_us_per_record(), measured.group.per_second(),
        measured.group.records_per_write(), measured.group.cpu_us_per_record(),
        load_average());
    std::fflush(stdout);
  });
  return measured;
}

// Adds the baselines and durin's figure as ratios of them to `state`.
// `per_second` is durin's figure in records per second; `records_each` the
// synced batches durin writes per unit of that figure (a no-op run writes
// two: admission and completion), so that `ceiling` is what the baseline
// allows for durin's unit.
inline void add_baseline_counters(benchmark::State& state, double per_second,
                                  double records_each) {
  const auto& base = process_baselines();
  state.counters["base_single_per_s"] = base.single.per_second();
  state.counters["base_committer_per_s"] = base.committer.per_second();
  state.counters["base_group_per_s"] = base.group.per_second();
  if (per_second > 0) {
    state.counters["ratio_to_single"] = per_second / base.single.per_second();
    state.counters["ratio_to_committer"] =
        per_second / base.committer.per_second();
    state.counters["ceiling_per_s"] =
        base.committer.per_second() / records_each;
    state.counters["ratio_to_ceiling"] =
        per_second * records_each / base.committer.per_second();
  }
  state.counters["base_committer_cpu_us"] = base.committer.cpu_us_per_record();
  state.counters["load_avg"] = load_average();
}

// ---------------------------------------------------------------------------
// The summary: one plain line per figure, printed after the table.

struct summary_line {
  std::string figure;
  std::string goal;
  std::string measured;
  std::string baseline;
  std::string ratio;
  std::string verdict;  // "met", "MISSED" or "info"
};

inline std::mutex& summary_mutex() {
  static std::mutex mutex;
  return mutex;
}

inline std::vector<summary_line>& summary_lines() {
  static std::vector<summary_line> lines;
  return lines;
}

inline void report(summary_line line) {
  std::lock_guard<std::mutex> lock(summary_mutex());
  summary_lines().push_back(std::move(line));
}

inline std::string format(const char* pattern, double value) {
  char text[128];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
}

// A rate as the summary prints it: "12345 runs/s".
inline std::string rate_text(double value, const char* unit) {
  return format("%.0f", value) + " " + unit;
}

inline void print_summary() {
  std::lock_guard<std::mutex> lock(summary_mutex());
  for (const auto& line : summary_lines()) {
    std::printf(
        "SUMMARY | %s | goal %s | measured %s | baseline %s | "
        "ratio %s | %s\n",
        line.figure.c_str(), line.goal.c_str(), line.measured.c_str(),
        line.baseline.c_str(), line.ratio.c_str(), line.verdict.c_str());
  }
  std::fflush(stdout);
}

// The main() of a Google Benchmark binary of durin: runs the benchmarks the
// command line selects, then prints every figure's SUMMARY line together.
inline int run_benchmarks(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  print_summary();
  return 0;
}

}  // namespace durin::bench
