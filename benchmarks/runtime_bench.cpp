// Benchmarks of the durin runtime against the raw RocksDB it writes to
// (issue 2; every write is synced). Goals, on a 2-core machine:
//   no-op flow, start to completed      >= 20,000 runs/s
//   10-step flow                        >= 30,000 steps/s
//   replay of a 10,000-event history    <= 100 ms
//   100,000 passivated waiting runs     <= 1 GiB resident; restart <= 10 s
// Each benchmark also reports the raw sync-write baselines of
// bench_support.hpp, measured in the same process on the same disk, and its
// figure as a ratio of them. Method and measured figures: benchmarks/README.md.
//
// Every benchmark runs one iteration with manual timing: the work is large
// and fixed (sizes from DURIN_BENCH_* environment variables), and the timed
// part excludes setup such as building a history or registering listeners.
#include <benchmark/benchmark.h>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include <rocksdb/db.h>
#include <rocksdb/iterator.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <semaphore>
#include <string>
#include <thread>
#include <vector>

#include "actors/run_engine.hpp"
#include "benchmarks/bench_support.hpp"
#include "benchmarks/run_tracking.hpp"
#include "durin/caf.hpp"
#include "durin/durin.hpp"
#include "durin/runtime.hpp"

namespace {

using namespace std::chrono_literals;
namespace bench = durin::bench;
using bench::finish_tracker;
using bench::watch_queue;
using durin::json;

// A fixed start for manual clocks, so that a reopened runtime sees the same
// time as the one that armed the timers.
constexpr std::int64_t clock_start_ms = 1'700'000'000'000;
constexpr auto long_sleep = std::chrono::hours(1);

// ---------------------------------------------------------------------------
// Flows.

durin::flow<json> noop_flow(durin::context& ctx, json input) {
  (void)ctx;
  (void)input;
  co_return json();
}

int add_one(int value) {
  return value + 1;
}

durin::flow<json> ten_step_flow(durin::context& ctx, json input) {
  (void)input;
  int value = 0;
  for (int i = 0; i < 10; ++i) {
    value = co_await ctx.step("add-one", add_one, value);
  }
  co_return value;
}

// Records input.values clock readings (one history event each), then
// sleeps long: the history is run-started, the values, timer-armed.
durin::flow<json> record_then_sleep(durin::context& ctx, json input) {
  auto values = input.at("values").get<std::int64_t>();
  for (std::int64_t i = 0; i < values; ++i) {
    (void)ctx.now();
  }
  co_await ctx.sleep(long_sleep);
  co_return values;
}

// Sleeps an hour plus input.offset_ms, so that sleepers started together
// can have distinct due times.
durin::flow<json> sleep_long(durin::context& ctx, json input) {
  auto offset = std::chrono::milliseconds(input.value("offset_ms", 0));
  co_await ctx.sleep(long_sleep + offset);
  co_return json();
}

durin::registry bench_flows() {
  durin::registry flows;
  flows.flow("bench.noop", noop_flow);
  flows.flow("bench.ten-steps", ten_step_flow);
  flows.flow("bench.record-then-sleep", record_then_sleep);
  flows.flow("bench.sleep", sleep_long);
  return flows;
}

durin::runtime_options options_for(const std::string& dir,
                                   std::shared_ptr<durin::clock> clock) {
  durin::runtime_options options;
  options.data_dir = dir;
  options.clock = std::move(clock);
  // Unset: CAF's default scheduler, max(cores, 4) threads.
  options.actor_threads = bench::env_count("DURIN_BENCH_ACTOR_THREADS", 0);
  options.step_threads = bench::env_count("DURIN_BENCH_STEP_THREADS", 8);
  // Shards of the node (one RocksDB each): 1 unless DURIN_BENCH_SHARDS.
  options.shards =
      static_cast<std::uint32_t>(bench::env_count("DURIN_BENCH_SHARDS", 1));
  // A run sleeping an hour stops its actor at once.
  options.passivate_after = std::chrono::milliseconds(1000);
  return options;
}

std::unique_ptr<durin::runtime> open_runtime(durin::runtime_options options) {
  auto opened = durin::runtime::open(std::move(options), bench_flows());
  if (!opened) {
    bench::fail("runtime::open failed: " + opened.error().to_string());
  }
  return std::move(*opened);
}

// ---------------------------------------------------------------------------

struct drive_result {
  std::uint64_t runs = 0;
  std::uint64_t failed = 0;
  double seconds = 0;      // first start_async to last completion
  double cpu_seconds = 0;  // the process's CPU time over the same interval
};

// Starts `runs` runs of `flow` from `submitters` threads with at most
// `in_flight_max` admitted-or-admitting and not yet ended, and waits until
// every one has ended.
drive_result drive_runs(durin::runtime& runtime, const std::string& flow,
                        std::uint64_t runs, std::size_t in_flight_max,
                        std::size_t submitters) {
  finish_tracker tracker(runtime, runs, in_flight_max);
  drive_result out;
  {
    watch_queue watching(tracker);
    auto cpu_start = bench::process_cpu_seconds();
    auto start = bench::steady::now();
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < submitters; ++t) {
      threads.emplace_back([&, t] {
        for (std::uint64_t i = t; i < runs; i += submitters) {
          tracker.acquire_slot();
          runtime.start_async(flow, json::object(), {},
                              [&](durin::result<durin::run_info> admitted) {
                                if (admitted) {
                                  watching.push(std::move(admitted->id));
                                } else {
                                  tracker.refused();
                                }
                              });
        }
      });
    }
    for (auto& thread : threads) {
      thread.join();
    }
    auto limit = std::chrono::milliseconds(
        bench::env_count("DURIN_BENCH_TIMEOUT_S", 600) * 1000);
    if (!tracker.wait_all(limit)) {
      bench::fail("only " + std::to_string(tracker.ended()) + " of " +
                  std::to_string(runs) + " runs of " + flow + " ended in time");
    }
    out.seconds = bench::seconds_since(start);
    out.cpu_seconds = bench::process_cpu_seconds() - cpu_start;
  }
  out.runs = runs;
  out.failed = tracker.failed();
  return out;
}

