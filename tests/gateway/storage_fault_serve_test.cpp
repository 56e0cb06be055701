// Goal: a real `durin serve` whose data disk fills up under keyed load never
// crashes, answers writes 503 storage-error (acknowledging nothing it did
// not make durable), says so on /readyz (503 storage-unavailable) while
// /healthz stays 200, and once space is freed becomes ready and takes writes
// again within recovery_ms_max, without a restart. A restart on the still
// full disk comes up not ready instead of aborting, and recovers the same
// way.
//
// Method: a 64 MiB tmpfs (a shard) mounted for the test (root only: without the
// right to mount, the tests are skipped, saying so), filled by a ballast
// file to a few MiB short of full, then by keyed starts with 8 KiB inputs
// from three threads. Deleting the ballast frees the space. Every process a
// test starts it stops by pid (serve_process), and the tmpfs is unmounted.
#include <gtest/gtest.h>

#include <cstdlib>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/serve_process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/tmpfs.hpp"

namespace durin::testing {
namespace {

using namespace std::chrono_literals;

constexpr auto recovery_ms_max = 10'000ms;
constexpr std::uint64_t reserve_bytes = 3u << 20;

json keyed_start(const std::string& order) {
  return {{"flow", "acme.review-order"},
          {"input", {{"orderId", order}, {"pad", std::string(8192, 'x')}}},
          {"wait", false}};
}

class StorageFaultServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mount_point_ = dir_.path() + "/disk";
    // 64 MiB per shard (DURIN_TEST_SHARDS runs the suite with several):
    // each shard's RocksDB keeps up to 16 MiB of logs and preallocates its
    // current one, and a store that failed comes back only with 8 MiB free
    // (store_options::reopen_free_bytes_min), which must hold after the
    // episodes' data once the ballast is gone.
    const char* shards = std::getenv("DURIN_TEST_SHARDS");
    disk_ = std::make_unique<tmpfs>(
        mount_point_, 64 * std::max(1, shards ? std::atoi(shards) : 1));
    if (!disk_->mounted()) {
      GTEST_SKIP() << disk_->why() << ": the disk-full process test is skipped";
    }
    data_dir_ = mount_point_ + "/data";
  }

  void TearDown() override {
    server_.reset();  // SIGKILL by pid if still running, then reaped
    disk_.reset();    // unmounted
  }

  void start() { server_ = std::make_unique<serve_process>(data_dir_); }
  api_client admin() { return {server_->address(), server_->admin_key()}; }

  // While the disk is full: once a write is refused, /readyz answers 503
  // naming the fault in plain words (never the path), /healthz 200, and the
  // metrics say not ready. A shard that reopened since its last refused
  // write counts as ready until it writes again (a reopen needs only a few
  // bytes; with 8 shards all may reopen before a probe): so each try writes
  // first (its key goes into `status_by_key`, to be retried later) and
  // probes right after; a try whose probe already found every shard
  // reopened is made again.
  void expect_full_disk_reported(
      api_client& probe, api_client& client, const std::string& prefix,
      std::map<std::string, unsigned>& status_by_key) {
    bool seen = false;
    for (int attempt = 0; attempt < 20 && !seen; ++attempt) {
      const std::string key = prefix + "-probe-" + std::to_string(attempt);
      auto write = client.post("/v1/runs", keyed_start(key), key);
      status_by_key[key] = write.status;
      if (write.status != 503) {
        continue;
      }
      auto ready = probe.get("/readyz");
      auto metrics = client.get("/metrics").body;
      if (ready.status == 200) {
        continue;  // reopened between the write and the probe
      }
      seen = true;
      EXPECT_EQ(ready.status, 503u) << ready.body;
      EXPECT_EQ(ready.code(), "storage-unavailable") << ready.body;
      const std::string message = ready.value.value("message", "");
      EXPECT_NE(message.find("the disk is full"), std::string::npos) << message;
      EXPECT_EQ(message.find(mount_point_), std::string::npos) << message;
      EXPECT_NE(metrics.find("durin_storage_ready 0"), std::string::npos);
    }
    EXPECT_TRUE(seen) << "no refused write was followed by a 503 /readyz";
    EXPECT_EQ(probe.get("/healthz").status, 200u);
  }

