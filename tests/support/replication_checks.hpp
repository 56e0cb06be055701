// What the process-level replication tests share (tests/cluster/
// replication_test.cpp, partition_test.cpp): a keyed load of starts through
// the nodes of a cluster_harness with a client-side log of every request
// (when sent, through which node) and its answer (when, what), and the
// checks run afterwards: every 2xx start is present and the one run of its
// key, through any node; every shard's backups are in step; every shard's
// copies are equal as stored (epoch, log position and a checksum of every
// column family). Not thread-safe except where said: the log is written by
// the load's threads and read by the test's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "persistence/store.hpp"
#include "tests/support/cluster_harness.hpp"

namespace durin::testing {

using clock_type = std::chrono::steady_clock;

inline json review(const std::string& order) {
  return {{"flow", "acme.review-order"},
          {"input", {{"orderId", order}, {"amount", 5}}}};
}

inline cluster_setup replicated(int nodes, std::uint32_t shards,
                                std::vector<std::string> flags = {}) {
  cluster_setup setup;
  setup.nodes = nodes;
  setup.shards = shards;
  setup.replicas = 2;
  setup.flags = std::move(flags);
  return setup;
}

// Every keyed start sent: when it was sent, through which node, and what
// it was answered when (`replayed`: marked Idempotent-Replayed, answered
// from the record of the key's earlier, acknowledged write).
class request_log {
 public:
  void record(const std::string& key, unsigned status, const std::string& id,
              int via, clock_type::time_point sent, bool replayed = false) {
    std::lock_guard lock(mutex_);
    entries_.push_back(
        {key, status, id, via, sent, clock_type::now(), replayed});
  }
  // The keys answered 2xx, with the run each named.
  std::map<std::string, std::string> acknowledged() const {
    std::lock_guard lock(mutex_);
    std::map<std::string, std::string> out;
    for (const auto& entry : entries_) {
      if (entry.status / 100 == 2) {
        out[entry.key] = entry.id;
      }
    }
    return out;
  }
  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return entries_.size();
  }
  // 2xx answers given by node `via` (-1: any) to requests sent after
  // `sent_after` and answered before `answered_before`. A request sent
  // after a node's lease deadline reached it after that deadline.
  std::size_t acknowledged_count(int via, clock_type::time_point sent_after,
                                 clock_type::time_point answered_before =
                                     clock_type::time_point::max()) const {
    return count_acknowledged(via, sent_after, answered_before, false);
  }
  // The same, less replays: writes acknowledged by these very answers.
  std::size_t fresh_acknowledged_count(
      int via, clock_type::time_point sent_after,
      clock_type::time_point answered_before) const {
    return count_acknowledged(via, sent_after, answered_before, true);
  }
  // Requests sent through node `via` after `sent_after` and answered (or
  // given up on) before `answered_before`, whatever their answer.
  std::size_t sent_count(int via, clock_type::time_point sent_after,
                         clock_type::time_point answered_before) const {
    std::lock_guard lock(mutex_);
    std::size_t count = 0;
    for (const auto& entry : entries_) {
      count += entry.via == via && entry.sent > sent_after &&
               entry.answered < answered_before;
    }
    return count;
  }
  // When the first 2xx to a request sent after `since` arrived (through
  // any node); nullopt when none did.
  std::optional<clock_type::time_point> first_acknowledged_sent_after(
      clock_type::time_point since) const {
    std::lock_guard lock(mutex_);
    std::optional<clock_type::time_point> first;
    for (const auto& entry : entries_) {
      if (entry.sent > since && entry.status / 100 == 2 &&
          (!first || entry.answered < *first)) {
        first = entry.answered;
      }
    }
    return first;
  }
  // The longest time without any 2xx answer between `from` and `to`:
  // how long the cluster stopped answering writes meanwhile.
  std::chrono::milliseconds longest_silence(clock_type::time_point from,
                                            clock_type::time_point to) const {
    std::vector<clock_type::time_point> answers{from, to};
    {
      std::lock_guard lock(mutex_);
      for (const auto& entry : entries_) {
        if (entry.status / 100 == 2 && entry.answered > from &&
            entry.answered < to) {
          answers.push_back(entry.answered);
        }
      }
    }
    std::sort(answers.begin(), answers.end());
    clock_type::duration longest{0};
    for (std::size_t i = 1; i < answers.size(); ++i) {
      longest = std::max(longest, answers[i] - answers[i - 1]);
    }
    return std::chrono::duration_cast<std::chrono::milliseconds>(longest);
  }
  // Keys sent and never answered 2xx (a load stopped while retrying one
  // leaves it here).
  std::set<std::string> never_acknowledged() const {
    std::lock_guard lock(mutex_);
    std::set<std::string> keys;
    for (const auto& entry : entries_) {
      keys.insert(entry.key);
    }
    for (const auto& entry : entries_) {
      if (entry.status / 100 == 2) {
        keys.erase(entry.key);
      }
    }
    return keys;
  }