// ---------------------------------------------------------------------------
// Baselines on their own.

void BM_baseline_single_sync_write(benchmark::State& state) {
  for (auto _ : state) {
    const auto& base = bench::process_baselines();
    state.SetIterationTime(base.single.seconds);
  }
  const auto& base = bench::process_baselines();
  state.counters["records_per_s"] = base.single.per_second();
  state.counters["write_us"] = base.single.write_latency_us();
  bench::report({"raw RocksDB, 1 record per sync write (a)", "-",
                 bench::rate_text(base.single.per_second(), "records/s"), "-",
                 "-", "info"});
}
BENCHMARK(BM_baseline_single_sync_write)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

void BM_baseline_committer(benchmark::State& state) {
  for (auto _ : state) {
    const auto& base = bench::process_baselines();
    state.SetIterationTime(base.committer.seconds);
  }
  const auto& base = bench::process_baselines();
  state.counters["records_per_s"] = base.committer.per_second();
  state.counters["records_per_write"] = base.committer.records_per_write();
  state.counters["threads"] = static_cast<double>(base.committer_threads);
  state.counters["in_flight"] = static_cast<double>(base.committer_in_flight);
  bench::report({"raw RocksDB via committer, " +
                     std::to_string(base.committer_threads) + " threads (b)",
                 "-",
                 bench::rate_text(base.committer.per_second(), "records/s") +
                     bench::format(" (%.1f records/write)",
                                   base.committer.records_per_write()),
                 "-", "-", "info"});
}
BENCHMARK(BM_baseline_committer)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

void BM_baseline_group_loop(benchmark::State& state) {
  for (auto _ : state) {
    const auto& base = bench::process_baselines();
    state.SetIterationTime(base.group.seconds);
  }
  const auto& base = bench::process_baselines();
  state.counters["records_per_s"] = base.group.per_second();
  state.counters["records_per_write"] = base.group.records_per_write();
  bench::report({bench::format("raw RocksDB, %.0f records per sync write (c)",
                               base.group.records_per_write()),
                 "-", bench::rate_text(base.group.per_second(), "records/s"),
                 "-", "-", "info"});
}
BENCHMARK(BM_baseline_group_loop)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------
// Throughput: runs of a flow, admitted to completed.