  // Starts again every key answered 503; each must now be admitted (202) or
  // replayed (200). Returns how many were retried.
  // A storage-error is indefinite and the retry with the key is safe: a
  // shard whose RocksDB reports a fault of the full period late (several
  // shards: one not written while full) is retried once it is ready.
  int retry_refused(api_client& client,
                    const std::map<std::string, unsigned>& by_key) {
    int retried = 0;
    for (const auto& [key, status] : by_key) {
      if (status != 503) {
        continue;
      }
      ++retried;
      auto again = client.post("/v1/runs", keyed_start(key), key);
      for (int attempt = 0; attempt < 5 && again.status == 503; ++attempt) {
        EXPECT_TRUE(ready_within(std::chrono::milliseconds(10'000)));
        again = client.post("/v1/runs", keyed_start(key), key);
      }
      EXPECT_TRUE(again.status == 202 || again.status == 200)
          << key << ": " << again.body;
    }
    return retried;
  }

  // Fills the tmpfs with a ballast file until `leave` bytes are free.
  void fill(std::uint64_t leave) {
    disk_->fill("ballast." + std::to_string(ballasts_++), leave);
  }

  void free_space() {
    for (int i = 0; i < ballasts_; ++i) {
      std::filesystem::remove(mount_point_ + "/ballast." + std::to_string(i));
    }
  }

  // Keyed starts from three threads until the node refuses `refusals`
  // writes or `limit` passes; the outcome of every key.
  struct load_outcome {
    std::map<std::string, unsigned> status_by_key;
    std::map<std::string, std::string> code_by_key;
    int transport_errors = 0;
  };
  load_outcome load_until_full(int refusals, std::chrono::seconds limit,
                               const std::string& prefix = "fill") {
    load_outcome out;
    std::mutex mutex;
    std::atomic<int> refused{0};
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([&, t] {
        auto client = admin();
        for (int n = 0; refused.load() < refusals &&
                        std::chrono::steady_clock::now() < deadline;
             ++n) {
          const std::string key =
              prefix + "-" + std::to_string(t) + "-" + std::to_string(n);
          auto answer = client.post("/v1/runs", keyed_start(key), key);
          std::lock_guard lock(mutex);
          if (!answer.error.empty()) {
            ++out.transport_errors;
            continue;
          }
          out.status_by_key[key] = answer.status;
          out.code_by_key[key] = answer.code();
          if (answer.status == 503) {
            refused.fetch_add(1);
          }
        }
      });
    }
    for (auto& thread : threads) {
      thread.join();
    }
    return out;
  }

  bool ready_within(std::chrono::milliseconds limit) {
    return eventually(
        [&] {
          api_client probe(server_->address(), "");
          return probe.get("/readyz").status == 200;
        },
        limit);
  }

  temp_dir dir_;
  std::string mount_point_;
  std::string data_dir_;
  std::unique_ptr<tmpfs> disk_;
  int ballasts_ = 0;
  std::unique_ptr<serve_process> server_;
};

TEST_F(StorageFaultServeTest, AFullDiskNeverCrashesTheNodeAndItHealsUnaided) {
  start();
  const pid_t pid = server_->pid();
  ASSERT_TRUE(ready_within(1s));
  api_client probe(server_->address(), "");
  auto client = admin();
  constexpr int episodes = 5;
  std::map<std::string, unsigned> status_by_key;
  int storage_errors = 0;
  std::int64_t recovery_ms_worst = 0;
  for (int episode = 0; episode < episodes; ++episode) {
    SCOPED_TRACE("episode " + std::to_string(episode));
    fill(reserve_bytes);
    auto full = load_until_full(30, 60s, "e" + std::to_string(episode));
    ASSERT_TRUE(server_->running()) << "durin serve ended on a full disk";
    int refused = 0;
    for (const auto& [key, status] : full.status_by_key) {
      EXPECT_TRUE(status == 202 || status == 200 || status == 503)
          << key << ": " << status << " " << full.code_by_key[key];
      if (status == 503) {
        refused += full.code_by_key[key] == "storage-error" ? 1 : 0;
      }
      status_by_key[key] = status;
    }
    EXPECT_EQ(full.transport_errors, 0);
    EXPECT_GT(refused, 0) << "the disk never filled";
    storage_errors += refused;

    expect_full_disk_reported(probe, client, "e" + std::to_string(episode),
                              status_by_key);

    free_space();
    const auto freed = std::chrono::steady_clock::now();
    ASSERT_TRUE(ready_within(recovery_ms_max)) << probe.get("/readyz").body;
    const std::string after_key = "after-" + std::to_string(episode);
    auto after = client.post("/v1/runs", keyed_start(after_key), after_key);
    EXPECT_EQ(after.status, 202u) << after.body;
    status_by_key[after_key] = after.status;
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - freed);
    EXPECT_LT(took, recovery_ms_max);
    recovery_ms_worst = std::max<std::int64_t>(recovery_ms_worst, took.count());
    EXPECT_NE(client.get("/metrics").body.find("durin_storage_ready 1"),
              std::string::npos);
  }

  // Every refused key, retried, gets one run: refused means not admitted, or
  // admitted once and replayed.
  const int retried = retry_refused(client, status_by_key);
  std::map<std::string, int> runs_per_key;
  ASSERT_NO_FATAL_FAILURE(count_runs_by_order(client, runs_per_key, 100));
  int duplicated = 0;
  int lost = 0;
  for (const auto& [key, status] : status_by_key) {
    const int runs = runs_per_key[key];
    duplicated += runs > 1 ? runs - 1 : 0;
    lost += runs == 0 ? 1 : 0;
  }
  EXPECT_EQ(duplicated, 0);
  EXPECT_EQ(lost, 0);
  EXPECT_EQ(server_->pid(), pid);
  ASSERT_TRUE(server_->running());
  std::printf(
      "[ figures  ] %d disk-full episodes under keyed load: %zu keys, %d "
      "refused 503 storage-error, %d retried; %d lost, %d duplicated; ready "
      "at worst %lld ms after space was freed, never restarted\n",
      episodes, status_by_key.size(), storage_errors, retried, lost, duplicated,
      static_cast<long long>(recovery_ms_worst));
  EXPECT_EQ(server_->terminate(), 0);
}

TEST_F(StorageFaultServeTest, ARestartOnAFullDiskServesNotReadyThenRecovers) {
  start();
  ASSERT_TRUE(ready_within(1s));
  fill(reserve_bytes);
  (void)load_until_full(10, 60s);
  ASSERT_TRUE(server_->running());
  EXPECT_EQ(server_->terminate(), 0) << "a stop on a full disk must not abort";
  fill(0);  // whatever the stop left free
  start();
  ASSERT_TRUE(server_->running());
  api_client probe(server_->address(), "");
  EXPECT_EQ(probe.get("/healthz").status, 200u);
  auto not_ready = probe.get("/readyz");
  EXPECT_EQ(not_ready.status, 503u) << not_ready.body;
  EXPECT_EQ(not_ready.code(), "storage-unavailable") << not_ready.body;
  free_space();
  ASSERT_TRUE(ready_within(recovery_ms_max)) << probe.get("/readyz").body;
  auto client = admin();
  auto after =
      client.post("/v1/runs", keyed_start("after-restart"), "after-restart");
  EXPECT_EQ(after.status, 202u) << after.body;
  EXPECT_EQ(server_->terminate(), 0);
}

}  // namespace
}  // namespace durin::testing
