// Benchmarks of hook tokens (issue 3; every write is synced). Goals, on a
// 2-core machine:
//   starts with a unique start token          >= 20,000 runs/s
//   duplicate starts refused                  >= 200,000/s, writing nothing
//   resumes delivered to a waiting run        >= 20,000 payloads/s
//   1,000,000 retained tokens                 no actor and no memory held for
//                                             idle tokens; bytes on disk/token
// Each benchmark also reports the raw sync-write baselines of
// bench_support.hpp, measured in the same process on the same disk, and its
// figure as a ratio of them. Method and measured figures: benchmarks/README.md.
//
// Every benchmark runs one iteration with manual timing; sizes come from
// DURIN_BENCH_* environment variables.
#include <benchmark/benchmark.h>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include <malloc.h>
#include <rocksdb/db.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <semaphore>
#include <string>
#include <thread>
#include <vector>

#include "benchmarks/bench_support.hpp"
#include "benchmarks/run_tracking.hpp"
#include "durin/caf.hpp"
#include "durin/durin.hpp"
#include "durin/runtime.hpp"

namespace {

using namespace std::chrono_literals;
namespace bench = durin::bench;
using durin::json;

// ---------------------------------------------------------------------------
// Flows.

// Completes at once without opening its start hook (rule 5).
durin::flow<json> hook_noop(durin::context& ctx, json input) {
  (void)ctx;
  (void)input;
  co_return json();
}

// Reads its start hook (input.token) until a payload with "done"; returns
// how many payloads it read.
durin::flow<json> hook_reader(durin::context& ctx, json input) {
  auto hook = ctx.create_hook<json>({.token = input.at("token")});
  std::int64_t read = 0;
  while (auto payload = co_await hook.next()) {
    ++read;
    if (payload->is_object() && payload->value("done", false)) {
      break;
    }
  }
  co_return read;
}

durin::registry hook_flows() {
  durin::registry flows;
  flows.flow("bench.hook-noop", hook_noop);
  flows.flow("bench.hook-reader", hook_reader);
  return flows;
}

std::unique_ptr<durin::runtime> open_runtime(const std::string& dir) {
  durin::runtime_options options;
  options.data_dir = dir;
  options.actor_threads = bench::env_count("DURIN_BENCH_ACTOR_THREADS", 0);
  options.step_threads = bench::env_count("DURIN_BENCH_STEP_THREADS", 8);
  // The resume benchmark writes DURIN_BENCH_RESUMES (50,000) payloads into
  // one run's history, the default limit's size: room for them.
  options.history_events_max =
      4 * bench::env_count("DURIN_BENCH_RESUMES", 50'000) + 1'000;
  auto opened = durin::runtime::open(std::move(options), hook_flows());
  if (!opened) {
    bench::fail("runtime::open failed: " + opened.error().to_string());
  }
  return std::move(*opened);
}

durin::start_options with_hook(std::string token,
                               json min_retention = nullptr) {
  durin::start_options options;
  options.hook =
      durin::start_hook{std::move(token), std::move(min_retention), nullptr};
  return options;
}

std::chrono::milliseconds time_limit() {
  return std::chrono::milliseconds(
      bench::env_count("DURIN_BENCH_TIMEOUT_S", 600) * 1000);
}

// Bytes of the regular files under `dir`. With `data_only`, RocksDB's info
// log (LOG, LOG.old.*) is left out: it is text about the database, not data.
std::uint64_t dir_bytes(const std::string& dir, bool data_only = false) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator();
       it.increment(ec)) {
    std::error_code size_ec;
    if (data_only && it->path().filename().string().rfind("LOG", 0) == 0) {
      continue;
    }
    if (it->is_regular_file(size_ec)) {
      auto size = it->file_size(size_ec);
      if (!size_ec) {
        total += size;
      }
    }
  }
  return total;
}