// Reports a throughput figure with its baselines. `records_each` is the
// number of synced batches the runtime needs per unit of the figure.
// `cpu_us_each` is the process's CPU time per unit of the figure, and
// bounds it at cores / cpu_us_each.
void report_throughput(benchmark::State& state, const std::string& figure,
                       const std::string& goal_text, double goal,
                       double per_second, const char* unit, double records_each,
                       double cpu_us_each) {
  const auto& base = bench::process_baselines();
  bench::add_baseline_counters(state, per_second, records_each);
  state.counters["cpu_us_each"] = cpu_us_each;
  state.counters["cpu_bound_per_s"] = bench::cores() * 1e6 / cpu_us_each;
  bench::report(
      {figure, goal_text,
       bench::rate_text(per_second, unit) +
           bench::format(" (%.0f us CPU each, ", cpu_us_each) +
           bench::format("%.0f/s if all cores were ours; ",
                         bench::cores() * 1e6 / cpu_us_each) +
           bench::format("load %.1f)", bench::load_average()),
       bench::format("(a) %.0f, ", base.single.per_second()) +
           bench::format("(b) %.0f records/s ", base.committer.per_second()) +
           bench::format("(%.1f us CPU each)",
                         base.committer.cpu_us_per_record()),
       bench::format("%.3f of (a), ", per_second / base.single.per_second()) +
           bench::format("%.3f of (b); ",
                         per_second / base.committer.per_second()) +
           bench::format(
               "%.2f of the (b) ceiling",
               per_second * records_each / base.committer.per_second()),
       per_second >= goal ? "met" : "MISSED"});
}

