// Goal: under load, storage faults neither abort the node nor lose or
// duplicate anything it acknowledged, and the node heals by itself: once the
// faults stop, the store is ready within recovery_ms_max and every run it
// admitted finishes without a restart (the runs' actors are reloaded).
//
// Method: a real runtime (real actors, real step threads) on a real RocksDB
// opened through tests/support/faulty_file_system.hpp. Four threads start
// runs of a three-step flow, each named by a command id, while episodes of
// injected ENOSPC, EMFILE and EIO failures come and go on appends, syncs
// and file creations. A start that fails is retried with the same command
// id after the faults end (a repeat gets the run the first one admitted).
// Then every command must have exactly one run, completed; and so again
// after a fault-free restart.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "durin/durin.hpp"
#include "persistence/store.hpp"
#include "services/node.hpp"
#include "services/runtime_access.hpp"
#include "tests/support/faulty_file_system.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::faulty_file_system;
using operation = faulty_file_system::operation;
using fault = faulty_file_system::fault;

constexpr auto recovery_ms_max = 5000ms;
constexpr auto finish_max = 30s;

flow<json> three_steps(context& ctx, json input) {
  auto key = input.at("key").get<std::string>();
  int total = 0;
  for (int i = 1; i <= 3; ++i) {
    total += co_await ctx.step("add", [i]() -> int { return i; });
  }
  co_return json{{"key", key}, {"total", total}};
}

class StorageFaultRuntimeTest : public ::testing::Test {
 protected:
  std::unique_ptr<runtime> open(std::shared_ptr<faulty_file_system> disk) {
    registry flows;
    flows.flow("test.three-steps", three_steps);
    runtime_options options;
    options.data_dir = dir_.path();
    options.step_threads = 4;
    persistence::store_options store;
    if (disk) {
      store.file_system = std::move(disk);
      store.reopen_backoff_ms_min = 20;
      store.reopen_backoff_ms_max = 200;
    }
    auto opened = runtime_access::open(options, flows, std::move(store));
    EXPECT_TRUE(opened.ok()) << (opened ? "" : opened.error().to_string());
    return opened ? std::move(*opened) : nullptr;
  }

  // Every shard's store: the faulty disk is shared by all of them.
  static std::vector<persistence::store*> stores_of(runtime& rt) {
    std::vector<persistence::store*> stores;
    for (auto& shard : runtime_access::services(rt).shards) {
      stores.push_back(shard->store.get());
    }
    return stores;
  }

  // Every run of the node, by the command key in its input.
  static std::map<std::string, std::vector<run_info>> runs_by_key(runtime& rt) {
    std::map<std::string, std::vector<run_info>> out;
    run_filter filter;
    filter.limit = 1000;
    for (;;) {
      auto page = rt.list(filter);
      EXPECT_TRUE(page.ok()) << (page ? "" : page.error().to_string());
      if (!page) {
        break;
      }
      for (auto& run : page->runs) {
        out[run.input.value("key", std::string())].push_back(run);
      }
      if (page->next_cursor.empty()) {
        break;
      }
      filter.cursor = page->next_cursor;
    }
    return out;
  }

  testing::temp_dir dir_;
};

// What the starting threads learned: acknowledged commands with their runs,
// refused ones to retry, and the refusals by error code.
struct command_log {
  std::mutex mutex;
  std::map<std::string, std::string> acknowledged;  // key -> run id
  std::vector<std::string> failed;                  // keys to retry
  std::map<std::string, int> failures_by_code;
};

// `threads_count` threads starting runs, each with a fresh command id, until
// `stop`; a refusal must not name the data directory.
std::vector<std::thread> start_commands(runtime& rt, int threads_count,
                                        const std::atomic<bool>& stop,
                                        command_log& log,
                                        const std::string& dir) {
  std::vector<std::thread> threads;
  for (int t = 0; t < threads_count; ++t) {
    threads.emplace_back([&, t] {
      for (int n = 0; !stop.load(); ++n) {
        const std::string key =
            "cmd-" + std::to_string(t) + "-" + std::to_string(n);
        start_options options;
        options.command_id = key;
        auto started =
            rt.start("test.three-steps", json{{"key", key}}, options);
        std::lock_guard lock(log.mutex);
        if (started) {
          log.acknowledged[key] = started->id;
        } else {
          log.failed.push_back(key);
          log.failures_by_code[std::string(to_code(started.error().code))] += 1;
          EXPECT_EQ(started.error().message.find(dir), std::string::npos)
              << started.error().message;
        }
        if (!started) {
          std::this_thread::sleep_for(2ms);
        }
      }
    });
  }
  return threads;
}

// Whether every store is ready; the first not ready one's fault otherwise.
bool all_ready(const std::vector<persistence::store*>& stores,
               std::string& fault) {
  for (const auto* store : stores) {
    if (!store->ready()) {
      fault = store->health().fault;
      return false;
    }
  }
  return true;
}