// ---------------------------------------------------------------------------
// Driving many runs: `submitters` threads call start_async with at most
// `in_flight_max` runs admitted-or-admitting and not yet ended. Admission
// callbacks (on the committer thread) only queue the run id; one thread
// registers notify_on_finish for it with a CAF listener that counts ends.

class run_driver {
 public:
  run_driver(durin::runtime& runtime, std::uint64_t expected,
             std::size_t in_flight_max)
      : runtime_(runtime),
        tracker_(runtime, expected, in_flight_max),
        watching_(tracker_) {}

  // Starts run `i` of `flow` with `options(i)`; blocks while the in-flight
  // bound is reached.
  template <class OptionsFor>
  void start(const std::string& flow, const OptionsFor& options_for,
             std::uint64_t i) {
    tracker_.acquire_slot();
    runtime_.start_async(flow, json::object(), options_for(i),
                         [this](durin::result<durin::run_info> admitted) {
                           admitted_.fetch_add(1);
                           if (admitted) {
                             watching_.push(std::move(admitted->id));
                           } else {
                             tracker_.refused();
                           }
                         });
  }

  bool wait_all(std::chrono::milliseconds limit) {
    return tracker_.wait_all(limit);
  }
  std::uint64_t ended() const { return tracker_.ended(); }
  std::uint64_t failed() const { return tracker_.failed(); }
  std::uint64_t admitted() const { return admitted_.load(); }

 private:
  durin::runtime& runtime_;
  bench::finish_tracker tracker_;
  bench::watch_queue watching_;
  std::atomic<std::uint64_t> admitted_{0};
};

struct drive_result {
  std::uint64_t runs = 0;
  std::uint64_t failed = 0;
  double admit_seconds = 0;  // first start_async to last admission answer
  double seconds = 0;        // first start_async to last completion
  double cpu_seconds = 0;    // the process's, first start to last completion
};