void BM_noop_flow(benchmark::State& state) {
  bench::process_baselines();
  auto runs = bench::env_count("DURIN_BENCH_NOOP_RUNS", 100'000);
  auto in_flight = bench::env_count("DURIN_BENCH_IN_FLIGHT", 4000);
  auto submitters = bench::env_count("DURIN_BENCH_SUBMITTERS", 4);
  drive_result result;
  for (auto _ : state) {
    bench::temp_dir dir("noop");
    auto runtime = open_runtime(options_for(dir.sub("db"), nullptr));
    result = drive_runs(*runtime, "bench.noop", runs, in_flight, submitters);
    state.SetIterationTime(result.seconds);
  }
  if (result.failed != 0) {
    bench::fail(std::to_string(result.failed) + " no-op runs did not complete");
  }
  double per_second = static_cast<double>(result.runs) / result.seconds;
  state.counters["runs_per_s"] = per_second;
  state.counters["runs"] = static_cast<double>(result.runs);
  state.counters["in_flight"] = static_cast<double>(in_flight);
  // A no-op run is two synced batches: its admission, then run-started and
  // run-completed together.
  report_throughput(
      state, "no-op flow, start to completed", ">= 20000 runs/s", 20'000,
      per_second, "runs/s", 2,
      result.cpu_seconds * 1e6 / static_cast<double>(result.runs));
}
BENCHMARK(BM_noop_flow)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

void BM_ten_step_flow(benchmark::State& state) {
  bench::process_baselines();
  auto runs = bench::env_count("DURIN_BENCH_TEN_STEP_RUNS", 20'000);
  auto in_flight = bench::env_count("DURIN_BENCH_IN_FLIGHT", 4000);
  auto submitters = bench::env_count("DURIN_BENCH_SUBMITTERS", 4);
  drive_result result;
  for (auto _ : state) {
    bench::temp_dir dir("steps");
    auto runtime = open_runtime(options_for(dir.sub("db"), nullptr));
    result =
        drive_runs(*runtime, "bench.ten-steps", runs, in_flight, submitters);
    state.SetIterationTime(result.seconds);
  }
  if (result.failed != 0) {
    bench::fail(std::to_string(result.failed) +
                " ten-step runs did not complete");
  }
  double steps_per_second =
      10.0 * static_cast<double>(result.runs) / result.seconds;
  state.counters["steps_per_s"] = steps_per_second;
  state.counters["runs_per_s"] = steps_per_second / 10.0;
  state.counters["runs"] = static_cast<double>(result.runs);
  // Per step one synced batch (its outcome); per run three more (admission,
  // run-started, completion): 13 batches per 10 steps.
  report_throughput(
      state, "10-step flow", ">= 30000 steps/s", 30'000, steps_per_second,
      "steps/s", 1.3,
      result.cpu_seconds * 1e6 / (10.0 * static_cast<double>(result.runs)));
}
BENCHMARK(BM_ten_step_flow)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------
// Replay of a long history.

// The time to iterate over every key and value of the `history` family with
// a raw RocksDB iterator: the floor for loading a history.
double raw_history_scan_ms(durin::persistence::store& db,
                           std::uint64_t* count) {
  auto start = bench::steady::now();
  std::unique_ptr<rocksdb::Iterator> it(db.raw_db().NewIterator(
      rocksdb::ReadOptions(), db.handle(durin::persistence::family::history)));
  std::uint64_t bytes = 0;
  *count = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    bytes += it->key().size() + it->value().size();
    *count += 1;
  }
  benchmark::DoNotOptimize(bytes);
  return bench::seconds_since(start) * 1e3;
}

struct replay_breakdown {
  double raw_scan_ms = 0;
  double load_ms = 0;    // store::load_history: scan and decode
  double engine_ms = 0;  // run_engine start(): re-executing the flow
  std::uint64_t events = 0;
};

// Times the parts of an activation on the stored run, with no runtime open:
// a raw scan, load_history, and the engine replaying the flow up to its
// sleep (in memory; nothing is written).
replay_breakdown time_replay_parts(const std::string& dir,
                                   const std::string& run_id,
                                   const durin::registry& flows) {
  replay_breakdown out;
  auto db = bench::open_store(dir);
  std::uint64_t scanned = 0;
  out.raw_scan_ms = raw_history_scan_ms(*db, &scanned);
  auto record = db->get_run(run_id);
  if (!record || !*record) {
    bench::fail("the replay run's record cannot be read");
  }
  auto start = bench::steady::now();
  auto history = db->load_history(run_id);
  out.load_ms = bench::seconds_since(start) * 1e3;
  if (!history) {
    bench::fail("load_history failed: " + history.error().to_string());
  }
  out.events = history->size();
  if (scanned != out.events) {
    bench::fail("the history family holds " + std::to_string(scanned) +
                " events, load_history returned " + std::to_string(out.events));
  }
  auto clock = std::make_shared<durin::manual_clock>(clock_start_ms);
  durin::actors::engine_environment env{&flows, clock.get(),
                                        std::chrono::milliseconds(1000)};
  start = bench::steady::now();
  {
    durin::actors::run_engine engine(env, std::move(**record),
                                     std::move(*history));
    engine.start();
    out.engine_ms = bench::seconds_since(start) * 1e3;
    if (engine.blocked() || !engine.waiting_timer()) {
      bench::fail("the engine did not replay to the sleep: " +
                  engine.blocked_reason());
    }
  }
  return out;
}

std::int64_t past_long_sleep_ms(std::uint64_t extra_ms) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(long_sleep)
             .count() +
         static_cast<std::int64_t>(extra_ms) + 1000;
}

// Runs bench.record-then-sleep with `values` recorded values until it waits,
// passivated, on its timer, then closes the runtime. Returns the run's id.
std::string record_history(const std::string& db_dir, std::int64_t values) {
  auto clock = std::make_shared<durin::manual_clock>(clock_start_ms);
  auto runtime = open_runtime(options_for(db_dir, clock));
  auto started =
      runtime->start("bench.record-then-sleep", json{{"values", values}});
  if (!started) {
    bench::fail("start failed: " + started.error().to_string());
  }
  auto run_id = started->id;
  bool waiting = bench::poll_until(
      [&] {
        auto now = runtime->get(run_id);
        return now && now->status == durin::run_status::waiting &&
               runtime->active_run_actors() == 0;
      },
      60s);
  if (!waiting) {
    bench::fail("the replay run did not reach its sleep");
  }
  return run_id;
}

struct replay_timing {
  double open_ms = 0;    // runtime::open
  double fire_ms = 0;    // clock advance until the run's actor exists
  double replay_ms = 0;  // clock advance until runtime::wait returned
};