 private:
  struct entry {
    std::string key;
    unsigned status = 0;
    std::string id;
    int via = 0;
    clock_type::time_point sent;
    clock_type::time_point answered;
    bool replayed = false;
  };

  std::size_t count_acknowledged(int via, clock_type::time_point sent_after,
                                 clock_type::time_point answered_before,
                                 bool fresh_only) const {
    std::lock_guard lock(mutex_);
    std::size_t count = 0;
    for (const auto& entry : entries_) {
      count += (via < 0 || entry.via == via) && entry.sent > sent_after &&
               entry.answered < answered_before && entry.status / 100 == 2 &&
               !(fresh_only && entry.replayed);
    }
    return count;
  }
  mutable std::mutex mutex_;
  std::vector<entry> entries_;
};

// Keyed starts from `threads` threads through the nodes `live` says are
// up, until stopped; each key is retried (same key) until answered 2xx or
// the load stops.
class keyed_load {
 public:
  // A request unanswered after `request_timeout` counts as failed (logged
  // with status 0) and its key is retried.
  keyed_load(
      cluster_harness& cluster, request_log& log, int threads,
      std::chrono::milliseconds request_timeout = std::chrono::seconds(30))
      : cluster_(cluster),
        log_(log),
        request_timeout_ms_(request_timeout.count()),
        up_(cluster.size()) {
    for (auto& one : up_) {
      one = true;
    }
    for (int t = 0; t < threads; ++t) {
      threads_.emplace_back([this, t] { run(t); });
    }
  }
  ~keyed_load() { stop(); }
  void set_up(int node, bool up) { up_[node] = up; }
  void stop() {
    stopping_ = true;
    for (auto& thread : threads_) {
      if (thread.joinable()) {
        thread.join();
      }
    }
  }

