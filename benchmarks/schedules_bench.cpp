// Schedules firing on one node (issue 17): DURIN_BENCH_SCHEDULES schedules
// (default 10,000), each every second (`interval` 1s, overlap allow_all,
// flow bench.noop), for DURIN_BENCH_SECONDS seconds (default 20) on the
// system clock, every write synced. Reported: firings per second and the
// lag of each firing, the time from its nominal occurrence to the start of
// its run (the run record's createdAt, taken once the schedule's record
// naming the run is durable), p50, p99 and max; and the check that no
// occurrence has two runs. The first 3 seconds (schedules being created,
// caches cold) are left out of the lags. Method and figures:
// benchmarks/README.md, "Schedules".
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "durin/durin.hpp"
#include "services/node.hpp"
#include "services/runtime_access.hpp"
#include "services/schedule_service.hpp"

namespace {

std::size_t env_size(const char* name, std::size_t fallback) {
  const char* text = std::getenv(name);
  return text == nullptr ? fallback : std::strtoull(text, nullptr, 10);
}

// Runs work(0 .. count-1) from 32 threads, so that synced writes share
// group commits (one at a time, 10,000 fsyncs in series); false when one
// failed.
bool on_32_threads(std::size_t count,
                   const std::function<bool(std::size_t)>& work) {
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 32; ++t) {
    threads.emplace_back([&] {
      for (auto i = next++; i < count; i = next++) {
        if (!work(i)) {
          failed = true;
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  return !failed;
}

// Every run the schedules started: the lag of those whose occurrence fell in
// the measured window (from 3 s after the creates to the pauses), and the
// runs that repeat a (schedule, occurrence).
struct firings {
  std::vector<std::int64_t> lags;  // sorted
  std::size_t runs = 0;
  std::size_t duplicates = 0;

  double lag_at(double quantile) const {
    if (lags.empty()) {
      return 0.0;
    }
    const auto at =
        static_cast<std::size_t>(quantile * static_cast<double>(lags.size()));
    return static_cast<double>(lags[std::min(lags.size() - 1, at)]);
  }
};

durin::result<firings> firings_seen(durin::runtime& rt, std::int64_t created,
                                    std::size_t seconds) {
  firings out;
  std::set<std::pair<std::string, std::int64_t>> seen;
  const auto window_end = created + static_cast<std::int64_t>(seconds) * 1000;
  durin::run_filter filter;
  filter.limit = 1000;
  for (;;) {
    auto page = rt.list(filter);
    if (!page) {
      return page.error();
    }
    for (const auto& run : page->runs) {
      ++out.runs;
      if (!seen.emplace(run.schedule_id, run.occurrence_ms).second) {
        ++out.duplicates;
      }
      if (run.occurrence_ms >= created + 3000 &&
          run.occurrence_ms < window_end) {
        out.lags.push_back(run.created_at_ms - run.occurrence_ms);
      }
    }
    if (page->next_cursor.empty()) {
      std::sort(out.lags.begin(), out.lags.end());
      return out;
    }
    filter.cursor = page->next_cursor;
  }
}

void BM_SchedulesFiringEverySecond(benchmark::State& state) {
  const auto schedules = env_size("DURIN_BENCH_SCHEDULES", 10'000);
  const auto seconds = env_size("DURIN_BENCH_SECONDS", 20);
  for (auto _ : state) {
    auto dir = std::filesystem::temp_directory_path() /
               ("durin-schedules-bench-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    durin::registry flows;
    flows.flow(
        "bench.noop",
        [](durin::context&, durin::json input) -> durin::flow<durin::json> {
          co_return input;
        });
    durin::runtime_options options;
    options.data_dir = dir.string();
    auto rt = durin::runtime::open(options, std::move(flows));
    if (!rt) {
      state.SkipWithError(rt.error().to_string().c_str());
      return;
    }
    const auto began = (*rt)->now_ms();
    auto& service = *durin::runtime_access::services(**rt).schedules;
    const bool made = on_32_threads(schedules, [&](std::size_t i) {
      return service
          .create("default",
                  {{"scheduleId", "s" + std::to_string(i)},
                   {"spec", {{"interval", "1s"}}},
                   {"action",
                    {{"flow", "bench.noop"}, {"input", durin::json::object()}}},
                   {"overlap", "allow_all"}})
          .ok();
    });
    if (!made) {
      state.SkipWithError("a create failed");
      return;
    }
    const auto created = (*rt)->now_ms();
    std::this_thread::sleep_for(std::chrono::seconds(seconds));
    (void)on_32_threads(schedules, [&](std::size_t i) {
      return service.pause("default", "s" + std::to_string(i), true, "").ok();
    });
    const auto stopped = (*rt)->now_ms();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    auto seen = firings_seen(**rt, created, seconds);
    if (!seen) {
      state.SkipWithError(seen.error().to_string().c_str());
      return;
    }
    const auto& lags = seen->lags;
    state.counters["schedules"] = static_cast<double>(schedules);
    state.counters["create_s"] = static_cast<double>(created - began) / 1000.0;
    state.counters["runs"] = static_cast<double>(seen->runs);
    // Occurrences in the measured window, per second of it (the nominal
    // rate is one per schedule and second).
    state.counters["firings_per_s"] =
        static_cast<double>(lags.size()) /
        static_cast<double>(seconds > 3 ? seconds - 3 : 1);
    state.counters["pause_s"] =
        static_cast<double>(stopped - created) / 1000.0 -
        static_cast<double>(seconds);
    state.counters["duplicates"] = static_cast<double>(seen->duplicates);
    state.counters["lag_p50_ms"] = seen->lag_at(0.50);
    state.counters["lag_p99_ms"] = seen->lag_at(0.99);
    state.counters["lag_max_ms"] =
        lags.empty() ? 0.0 : static_cast<double>(lags.back());
    rt->reset();
    std::filesystem::remove_all(dir);
  }
}

BENCHMARK(BM_SchedulesFiringEverySecond)
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

}  // namespace

BENCHMARK_MAIN();