// Reopens the runtime on `db_dir`, where run `run_id` waits on its timer, so
// recovery leaves it passivated. Advancing the clock fires the timer: the
// run actor loads the history, replays the flow to the sleep, records
// timer-fired (synced write), finishes the flow and records the completion
// (synced write). Timed from the advance until runtime::wait returns.
replay_timing time_replay(const std::string& db_dir,
                          const std::string& run_id) {
  replay_timing out;
  auto clock = std::make_shared<durin::manual_clock>(clock_start_ms);
  auto start = bench::steady::now();
  auto runtime = open_runtime(options_for(db_dir, clock));
  out.open_ms = bench::seconds_since(start) * 1e3;
  // Let the timer service finish its first reload and wait: a clock jump
  // during its loop is noticed only at its next 100 ms poll (a lost
  // wake-up, see benchmarks/README.md), which would be timed here.
  std::this_thread::sleep_for(250ms);
  start = bench::steady::now();
  clock->advance_ms(past_long_sleep_ms(0));
  (void)bench::poll_until([&] { return runtime->active_run_actors() > 0; }, 1s,
                          std::chrono::milliseconds(0));
  out.fire_ms = bench::seconds_since(start) * 1e3;
  auto ended = runtime->wait(run_id, 60s);
  out.replay_ms = bench::seconds_since(start) * 1e3;
  if (!ended || ended->status != durin::run_status::completed) {
    bench::fail("the replayed run did not complete: " +
                (ended ? std::string(durin::to_string(ended->status))
                       : ended.error().to_string()));
  }
  return out;
}