 private:
  void run(int t) {
    std::map<int, std::unique_ptr<api_client>> clients;
    for (int n = 0; !stopping_; ++n) {
      const auto key = "k" + std::to_string(t) + "-" + std::to_string(n);
      for (int attempt = 0; !stopping_; ++attempt) {
        const int via = (t + n + attempt) % cluster_.size();
        if (!up_[via]) {
          continue;
        }
        try {
          auto& client = clients[via];
          if (!client || attempt > 0) {
            client = std::make_unique<api_client>(
                cluster_.client(via, request_timeout_ms_));
          }
          const auto sent = clock_type::now();
          auto answer = client->post("/v1/runs", review(key), key);
          const auto id = answer.value.is_object()
                              ? answer.value.value("id", std::string())
                              : std::string();
          log_.record(key, answer.status, id, via, sent,
                      answer.headers.count("idempotent-replayed") != 0);
          if (answer.status / 100 == 2) {
            break;
          }
        } catch (const std::exception&) {
          // A node that went away: the next attempt tries another.
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }

  cluster_harness& cluster_;
  request_log& log_;
  std::int64_t request_timeout_ms_;
  std::vector<std::atomic<bool>> up_;
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> threads_;
};

// Every acknowledged start is there and is the one run of its key,
// through any node.
inline void expect_every_acknowledged_start_present(cluster_harness& cluster,
                                                    const request_log& log) {
  const auto acknowledged = log.acknowledged();
  ASSERT_GT(acknowledged.size(), 10u);
  int via = 0;
  for (const auto& [key, id] : acknowledged) {
    api_client::answer again;
    for (int attempt = 0; attempt < 50; ++attempt) {
      again = cluster.client(via % cluster.size())
                  .post("/v1/runs", review(key), key);
      if (again.status != 503) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ++via;
    ASSERT_EQ(again.status, 200u) << key << ": " << again.body;
    EXPECT_EQ(again.value["id"], id) << key;
  }
}

// Until every shard has had its backups in its in-sync set for longer than
// the replication timeout (1 s here), with a moment in that span where no
// copy lagged its primary. One look is not enough: a restarted backup's
// old entry stays in the set until its primary drops or replaces it.
inline bool wait_for_copies_in_step(
    cluster_harness& cluster, int via,
    std::chrono::milliseconds limit = std::chrono::seconds(30)) {
  constexpr auto steady_for = std::chrono::milliseconds(2500);
  const auto until = clock_type::now() + limit;
  // Since when the sets have been full (none: `full` is false). Not an
  // optional: g++ 12 finds it maybe uninitialized at -O2.
  bool full = false;
  auto since = clock_type::now();
  bool caught_up = false;
  while (clock_type::now() < until) {
    auto view = cluster.status(via);
    bool all = view.is_object() && view.contains("shards");
    bool no_lag = all;
    for (const auto& shard : all ? view["shards"] : json::array()) {
      all = all && shard["owner"].is_string() &&
            shard["inSync"].size() == shard["backups"].size() &&
            shard["replicas"].size() == shard["backups"].size() + 1;
      for (const auto& copy : all ? shard["replicas"] : json::array()) {
        no_lag = no_lag && copy["lagWrites"] == 0;
      }
    }
    if (!all) {
      full = false;
      caught_up = false;
    } else {
      if (!full) {
        full = true;
        since = clock_type::now();
      }
      caught_up = caught_up || no_lag;
      if (caught_up && clock_type::now() - since >= steady_for) {
        return true;
      }
    }
    if (clock_type::now() + std::chrono::milliseconds(100) >= until) {
      std::fprintf(stderr, "copies not in step: %s\n", view.dump().c_str());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// Freezes every node, then compares each shard's copies as stored.
inline void expect_copies_equal(cluster_harness& cluster) {
  auto view = cluster.status(0);
  ASSERT_TRUE(view.is_object());
  for (int i = 0; i < cluster.size(); ++i) {
    cluster.pause(i);
  }
  for (int i = 0; i < cluster.size(); ++i) {
    cluster.kill9(i);
  }
  for (const auto& shard : view["shards"]) {
    const auto id = shard["id"].get<std::uint32_t>();
    std::vector<std::string> holders = {shard["owner"].get<std::string>()};
    for (const auto& backup : shard["backups"]) {
      holders.push_back(backup.get<std::string>());
    }
    std::set<std::uint64_t> positions, epochs, sums;
    for (const auto& node : holders) {
      char name[16];
      std::snprintf(name, sizeof name, "%03u", id);
      const auto dir = cluster.data_dir(std::stoi(node.substr(1))) +
                       "/shards/" + std::string(name);
      auto copy = persistence::store::open(dir);
      ASSERT_TRUE(copy) << copy.error().to_string();
      auto sum = (*copy)->checksum();
      ASSERT_TRUE(sum);
      positions.insert((*copy)->log_position());
      epochs.insert((*copy)->last_epoch());
      sums.insert(*sum);
    }
    EXPECT_EQ(positions.size(), 1u) << "shard " << id;
    EXPECT_EQ(epochs.size(), 1u) << "shard " << id;
    EXPECT_EQ(sums.size(), 1u) << "shard " << id;
    EXPECT_GT(*positions.begin(), 0u) << "shard " << id;
  }
}

inline int index_of(const std::string& node) {
  return std::stoi(node.substr(1));
}

// The nodes that own a shard now, as node `via` sees it.
inline std::set<int> owners(cluster_harness& cluster, int via) {
  std::set<int> out;
  auto view = cluster.status(via);
  for (const auto& shard : view.is_object() ? view["shards"] : json::array()) {
    if (shard["owner"].is_string()) {
      out.insert(index_of(shard["owner"].get<std::string>()));
    }
  }
  return out;
}

inline std::uint64_t metric(cluster_harness& cluster, int node,
                            const std::string& name) {
  return cluster.metric(node, name);
}

}  // namespace durin::testing