// `episodes` episodes of one or two injected faults, each healed after a
// while; every shard's store must be ready again within recovery_ms_max of
// each healing (a request may reach any of them). `recovery_ms_worst` is
// the longest it took.
void inject_fault_episodes(faulty_file_system& disk,
                           const std::vector<persistence::store*>& stores,
                           std::mt19937_64& random, int episodes,
                           std::int64_t& recovery_ms_worst) {
  const std::array<operation, 3> operations = {
      operation::write, operation::sync, operation::create};
  const std::array<fault, 3> kinds = {fault::no_space, fault::no_descriptors,
                                      fault::io_error};
  for (int episode = 0; episode < episodes; ++episode) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30 + random() % 40));
    disk.fail(operations[random() % operations.size()],
              kinds[random() % kinds.size()]);
    if (random() % 2 == 0) {
      disk.fail(operations[random() % operations.size()],
                kinds[random() % kinds.size()]);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10 + random() % 30));
    disk.heal();
    const auto healed = std::chrono::steady_clock::now();
    std::string fault;
    ASSERT_TRUE(
        eventually([&] { return all_ready(stores, fault); }, recovery_ms_max))
        << fault;
    recovery_ms_worst = std::max<std::int64_t>(
        recovery_ms_worst,
        std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::steady_clock::now() - healed)
            .count());
  }
}

// The faults are over: every failed start, retried with its command id,
// is admitted (and acknowledged).
void retry_failed(runtime& rt, command_log& log) {
  for (const auto& key : log.failed) {
    start_options options;
    options.command_id = key;
    result<run_info> retried = make_error(errc::internal, "not tried");
    ASSERT_TRUE(eventually(
        [&] {
          retried = rt.start("test.three-steps", json{{"key", key}}, options);
          return retried.ok();
        },
        recovery_ms_max))
        << key << ": " << retried.error().to_string();
    log.acknowledged[key] = retried->id;
  }
}

// Each acknowledged command has exactly its one run, completed: {lost,
// duplicated} (both expected 0).
std::pair<std::size_t, std::size_t> check_runs(
    const std::map<std::string, std::vector<run_info>>& found,
    const std::map<std::string, std::string>& acknowledged) {
  std::size_t lost = 0;
  std::size_t duplicated = 0;
  for (const auto& [key, run_id] : acknowledged) {
    auto runs = found.find(key);
    if (runs == found.end()) {
      ++lost;
      continue;
    }
    duplicated += runs->second.size() - 1;
    bool has_acknowledged = false;
    for (const auto& run : runs->second) {
      has_acknowledged = has_acknowledged || run.id == run_id;
      EXPECT_EQ(run.status, run_status::completed) << key;
    }
    EXPECT_TRUE(has_acknowledged) << key;
  }
  EXPECT_EQ(lost, 0u);
  EXPECT_EQ(duplicated, 0u);
  return std::make_pair(lost, duplicated);
}

TEST_F(StorageFaultRuntimeTest,
       RunsFinishAndNothingAcknowledgedIsLostAcrossStorageFaults) {
  auto disk = std::make_shared<faulty_file_system>(7);
  auto rt = open(disk);
  ASSERT_TRUE(rt);
  std::mt19937_64 random(11);
  constexpr int threads_count = 4;
  constexpr int episodes = 40;
  std::atomic<bool> stop{false};
  command_log log;
  auto threads = start_commands(*rt, threads_count, stop, log, dir_.path());
  std::int64_t recovery_ms_worst = 0;
  const auto stores = stores_of(*rt);
  ASSERT_NO_FATAL_FAILURE(inject_fault_episodes(*disk, stores, random, episodes,
                                                recovery_ms_worst));
  stop = true;
  for (auto& thread : threads) {
    thread.join();
  }
  const auto injected = disk->injected();
  std::uint64_t faults = 0;
  std::uint64_t reopens = 0;
  for (const auto* store : stores) {
    const auto health = store->health();
    faults += health.faults;
    reopens += health.reopens;
  }
  std::string fault;
  ASSERT_TRUE(all_ready(stores, fault)) << fault;
  ASSERT_NO_FATAL_FAILURE(retry_failed(*rt, log));

  // Every admitted run finishes without a restart.
  for (const auto& [key, run_id] : log.acknowledged) {
    auto done = rt->wait(run_id, finish_max);
    ASSERT_TRUE(done.ok()) << key << ": " << done.error().to_string();
    EXPECT_EQ(done->status, run_status::completed) << key;
  }
  const auto [lost, duplicated] =
      check_runs(runs_by_key(*rt), log.acknowledged);
  rt.reset();

  // A restart without faults sees the same.
  auto again = open(nullptr);
  ASSERT_TRUE(again);
  check_runs(runs_by_key(*again), log.acknowledged);
  std::string codes;
  for (const auto& [code, count] : log.failures_by_code) {
    codes += " " + code + "=" + std::to_string(count);
  }
  std::printf(
      "[ figures  ] %d episodes, %llu faults injected, %llu times not ready, "
      "%llu reopens; %zu commands, %zu refused during faults (%s ), "
      "retried; %zu lost, %zu duplicated; recovery after healing %lld ms "
      "worst\n",
      episodes, static_cast<unsigned long long>(injected),
      static_cast<unsigned long long>(faults),
      static_cast<unsigned long long>(reopens), log.acknowledged.size(),
      log.failed.size(), codes.c_str(), lost, duplicated,
      static_cast<long long>(recovery_ms_worst));
  EXPECT_GE(injected, 20u);
  EXPECT_GT(faults, 0u);
}

}  // namespace
}  // namespace durin