void BM_replay_history(benchmark::State& state) {
  const auto& base = bench::process_baselines();
  auto events = bench::env_count("DURIN_BENCH_REPLAY_EVENTS", 10'000);
  if (events < 3) {
    bench::fail("DURIN_BENCH_REPLAY_EVENTS must be at least 3");
  }
  // run-started + values + timer-armed.
  auto values = static_cast<std::int64_t>(events - 2);
  replay_timing timing;
  replay_breakdown parts;
  for (auto _ : state) {
    bench::temp_dir dir("replay");
    auto db_dir = dir.sub("db");
    auto run_id = record_history(db_dir, values);
    parts = time_replay_parts(db_dir, run_id, bench_flows());
    timing = time_replay(db_dir, run_id);
    state.SetIterationTime(timing.replay_ms / 1e3);
  }
  double write_ms = base.single.write_latency_us() / 1e3;
  state.counters["events"] = static_cast<double>(parts.events);
  state.counters["replay_ms"] = timing.replay_ms;
  state.counters["open_ms"] = timing.open_ms;
  state.counters["timer_fire_ms"] = timing.fire_ms;
  state.counters["load_history_ms"] = parts.load_ms;
  state.counters["engine_replay_ms"] = parts.engine_ms;
  state.counters["raw_scan_ms"] = parts.raw_scan_ms;
  state.counters["sync_write_ms"] = write_ms;
  state.counters["ratio_to_raw_scan"] = timing.replay_ms / parts.raw_scan_ms;
  state.counters["load_avg"] = bench::load_average();
  bench::report(
      {"replay of a " + std::to_string(parts.events) +
           "-event history (timer fire to completed, 2 sync writes)",
       "<= 100 ms",
       bench::format("%.1f ms", timing.replay_ms) +
           bench::format(" (load %.1f)", bench::load_average()),
       bench::format("raw scan %.2f ms, ", parts.raw_scan_ms) +
           bench::format("(a) sync write %.2f ms", write_ms),
       bench::format("%.1fx raw scan; ", timing.replay_ms / parts.raw_scan_ms) +
           bench::format("load_history %.1f ms, ", parts.load_ms) +
           bench::format("engine replay %.1f ms", parts.engine_ms),
       timing.replay_ms <= 100 ? "met" : "MISSED"});
}
BENCHMARK(BM_replay_history)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------
// Many passivated waiting runs: memory, restart, and waking them all.

// Admits `runs` runs of bench.sleep with at most `in_flight_max` admissions
// outstanding; returns their ids.
std::vector<std::string> admit_sleepers(durin::runtime& runtime,
                                        std::uint64_t runs,
                                        std::size_t in_flight_max,
                                        bool same_due) {
  std::counting_semaphore<1 << 24> slots(
      static_cast<std::ptrdiff_t>(in_flight_max));
  std::mutex mutex;
  std::condition_variable all_admitted;
  std::vector<std::string> ids;
  ids.reserve(runs);
  std::uint64_t answered = 0;
  std::uint64_t refused = 0;
  for (std::uint64_t i = 0; i < runs; ++i) {
    slots.acquire();
    json input{{"offset_ms", same_due ? 0 : i}};
    runtime.start_async("bench.sleep", std::move(input), {},
                        [&](durin::result<durin::run_info> admitted) {
                          std::lock_guard<std::mutex> lock(mutex);
                          if (admitted) {
                            ids.push_back(std::move(admitted->id));
                          } else {
                            ++refused;
                          }
                          ++answered;
                          slots.release();
                          if (answered == runs) {
                            all_admitted.notify_all();
                          }
                        });
  }
  std::unique_lock<std::mutex> lock(mutex);
  all_admitted.wait(lock, [&] { return answered == runs; });
  if (refused != 0) {
    bench::fail(std::to_string(refused) + " sleeping runs were refused");
  }
  return ids;
}

// Counts the runs listed as waiting, page by page.
std::uint64_t count_waiting(const durin::runtime& runtime) {
  std::uint64_t count = 0;
  durin::run_filter filter;
  filter.status = durin::run_status::waiting;
  filter.limit = 1000;
  for (;;) {
    auto page = runtime.list(filter);
    if (!page) {
      bench::fail("list failed: " + page.error().to_string());
    }
    count += page->runs.size();
    if (page->next_cursor.empty()) {
      return count;
    }
    filter.cursor = page->next_cursor;
  }
}

struct recovery_breakdown {
  double store_open_s = 0;   // persistence::store::open (RocksDB WAL replay)
  double active_scan_s = 0;  // store::active_runs
  double get_runs_s = 0;     // store::get_run of every active run
  std::uint64_t active = 0;
};

// Times the storage reads runtime::open does to recover, on a copy of the
// database taken before the runtime reopened it.
recovery_breakdown time_recovery_parts(const std::string& dir) {
  recovery_breakdown out;
  auto start = bench::steady::now();
  auto db = bench::open_store(dir);
  out.store_open_s = bench::seconds_since(start);
  start = bench::steady::now();
  auto active = db->active_runs();
  out.active_scan_s = bench::seconds_since(start);
  if (!active) {
    bench::fail("active_runs failed: " + active.error().to_string());
  }
  out.active = active->size();
  start = bench::steady::now();
  for (const auto& id : *active) {
    auto record = db->get_run(id);
    if (!record || !*record) {
      bench::fail("get_run failed for " + id);
    }
  }
  out.get_runs_s = bench::seconds_since(start);
  return out;
}

struct sleepers_phase {
  std::vector<std::string> ids;
  double seconds = 0;         // first start until every actor has passivated
  double cpu_seconds = 0;     // the process's, over the same interval
  bench::memory_kib before;   // before the runtime opened
  bench::memory_kib waiting;  // all runs waiting, no run actor alive
};

// Opens a runtime on `db_dir`, starts `runs` sleepers and waits until every
// one is waiting with its actor passivated; checks that the runs list as
// waiting, then closes the runtime.
sleepers_phase put_to_sleep(const std::string& db_dir, std::uint64_t runs,
                            std::size_t in_flight, bool same_due,
                            std::chrono::milliseconds limit) {
  sleepers_phase out;
  out.before = bench::process_memory();
  auto clock = std::make_shared<durin::manual_clock>(clock_start_ms);
  auto runtime = open_runtime(options_for(db_dir, clock));
  auto cpu_start = bench::process_cpu_seconds();
  auto start = bench::steady::now();
  out.ids = admit_sleepers(*runtime, runs, in_flight, same_due);
  if (!bench::poll_until([&] { return runtime->active_run_actors() == 0; },
                         limit)) {
    bench::fail(std::to_string(runtime->active_run_actors()) +
                " run actors still alive after admitting every sleeper");
  }
  out.seconds = bench::seconds_since(start);
  out.cpu_seconds = bench::process_cpu_seconds() - cpu_start;
  out.waiting = bench::process_memory();
  auto listed = count_waiting(*runtime);
  if (listed != runs) {
    bench::fail(std::to_string(listed) + " of " + std::to_string(runs) +
                " runs are waiting");
  }
  return out;
}

struct wake_phase {
  double recovery_s = 0;  // runtime::open
  double wake_s = 0;      // clock advance until every run completed
  double wake_cpu_s = 0;
  bench::memory_kib reopened;  // right after open
  bench::memory_kib woken;     // after every run completed (peak: VmHWM)
};

// Reopens the runtime on `db_dir` (timed: recovery), then advances the
// clock past every sleeper's timer and waits until all `ids` completed:
// each one activates from storage, replays, records timer-fired and
// completes.
wake_phase restart_and_wake(const std::string& db_dir,
                            const std::vector<std::string>& ids,
                            std::chrono::milliseconds limit) {
  wake_phase out;
  auto clock = std::make_shared<durin::manual_clock>(clock_start_ms);
  auto start = bench::steady::now();
  auto runtime = open_runtime(options_for(db_dir, clock));
  out.recovery_s = bench::seconds_since(start);
  out.reopened = bench::process_memory();
  finish_tracker tracker(*runtime, ids.size(), ids.size());
  for (const auto& id : ids) {
    tracker.watch(id);
  }
  auto cpu_start = bench::process_cpu_seconds();
  start = bench::steady::now();
  clock->advance_ms(past_long_sleep_ms(ids.size()));
  if (!tracker.wait_all(limit)) {
    bench::fail("only " + std::to_string(tracker.ended()) + " of " +
                std::to_string(ids.size()) + " woken runs ended within " +
                std::to_string(limit.count() / 1000) + " s");
  }
  out.wake_s = bench::seconds_since(start);
  out.wake_cpu_s = bench::process_cpu_seconds() - cpu_start;
  if (tracker.failed() != 0) {
    bench::fail(std::to_string(tracker.failed()) +
                " woken runs did not complete");
  }
  out.woken = bench::process_memory();
  return out;
}

void waiting_counters(benchmark::State& state, double count,
                      const sleepers_phase& sleep, const wake_phase& wake,
                      const recovery_breakdown& parts, double admit_cpu_us,
                      double wake_per_s, double wake_cpu_us) {
  state.counters["runs"] = count;
  state.counters["rss_before_mib"] = bench::mib(sleep.before.rss);
  state.counters["rss_waiting_mib"] = bench::mib(sleep.waiting.rss);
  state.counters["peak_rss_mib"] = bench::mib(sleep.waiting.peak);
  state.counters["rss_reopened_mib"] = bench::mib(wake.reopened.rss);
  state.counters["rss_woken_mib"] = bench::mib(wake.woken.rss);
  state.counters["peak_rss_woken_mib"] = bench::mib(wake.woken.peak);
  state.counters["admit_to_waiting_s"] = sleep.seconds;
  state.counters["admit_cpu_us_each"] = admit_cpu_us;
  state.counters["recovery_s"] = wake.recovery_s;
  state.counters["store_open_s"] = parts.store_open_s;
  state.counters["active_scan_s"] = parts.active_scan_s;
  state.counters["get_runs_s"] = parts.get_runs_s;
  state.counters["wake_all_s"] = wake.wake_s;
  state.counters["wake_runs_per_s"] = wake_per_s;
  state.counters["wake_cpu_us_each"] = wake_cpu_us;
}

void report_waiting(benchmark::State& state, std::uint64_t runs,
                    const sleepers_phase& sleep, const wake_phase& wake,
                    const recovery_breakdown& parts) {
  const auto& base = bench::process_baselines();
  auto count = static_cast<double>(runs);
  double admit_per_s = count / sleep.seconds;
  double wake_per_s = count / wake.wake_s;
  double admit_cpu_us = sleep.cpu_seconds * 1e6 / count;
  double wake_cpu_us = wake.wake_cpu_s * 1e6 / count;
  double raw_recovery_s =
      parts.store_open_s + parts.active_scan_s + parts.get_runs_s;
  double waiting_mib = bench::mib(sleep.waiting.rss);
  waiting_counters(state, count, sleep, wake, parts, admit_cpu_us, wake_per_s,
                   wake_cpu_us);
  // Putting a run to sleep writes two synced batches (admission; run-started
  // with timer-armed); waking writes two (timer-fired; completion).
  bench::add_baseline_counters(state, admit_per_s, 2);
  auto runs_text = std::to_string(runs);
  bench::report(
      {runs_text + " passivated waiting runs: resident memory", "<= 1024 MiB",
       bench::format("%.0f MiB", waiting_mib) +
           bench::format(" (%.0f MiB before open; ",
                         bench::mib(sleep.before.rss)) +
           bench::format("peak %.0f MiB)", bench::mib(sleep.waiting.peak)),
       "-", "-", waiting_mib <= 1024 ? "met" : "MISSED"});
  bench::report(
      {runs_text + " waiting runs: restart (runtime::open)", "<= 10 s",
       bench::format("%.2f s", wake.recovery_s),
       bench::format("store reads alone %.2f s ", raw_recovery_s) +
           bench::format("(open+WAL %.2f, ", parts.store_open_s) +
           bench::format("active scan %.2f, ", parts.active_scan_s) +
           bench::format("get_run x N %.2f)", parts.get_runs_s),
       bench::format("%.2fx store reads", wake.recovery_s / raw_recovery_s),
       wake.recovery_s <= 10 ? "met" : "MISSED"});
  bench::report(
      {runs_text + " waiting runs: restart + wake all to completed",
       "(<= 10 s if read strictly)",
       bench::format("%.2f s", wake.recovery_s + wake.wake_s) +
           bench::format(" (wake %.2f s, ", wake.wake_s) +
           bench::format("%.0f runs/s, ", wake_per_s) +
           bench::format("%.0f us CPU each)", wake_cpu_us),
       bench::format("(b) %.0f records/s", base.committer.per_second()),
       bench::format("%.2f of the (b) ceiling",
                     wake_per_s * 2 / base.committer.per_second()),
       wake.recovery_s + wake.wake_s <= 10 ? "met" : "MISSED"});
  bench::report(
      {runs_text + " waiting runs: memory while waking them all", "-",
       bench::format("peak %.0f MiB, ", bench::mib(wake.woken.peak)) +
           bench::format("%.0f MiB after", bench::mib(wake.woken.rss)),
       "-", "-", "info"});
  bench::report(
      {runs_text + " sleepers admitted until all passivated", "-",
       bench::rate_text(admit_per_s, "runs/s") +
           bench::format(" (%.0f us CPU each)", admit_cpu_us),
       bench::format("(b) %.0f records/s", base.committer.per_second()),
       bench::format("%.2f of the (b) ceiling",
                     admit_per_s * 2 / base.committer.per_second()),
       "info"});
}

// Sleepers get distinct due times unless DURIN_BENCH_SAME_DUE=1: then they
// all share one, which the timer service cannot wake beyond its 50,000-timer
// reload slice (see benchmarks/README.md).
void BM_waiting_runs(benchmark::State& state) {
  bench::process_baselines();
  auto runs = bench::env_count("DURIN_BENCH_WAITING_RUNS", 100'000);
  auto in_flight = bench::env_count("DURIN_BENCH_IN_FLIGHT", 4000);
  auto limit = std::chrono::milliseconds(
      bench::env_count("DURIN_BENCH_TIMEOUT_S", 600) * 1000);
  const char* same_due_text = std::getenv("DURIN_BENCH_SAME_DUE");
  bool same_due = same_due_text != nullptr && std::string(same_due_text) == "1";
  sleepers_phase sleep;
  wake_phase wake;
  recovery_breakdown parts;
  for (auto _ : state) {
    bench::temp_dir dir("waiting");
    auto db_dir = dir.sub("db");
    sleep = put_to_sleep(db_dir, runs, in_flight, same_due, limit);
    // Opening replays the WAL and flushes it: keep a copy as it was, for
    // the breakdown of recovery.
    std::filesystem::copy(db_dir, dir.sub("copy"),
                          std::filesystem::copy_options::recursive);
    wake = restart_and_wake(db_dir, sleep.ids, limit);
    parts = time_recovery_parts(dir.sub("copy"));
    state.SetIterationTime(wake.recovery_s);
  }
  report_waiting(state, runs, sleep, wake, parts);
}
BENCHMARK(BM_waiting_runs)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  return durin::bench::run_benchmarks(argc, argv);
}