// Runs `runs` runs of `flow`, run i with start token `prefix + i`.
drive_result drive_token_runs(durin::runtime& runtime, const std::string& flow,
                              const std::string& prefix, json min_retention,
                              std::uint64_t runs) {
  auto in_flight = bench::env_count("DURIN_BENCH_IN_FLIGHT", 4000);
  auto submitters = bench::env_count("DURIN_BENCH_SUBMITTERS", 4);
  drive_result out;
  run_driver driver(runtime, runs, in_flight);
  auto options_for = [&](std::uint64_t i) {
    return with_hook(prefix + std::to_string(i), min_retention);
  };
  auto cpu_start = bench::process_cpu_seconds();
  auto start = bench::steady::now();
  std::vector<std::thread> threads;
  for (std::uint64_t t = 0; t < submitters; ++t) {
    threads.emplace_back([&, t] {
      for (std::uint64_t i = t; i < runs; i += submitters) {
        driver.start(flow, options_for, i);
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  if (!bench::poll_until([&] { return driver.admitted() >= runs; },
                         time_limit(), 1ms)) {
    bench::fail("only " + std::to_string(driver.admitted()) + " of " +
                std::to_string(runs) + " starts answered in time");
  }
  out.admit_seconds = bench::seconds_since(start);
  if (!driver.wait_all(time_limit())) {
    bench::fail("only " + std::to_string(driver.ended()) + " of " +
                std::to_string(runs) + " runs of " + flow + " ended in time");
  }
  out.seconds = bench::seconds_since(start);
  out.cpu_seconds = bench::process_cpu_seconds() - cpu_start;
  out.runs = runs;
  out.failed = driver.failed();
  return out;
}

std::string baseline_text() {
  const auto& base = bench::process_baselines();
  return "(a) " + bench::format("%.0f", base.single.per_second()) +
         " rec/s, (b) " + bench::format("%.0f", base.committer.per_second()) +
         " rec/s";
}

// durin's rate as ratios of the baselines; `records_each`: synced batches
// per unit of the figure.
std::string ratio_text(double per_second, double records_each) {
  const auto& base = bench::process_baselines();
  return bench::format("%.2f of (a), ", per_second / base.single.per_second()) +
         bench::format("%.3f of (b), ",
                       per_second / base.committer.per_second()) +
         bench::format("%.2f of the (b) ceiling",
                       per_second * records_each / base.committer.per_second());
}

// ---------------------------------------------------------------------------
// Starts with a unique start token.

void BM_unique_token_starts(benchmark::State& state) {
  auto runs = bench::env_count("DURIN_BENCH_TOKEN_STARTS", 50'000);
  bench::process_baselines();
  drive_result result;
  for (auto _ : state) {
    bench::temp_dir dir("hook-starts");
    auto runtime = open_runtime(dir.sub("db"));
    result =
        drive_token_runs(*runtime, "bench.hook-noop", "start:", nullptr, runs);
    state.SetIterationTime(result.seconds);
  }
  if (result.failed != 0) {
    bench::fail(std::to_string(result.failed) + " token starts failed");
  }
  double per_s = static_cast<double>(result.runs) / result.seconds;
  double admit_per_s = static_cast<double>(result.runs) / result.admit_seconds;
  double cpu_us = result.cpu_seconds * 1e6 / static_cast<double>(result.runs);
  state.counters["runs_per_s"] = per_s;
  state.counters["admitted_per_s"] = admit_per_s;
  state.counters["cpu_us_per_run"] = cpu_us;
  bench::add_baseline_counters(state, per_s, 2);
  bench::report({"starts with a unique start token (start to completed)",
                 ">= 20,000 runs/s",
                 bench::rate_text(per_s, "runs/s") + " (admissions " +
                     bench::rate_text(admit_per_s, "/s") + "; " +
                     bench::format("%.0f us CPU/run, ", cpu_us) +
                     bench::format("2 cores allow %.0f/s",
                                   1e6 / cpu_us * bench::cores()) +
                     bench::format("; load %.1f)", bench::load_average()),
                 baseline_text(), ratio_text(per_s, 2),
                 per_s >= 20'000 ? "met" : "MISSED"});
}
BENCHMARK(BM_unique_token_starts)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------
// Duplicate starts refused: one owner waits on its start hook; many threads
// start with the same token and each must get hook-conflict naming it.

// What the duplicate starts got: refusals naming the owner, and anything
// else (the first of which is kept).
struct duplicate_outcomes {
  std::atomic<std::uint64_t> refused{0};
  std::atomic<std::uint64_t> wrong{0};
  std::mutex wrong_mutex;
  std::string first_wrong;
};

// `total` starts with the owner's token, from `threads_n` threads.
void start_duplicates(durin::runtime& runtime, const std::string& token,
                      const std::string& owner_id, std::uint64_t total,
                      std::uint64_t threads_n, duplicate_outcomes& outcomes) {
  std::vector<std::thread> threads;
  for (std::uint64_t t = 0; t < threads_n; ++t) {
    threads.emplace_back([&, t] {
      auto options = with_hook(token);
      for (std::uint64_t i = t; i < total; i += threads_n) {
        auto again =
            runtime.start("bench.hook-reader", {{"token", token}}, options);
        if (!again && again.error().code == durin::errc::hook_conflict &&
            again.error().run_id == owner_id) {
          outcomes.refused.fetch_add(1, std::memory_order_relaxed);
        } else if (outcomes.wrong.fetch_add(1) == 0) {
          std::lock_guard<std::mutex> lock(outcomes.wrong_mutex);
          outcomes.first_wrong = again ? "admitted run " + again->id
                                       : again.error().to_string() + " (run " +
                                             again.error().run_id + ")";
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
}

void report_duplicates(benchmark::State& state, double per_s, double cpu_us,
                       std::uint64_t threads_n, std::int64_t dir_growth,
                       std::int64_t log_growth, std::uint64_t runs_after) {
  state.counters["refused_per_s"] = per_s;
  state.counters["cpu_us_per_refusal"] = cpu_us;
  state.counters["dir_growth_bytes"] = static_cast<double>(dir_growth);
  state.counters["runs_after"] = static_cast<double>(runs_after);
  bench::add_baseline_counters(state, per_s, 1);
  bench::report(
      {"duplicate starts refused (hook-conflict naming the owner)",
       ">= 200,000/s, writing nothing",
       bench::rate_text(per_s, "refusals/s") + " (" +
           std::to_string(threads_n) + " threads, blocking start; " +
           bench::format("%.1f us CPU each; ", cpu_us) +
           bench::format("data files grew %.0f bytes",
                         static_cast<double>(dir_growth)) +
           bench::format(" (info LOG %.0f); ",
                         static_cast<double>(log_growth)) +
           std::to_string(runs_after) + " run(s) listed" +
           bench::format("; load %.1f)", bench::load_average()),
       baseline_text(),
       bench::format("%.2f of (a), ",
                     per_s / bench::process_baselines().single.per_second()) +
           bench::format(
               "%.2f of (b)",
               per_s / bench::process_baselines().committer.per_second()),
       per_s >= 200'000 && dir_growth == 0 && runs_after == 1 ? "met"
                                                              : "MISSED"});
}

void BM_duplicate_starts_refused(benchmark::State& state) {
  auto total = bench::env_count("DURIN_BENCH_DUPLICATE_STARTS", 400'000);
  auto threads_n = bench::env_count("DURIN_BENCH_DUPLICATE_THREADS", 8);
  bench::process_baselines();
  duplicate_outcomes outcomes;
  double seconds = 0;
  double cpu_seconds = 0;
  std::uint64_t runs_after = 0;
  std::int64_t dir_growth = 0;  // WAL, SST, MANIFEST...
  std::int64_t log_growth = 0;  // RocksDB's info log
  for (auto _ : state) {
    bench::temp_dir dir("hook-duplicates");
    auto db_dir = dir.sub("db");
    auto runtime = open_runtime(db_dir);
    const std::string token = "dup:owner";
    auto owner = runtime->start("bench.hook-reader", {{"token", token}},
                                with_hook(token));
    if (!owner) {
      bench::fail("owner start failed: " + owner.error().to_string());
    }
    if (!bench::poll_until(
            [&] {
              auto hook = runtime->get_hook_by_token(token);
              return hook && hook->owner_run_id == owner->id &&
                     runtime->get(owner->id)->status ==
                         durin::run_status::waiting;
            },
            10s)) {
      bench::fail("the owner never started waiting on its hook");
    }
    // Warm: the token's actor is loaded before the clock starts.
    (void)runtime->start("bench.hook-reader", {{"token", token}},
                         with_hook(token));
    std::this_thread::sleep_for(200ms);
    auto before = dir_bytes(db_dir, true);
    auto before_all = dir_bytes(db_dir);
    auto cpu_start = bench::process_cpu_seconds();
    auto start = bench::steady::now();
    start_duplicates(*runtime, token, owner->id, total, threads_n, outcomes);
    seconds = bench::seconds_since(start);
    cpu_seconds = bench::process_cpu_seconds() - cpu_start;
    std::this_thread::sleep_for(200ms);
    dir_growth = static_cast<std::int64_t>(dir_bytes(db_dir, true)) -
                 static_cast<std::int64_t>(before);
    log_growth = static_cast<std::int64_t>(dir_bytes(db_dir)) -
                 static_cast<std::int64_t>(before_all) - dir_growth;
    auto listed = runtime->list({});
    runs_after = listed ? listed->runs.size() : 0;
    // Let the owner end so the runtime closes promptly.
    (void)runtime->resume_hook(token, {{"done", true}});
    (void)runtime->wait(owner->id, 10s);
    state.SetIterationTime(seconds);
  }
  if (outcomes.wrong.load() != 0) {
    bench::fail(std::to_string(outcomes.wrong.load()) +
                " duplicate starts were not refused with the owner: first " +
                outcomes.first_wrong);
  }
  double per_s = static_cast<double>(outcomes.refused.load()) / seconds;
  double cpu_us =
      cpu_seconds * 1e6 / static_cast<double>(outcomes.refused.load());
  report_duplicates(state, per_s, cpu_us, threads_n, dir_growth, log_growth,
                    runs_after);
}
BENCHMARK(BM_duplicate_starts_refused)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------
// Resumes delivered to a waiting run: one run reads its start hook in a loop;
// threads call resume_hook (blocking: it answers once the payload is
// durable); the clock stops when the run has read them all and completed.

// payloads - 1 plain payloads: with resume_hook_async and `in_flight` in
// flight when `threads_n` is 0, else from `threads_n` threads calling the
// blocking resume_hook. Returns once every one is answered.
void send_resumes(durin::runtime& runtime, const std::string& token,
                  std::uint64_t payloads, std::uint64_t threads_n,
                  std::uint64_t in_flight,
                  const std::function<void(const durin::error&)>& failed) {
  if (threads_n == 0) {
    // Shared: a callback may still be inside release() when the last
    // acquire below returns.
    auto slots = std::make_shared<std::counting_semaphore<1 << 20>>(
        static_cast<std::ptrdiff_t>(in_flight));
    for (std::uint64_t i = 0; i + 1 < payloads; ++i) {
      slots->acquire();
      runtime.resume_hook_async(
          token, {{"n", i}}, {},
          // `failed` outlives every call: the last acquire below returns
          // only after the last callback has called it.
          [&failed, slots](durin::result<std::string> resumed) {
            if (!resumed) {
              failed(resumed.error());
            }
            slots->release();
          });
    }
    for (std::uint64_t i = 0; i < in_flight; ++i) {
      slots->acquire();  // every answer is in
    }
    return;
  }
  std::vector<std::thread> threads;
  for (std::uint64_t t = 0; t < threads_n; ++t) {
    threads.emplace_back([&, t] {
      for (std::uint64_t i = t; i + 1 < payloads; i += threads_n) {
        auto resumed = runtime.resume_hook(token, {{"n", i}});
        if (!resumed) {
          failed(resumed.error());
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
}

void report_resumes(benchmark::State& state, std::uint64_t payloads,
                    double seconds, double acked_seconds, double cpu_seconds,
                    std::uint64_t threads_n, std::uint64_t in_flight) {
  double per_s = static_cast<double>(payloads) / seconds;
  double acked_per_s = static_cast<double>(payloads) / acked_seconds;
  double cpu_us = cpu_seconds * 1e6 / static_cast<double>(payloads);
  state.counters["payloads_per_s"] = per_s;
  state.counters["acked_per_s"] = acked_per_s;
  state.counters["cpu_us_per_payload"] = cpu_us;
  state.counters["tail_ms"] = (seconds - acked_seconds) * 1e3;
  bench::add_baseline_counters(state, per_s, 2);
  std::string how =
      threads_n == 0
          ? "resume_hook_async, " + std::to_string(in_flight) + " in flight"
          : std::to_string(threads_n) + " threads, blocking";
  bench::report(
      {"resumes delivered to a waiting run (first resume to run completed)",
       ">= 20,000 payloads/s",
       bench::rate_text(per_s, "payloads/s") + " (" + how +
           "; all acknowledged at " + bench::rate_text(acked_per_s, "/s") +
           bench::format("; %.0f us CPU each, ", cpu_us) +
           bench::format("2 cores allow %.0f/s",
                         1e6 / cpu_us * bench::cores()) +
           bench::format("; load %.1f)", bench::load_average()),
       baseline_text(), ratio_text(per_s, 2),
       per_s >= 20'000 ? "met" : "MISSED"});
}

// Starts the run that reads `token`'s payloads and waits until it waits.
std::string start_reader(durin::runtime& runtime, const std::string& token) {
  auto owner =
      runtime.start("bench.hook-reader", {{"token", token}}, with_hook(token));
  if (!owner) {
    bench::fail("reader start failed: " + owner.error().to_string());
  }
  if (!bench::poll_until(
          [&] {
            auto run = runtime.get(owner->id);
            return run && run->status == durin::run_status::waiting;
          },
          10s)) {
    bench::fail("the reader never started");
  }
  return owner->id;
}

void BM_resumes_delivered(benchmark::State& state) {
  auto payloads = bench::env_count("DURIN_BENCH_RESUMES", 50'000);
  // Unset: resume_hook_async with DURIN_BENCH_RESUME_IN_FLIGHT payloads in
  // flight (how an actor or the gateway resumes); N: N threads calling the
  // blocking resume_hook, each waiting for its answer.
  std::uint64_t threads_n =
      std::getenv("DURIN_BENCH_RESUME_THREADS") == nullptr
          ? 0
          : bench::env_count("DURIN_BENCH_RESUME_THREADS", 32);
  auto in_flight = bench::env_count("DURIN_BENCH_RESUME_IN_FLIGHT", 1000);
  bench::process_baselines();
  double seconds = 0;
  double acked_seconds = 0;
  double cpu_seconds = 0;
  std::atomic<std::uint64_t> failed{0};
  std::string first_failure;
  std::mutex failure_mutex;
  auto record_failure = [&](const durin::error& problem) {
    if (failed.fetch_add(1) == 0) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      first_failure = problem.to_string();
    }
  };
  std::int64_t read = 0;
  for (auto _ : state) {
    bench::temp_dir dir("hook-resumes");
    auto runtime = open_runtime(dir.sub("db"));
    const std::string token = "resume:reader";
    const auto reader_id = start_reader(*runtime, token);
    auto cpu_start = bench::process_cpu_seconds();
    auto start = bench::steady::now();
    // payloads - 1 plain payloads, then "done" once every one of them is
    // durable, so the reader reads them all.
    send_resumes(*runtime, token, payloads, threads_n, in_flight,
                 record_failure);
    auto last = runtime->resume_hook(token, {{"done", true}});
    if (!last) {
      bench::fail("the last resume failed: " + last.error().to_string());
    }
    acked_seconds = bench::seconds_since(start);
    auto done = runtime->wait(reader_id, time_limit());
    seconds = bench::seconds_since(start);
    cpu_seconds = bench::process_cpu_seconds() - cpu_start;
    if (!done || done->status != durin::run_status::completed) {
      bench::fail("the reader did not complete: " +
                  (done ? std::string(durin::to_string(done->status))
                        : done.error().to_string()));
    }
    read = done->output.get<std::int64_t>();
    state.SetIterationTime(seconds);
  }
  if (failed.load() != 0) {
    bench::fail(std::to_string(failed.load()) + " resumes failed: first " +
                first_failure);
  }
  if (read != static_cast<std::int64_t>(payloads)) {
    bench::fail("the reader read " + std::to_string(read) + " of " +
                std::to_string(payloads) + " payloads");
  }
  report_resumes(state, payloads, seconds, acked_seconds, cpu_seconds,
                 threads_n, in_flight);
}
BENCHMARK(BM_resumes_delivered)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------
// Retained tokens: runs started with min_retention "1h" that complete at
// once, so every token stays retained. Afterwards: actors alive, resident
// memory, and bytes on disk per token.

struct family_size {
  std::uint64_t sst = 0;
  std::uint64_t mem = 0;
};

family_size family_bytes(durin::persistence::store& db,
                         durin::persistence::family which) {
  family_size out;
  auto* handle = db.handle(which);
  db.raw_db().GetIntProperty(handle, "rocksdb.total-sst-files-size", &out.sst);
  db.raw_db().GetIntProperty(handle, "rocksdb.cur-size-all-mem-tables",
                             &out.mem);
  return out;
}

// What one retained-tokens run measured.
struct retained_measure {
  drive_result driven;
  bench::memory_kib before_open{}, before_runs{}, after_runs{}, trimmed{};
  std::size_t run_actors_after = 0;
  bool idle_in_time = false;
  std::uint64_t retained_checked = 0, sample = 0;
  std::uint64_t tokens_sst = 0, tokens_mem = 0, all_sst = 0, all_mem = 0;
  std::uint64_t flushed_tokens = 0, flushed_all = 0, dir_total = 0;
};

// Runs `tokens` runs on a runtime of `db_dir`, then counts the run actors
// left, the process's memory, and spot-checks that tokens are retained (or
// free, for retention "none").
void run_retained(retained_measure& m, const std::string& db_dir,
                  std::uint64_t tokens, const json& min_retention,
                  const std::string& retention) {
  m.before_open = bench::process_memory();
  auto runtime = open_runtime(db_dir);
  m.before_runs = bench::process_memory();
  m.driven = drive_token_runs(*runtime, "bench.hook-noop",
                              "retained:", min_retention, tokens);
  m.idle_in_time = bench::poll_until(
      [&] { return runtime->active_run_actors() == 0; }, 30s, 10ms);
  // Token actors passivate when idle; give them a moment.
  std::this_thread::sleep_for(3s);
  m.run_actors_after = runtime->active_run_actors();
  m.after_runs = bench::process_memory();
  // What the allocator keeps from the admission phase is not held for
  // tokens: give free pages back, then read again.
  ::malloc_trim(0);
  m.trimmed = bench::process_memory();
  // Spot check: tokens are retained by their finished owners.
  m.sample = std::min<std::uint64_t>(tokens, 1000);
  for (std::uint64_t i = 0; i < m.sample; ++i) {
    auto hook = runtime->get_hook_by_token(
        "retained:" + std::to_string(i * (tokens / m.sample)));
    if (hook && hook->state == "retained") {
      ++m.retained_checked;
    } else if (retention == "none" && !hook &&
               hook.error().code == durin::errc::hook_not_found) {
      ++m.retained_checked;
    }
  }
}

// Storage, with no runtime open: live sizes, then after a flush (and a
// compaction of `tokens`).
void measure_disk(retained_measure& m, const std::string& db_dir) {
  auto db = bench::open_store(db_dir);
  for (std::size_t f = 0; f < durin::persistence::family_count; ++f) {
    auto size = family_bytes(*db, static_cast<durin::persistence::family>(f));
    m.all_sst += size.sst;
    m.all_mem += size.mem;
    if (f == static_cast<std::size_t>(durin::persistence::family::tokens)) {
      m.tokens_sst = size.sst;
      m.tokens_mem = size.mem;
    }
  }
  rocksdb::FlushOptions flush;
  flush.wait = true;
  for (std::size_t f = 0; f < durin::persistence::family_count; ++f) {
    auto which = static_cast<durin::persistence::family>(f);
    (void)db->raw_db().Flush(flush, db->handle(which));
  }
  (void)db->raw_db().CompactRange(
      rocksdb::CompactRangeOptions(),
      db->handle(durin::persistence::family::tokens), nullptr, nullptr);
  for (std::size_t f = 0; f < durin::persistence::family_count; ++f) {
    auto which = static_cast<durin::persistence::family>(f);
    auto size = family_bytes(*db, which);
    m.flushed_all += size.sst;
    if (which == durin::persistence::family::tokens) {
      m.flushed_tokens = size.sst;
    }
  }
  db.reset();
  m.dir_total = dir_bytes(db_dir);
}

void report_retained(benchmark::State& state, const retained_measure& m,
                     std::uint64_t tokens, const std::string& retention) {
  auto n = static_cast<double>(tokens);
  double per_s = n / m.driven.seconds;
  double rss_growth_mib = bench::mib(m.after_runs.rss - m.before_runs.rss);
  state.counters["runs_per_s"] = per_s;
  state.counters["rss_mib"] = bench::mib(m.after_runs.rss);
  state.counters["rss_trimmed_mib"] = bench::mib(m.trimmed.rss);
  state.counters["rss_growth_mib"] = rss_growth_mib;
  state.counters["peak_mib"] = bench::mib(m.after_runs.peak);
  state.counters["run_actors"] = static_cast<double>(m.run_actors_after);
  state.counters["token_family_bytes_per_token"] =
      static_cast<double>(m.flushed_tokens) / n;
  state.counters["db_bytes_per_token"] = static_cast<double>(m.flushed_all) / n;
  state.counters["dir_bytes_per_token"] = static_cast<double>(m.dir_total) / n;
  bench::add_baseline_counters(state, per_s, 3);
  bench::report(
      {std::to_string(tokens) + " tokens, retention " + retention +
           ": actors and memory after",
       "no actor, no memory per idle token",
       std::to_string(m.run_actors_after) + " run actors" +
           (m.idle_in_time ? "" : " (NOT idle within 30 s)") + "; VmRSS " +
           bench::format("%.0f MiB", bench::mib(m.before_open.rss)) +
           " before open, " +
           bench::format("%.0f MiB", bench::mib(m.before_runs.rss)) +
           " after open, " +
           bench::format("%.0f MiB", bench::mib(m.after_runs.rss)) +
           " after the runs (" +
           bench::format("%.0f B/token", rss_growth_mib * 1048576.0 / n) +
           bench::format(", peak %.0f MiB), ", bench::mib(m.after_runs.peak)) +
           bench::format("%.0f MiB after malloc_trim",
                         bench::mib(m.trimmed.rss)) +
           bench::format(
               " (%.0f B/token); ",
               bench::mib(m.trimmed.rss - m.before_runs.rss) * 1048576.0 / n) +
           std::to_string(m.retained_checked) + "/" + std::to_string(m.sample) +
           (retention == "none" ? " sampled tokens free"
                                : " sampled tokens retained"),
       "-", "-",
       m.run_actors_after == 0 && m.retained_checked == m.sample ? "met"
                                                                 : "MISSED"});
  bench::report(
      {std::to_string(tokens) + " tokens, retention " + retention +
           ": bytes on disk per token",
       "report",
       bench::format("tokens family %.1f B/token", m.flushed_tokens / n) +
           bench::format(" flushed+compacted (live: %.1f sst + ",
                         m.tokens_sst / n) +
           bench::format("%.1f memtable); ", m.tokens_mem / n) +
           bench::format("whole DB %.1f B/token flushed ", m.flushed_all / n) +
           bench::format("(live: %.1f sst + ", m.all_sst / n) +
           bench::format("%.1f memtable); ", m.all_mem / n) +
           bench::format("data dir %.1f B/token", m.dir_total / n),
       "-", "-", "info"});
  bench::report(
      {std::to_string(tokens) + " tokens, retention " + retention +
           ": start to completed",
       "-",
       bench::rate_text(per_s, "runs/s") +
           bench::format(" (%.0f us CPU/run", m.driven.cpu_seconds * 1e6 / n) +
           bench::format("; load %.1f)", bench::load_average()),
       baseline_text(), ratio_text(per_s, 3), "info"});
}

void BM_retained_tokens(benchmark::State& state) {
  auto tokens = bench::env_count("DURIN_BENCH_RETAINED_TOKENS", 200'000);
  // DURIN_BENCH_RETENTION=none: the same runs without retention (tokens
  // released as the runs end), for comparing memory and disk.
  const char* retention_env = std::getenv("DURIN_BENCH_RETENTION");
  std::string retention =
      retention_env != nullptr && *retention_env != '\0' ? retention_env : "1h";
  json min_retention = retention == "none" ? json() : json(retention);
  bench::process_baselines();
  retained_measure m;
  for (auto _ : state) {
    bench::temp_dir dir("hook-retained");
    auto db_dir = dir.sub("db");
    run_retained(m, db_dir, tokens, min_retention, retention);
    measure_disk(m, db_dir);
    state.SetIterationTime(m.driven.seconds);
  }
  if (m.driven.failed != 0) {
    bench::fail(std::to_string(m.driven.failed) +
                " retained-token runs failed");
  }
  report_retained(state, m, tokens, retention);
}
BENCHMARK(BM_retained_tokens)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  return durin::bench::run_benchmarks(argc, argv);
}
