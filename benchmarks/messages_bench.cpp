// Benchmarks of messages, updates and queries (issue 17; every write is
// synced): keyed messages delivered to waiting runs, updates completed,
// queries of active and of passivated runs, and, as the baseline measured in
// the same process on the same disk, keyed hook resumes to waiting runs (the
// mechanism messages are compared with: one durable payload with an id per
// call). Each also reports the raw sync-write baselines of bench_support.hpp.
//
// Every benchmark runs one iteration with manual timing: `DURIN_BENCH_RUNS`
// runs (64) wait, and `DURIN_BENCH_SENDERS` threads (32) call the blocking
// runtime API `DURIN_BENCH_MESSAGES` times (20,000) in all, round-robin over
// the runs. Method and figures: benchmarks/README.md.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "benchmarks/bench_support.hpp"
#include "bin/example_flows.hpp"
#include "durin/durin.hpp"
#include "durin/runtime.hpp"

namespace {

using namespace std::chrono_literals;
namespace bench = durin::bench;
using durin::json;

// Reads its start hook (input.token) until a payload with "done".
durin::flow<json> hook_reader(durin::context& ctx, json input) {
  auto hook = ctx.create_hook<json>({.token = input.at("token")});
  while (auto payload = co_await hook.next()) {
    if (payload->is_object() && payload->value("done", false)) {
      break;
    }
  }
  co_return json();
}

std::unique_ptr<durin::runtime> open_runtime(
    const std::string& dir, std::chrono::milliseconds passivate_after = 2s) {
  durin::registry flows;
  durin::examples::register_examples(flows);
  flows.flow("bench.hook-reader", hook_reader);
  durin::runtime_options options;
  options.data_dir = dir;
  options.passivate_after = passivate_after;
  auto opened = durin::runtime::open(std::move(options), std::move(flows));
  if (!opened) {
    bench::fail("runtime::open failed: " + opened.error().to_string());
  }
  return std::move(*opened);
}

struct sizes {
  std::uint64_t runs = bench::env_count("DURIN_BENCH_RUNS", 64);
  std::uint64_t senders = bench::env_count("DURIN_BENCH_SENDERS", 32);
  std::uint64_t messages = bench::env_count("DURIN_BENCH_MESSAGES", 20'000);
};

// Starts `count` runs of `flow` and waits until each waits.
std::vector<std::string> waiting_runs(
    durin::runtime& rt, const std::string& flow, std::uint64_t count,
    const std::function<json(std::uint64_t)>& input) {
  std::vector<std::string> ids;
  for (std::uint64_t i = 0; i < count; ++i) {
    auto run = rt.start(flow, input(i));
    if (!run) {
      bench::fail("start failed: " + run.error().to_string());
    }
    if (!rt.wait_settled(run->id, 30s)) {
      bench::fail("run did not settle");
    }
    ids.push_back(run->id);
  }
  return ids;
}

// Calls `op(i)` for i in [0, total) from `senders` threads; seconds taken.
double drive(std::uint64_t total, std::uint64_t senders,
             const std::function<bool(std::uint64_t)>& op) {
  std::atomic<std::uint64_t> next{0};
  std::atomic<std::uint64_t> failed{0};
  auto began = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (std::uint64_t t = 0; t < senders; ++t) {
    threads.emplace_back([&] {
      for (auto i = next++; i < total; i = next++) {
        if (!op(i)) {
          ++failed;
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  if (failed > 0) {
    bench::fail(std::to_string(failed.load()) + " calls failed");
  }
  return bench::seconds_since(began);
}

void finish(benchmark::State& state, std::uint64_t total, double seconds,
            const char* figure) {
  state.SetIterationTime(seconds);
  double per_second = static_cast<double>(total) / seconds;
  state.counters["per_s"] = per_second;
  bench::add_baseline_counters(state, per_second, 1);
  bench::report(
      {figure, "", bench::format("%.0f/s", per_second), "", "", "info"});
}

void BM_keyed_resumes_baseline(benchmark::State& state) {
  for (auto _ : state) {
    sizes n;
    bench::temp_dir dir("msg-base");
    auto rt = open_runtime(dir.path());
    auto runs =
        waiting_runs(*rt, "bench.hook-reader", n.runs, [](std::uint64_t i) {
          return json{{"token", "r:" + std::to_string(i)}};
        });
    auto seconds = drive(n.messages, n.senders, [&](std::uint64_t i) {
      durin::resume_options options;
      options.resume_id = "resume-" + std::to_string(i);
      return rt
          ->resume_hook("r:" + std::to_string(i % n.runs), json{{"n", i}},
                        options)
          .ok();
    });
    finish(state, n.messages, seconds, "keyed hook resumes (baseline)");
  }
}

void BM_keyed_messages(benchmark::State& state) {
  for (auto _ : state) {
    sizes n;
    bench::temp_dir dir("msg-keyed");
    auto rt = open_runtime(dir.path());
    auto runs = waiting_runs(*rt, "acme.inbox", n.runs,
                             [](std::uint64_t) { return json::object(); });
    auto seconds = drive(n.messages, n.senders, [&](std::uint64_t i) {
      durin::message_options options;
      options.idempotency_key = "key-" + std::to_string(i);
      return rt->send_message(runs[i % n.runs], "note", json{{"n", i}}, options)
          .ok();
    });
    finish(state, n.messages, seconds, "keyed messages delivered");
  }
}

void BM_updates_completed(benchmark::State& state) {
  for (auto _ : state) {
    sizes n;
    bench::temp_dir dir("msg-update");
    auto rt = open_runtime(dir.path());
    auto runs = waiting_runs(*rt, "acme.counter", n.runs,
                             [](std::uint64_t) { return json::object(); });
    auto seconds = drive(n.messages, n.senders, [&](std::uint64_t i) {
      durin::update_options options;
      options.update_id = "upd-" + std::to_string(i);
      auto done = rt->update(runs[i % n.runs], "add", json{{"by", 1}}, options);
      return done.ok() && done->completed;
    });
    finish(state, n.messages, seconds, "updates completed");
  }
}

void BM_queries_active(benchmark::State& state) {
  for (auto _ : state) {
    sizes n;
    bench::temp_dir dir("msg-query");
    auto rt = open_runtime(dir.path());
    auto runs = waiting_runs(*rt, "acme.counter", n.runs,
                             [](std::uint64_t) { return json::object(); });
    auto total = n.messages * 5;
    auto seconds = drive(total, n.senders, [&](std::uint64_t i) {
      return rt->query(runs[i % n.runs], "value").ok();
    });
    finish(state, total, seconds, "queries of active runs");
  }
}

// Every query finds its run passivated: one query per run, all runs
// passivated first, so each query activates and replays its run.
void BM_queries_passivated(benchmark::State& state) {
  for (auto _ : state) {
    sizes n;
    auto runs_count = bench::env_count("DURIN_BENCH_PASSIVATED_RUNS", 2'000);
    bench::temp_dir dir("msg-passive");
    auto rt = open_runtime(dir.path(), 20ms);
    auto runs = waiting_runs(*rt, "acme.counter", runs_count,
                             [](std::uint64_t) { return json::object(); });
    if (!bench::poll_until([&] { return rt->active_run_actors() == 0; }, 60s)) {
      bench::fail("the runs did not passivate");
    }
    auto seconds = drive(runs_count, n.senders, [&](std::uint64_t i) {
      return rt->query(runs[i], "value").ok();
    });
    finish(state, runs_count, seconds, "queries of passivated runs");
  }
}

BENCHMARK(BM_keyed_resumes_baseline)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_keyed_messages)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_updates_completed)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_queries_active)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_queries_passivated)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  return durin::bench::run_benchmarks(argc, argv);
}
