// Goal: N `durin serve --etcd` processes are one durin. Any node answers any
// request (a shard it does not serve is forwarded over CAF to its owner);
// every id resolves to one shard, so the same start token, instance id or
// idempotency key sent at once through different nodes starts one run; a
// lost node's shards answer 503 shard-unavailable at once while the other
// shards serve; a node paused past its lease or cut from etcd gives no 2xx
// after its deadline and serves again, at a higher epoch, by itself. Real
// etcd, real nodes on loopback, real kill -9 and SIGSTOP
// (tests/support/cluster_harness.hpp).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "persistence/keys.hpp"
#include "services/shard_map.hpp"
#include "tests/support/cluster_harness.hpp"

namespace durin::testing {
namespace {

using namespace std::chrono_literals;

json review(const std::string& order) {
  return {{"flow", "acme.review-order"},
          {"input", {{"orderId", order}, {"amount", 5}}}};
}

// Shards `harness`'s node `i` serves, as its GET /v1/cluster says.
std::set<std::uint32_t> shards_of(cluster_harness& harness, int i) {
  std::set<std::uint32_t> out;
  auto view = harness.status((i + 1) % harness.size());
  for (const auto& entry : view["shards"]) {
    if (entry["owner"] == cluster_harness::node_id(i)) {
      out.insert(entry["id"].get<std::uint32_t>());
    }
  }
  return out;
}

std::uint32_t shard_of_run(const std::string& id, std::uint32_t shards) {
  // Crockford base32, the last two characters (services/shard_map.hpp).
  static const std::string digits = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
  const auto high = digits.find(id[id.size() - 2]);
  const auto low = digits.find(id[id.size() - 1]);
  return static_cast<std::uint32_t>((high * 32 + low) % shards);
}

TEST(ClusterInit, ASecondInitOfTheSameNameIsRefused) {
  etcd_process etcd;
  const std::vector<std::string> init = {"cluster",       "init",      "--etcd",
                                         etcd.endpoint(), "--cluster", "once",
                                         "--shards",      "4"};
  std::string first;
  std::string second;
  EXPECT_EQ(cluster_harness::run_cli(init, &first), 0) << first;
  EXPECT_EQ(cluster_harness::run_cli(init, &second), 1) << second;
  EXPECT_NE(second.find("initialised already"), std::string::npos) << second;
  std::string status;
  ASSERT_EQ(cluster_harness::run_cli({"cluster", "status", "--etcd",
                                      etcd.endpoint(), "--cluster", "once"},
                                     &status),
            0);
  auto view = json::parse(status);
  EXPECT_EQ(view["shardCount"], 4);
  EXPECT_EQ(view["shards"].size(), 4u);
}

// A repeated node id would count twice towards --replicas and leave every
// shard without its backup: refused, and nothing is written.
TEST(ClusterServe, AnInitNamingANodeTwiceIsRefused) {
  etcd_process etcd;
  std::string output;
  EXPECT_EQ(cluster_harness::run_cli(
                {"cluster", "init", "--etcd", etcd.endpoint(), "--cluster",
                 "twice", "--shards", "4", "--nodes", "a,a", "--replicas", "2"},
                &output),
            1)
      << output;
  EXPECT_NE(output.find("names node id 'a' twice"), std::string::npos)
      << output;
  std::string status;
  EXPECT_NE(cluster_harness::run_cli({"cluster", "status", "--etcd",
                                      etcd.endpoint(), "--cluster", "twice"},
                                     &status),
            0)
      << status;
}

// A drain of an id nothing names (a typo) is an error, not "drained".
TEST(ClusterServe, ADrainOfANodeNotInTheClusterIsRefused) {
  etcd_process etcd;
  std::string output;
  ASSERT_EQ(cluster_harness::run_cli(
                {"cluster", "init", "--etcd", etcd.endpoint(), "--cluster",
                 "named", "--shards", "4", "--nodes", "a,b"},
                &output),
            0)
      << output;
  for (bool remove : {false, true}) {
    std::vector<std::string> drain = {"cluster", "drain",         "typo",
                                      "--etcd",  etcd.endpoint(), "--cluster",
                                      "named"};
    if (remove) {
      drain.push_back("--remove");
    }
    EXPECT_EQ(cluster_harness::run_cli(drain, &output), 1) << output;
    EXPECT_NE(output.find("node 'typo' is not in cluster 'named'"),
              std::string::npos)
        << output;
  }
}

TEST(ClusterServe, AServeOfAClusterNeverInitialisedIsRefused) {
  etcd_process etcd;
  temp_dir dir;
  std::string output;
  const int code = cluster_harness::run_cli(
      {"serve", "--data-dir", dir.path(), "--listen", "127.0.0.1:0", "--etcd",
       etcd.endpoint(), "--cluster", "never", "--node-id", "a"},
      &output);
  EXPECT_NE(code, 0);
  EXPECT_NE(output.find("not initialised"), std::string::npos) << output;
}

// Checked before the node joins (no etcd is reached at this address).
TEST(ClusterServe, ATimeoutOutOfRangeIsRefusedNamingItsFlag) {
  temp_dir dir;
  for (const auto& [flag, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"--forward-timeout-ms", "99"},
           {"--forward-timeout-ms", "600001"},
           {"--replication-timeout-ms", "99"}}) {
    std::string output;
    const int code = cluster_harness::run_cli(
        {"serve", "--data-dir", dir.path(), "--listen", "127.0.0.1:0", "--etcd",
         "http://127.0.0.1:9", "--cluster", "c", "--node-id", "a", flag, value},
        &output);
    EXPECT_EQ(code, 2) << flag << " " << value << ": " << output;
    EXPECT_NE(output.find("invalid-argument: " + flag + " must be"),
              std::string::npos)
        << output;
  }
}

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(cluster_.wait_for_routing()); }

  cluster_harness cluster_;
};

// A second process given a live node's id (with another data directory)
// is refused once that node's lease has been renewed past what it had
// left; it never ends the live node's lease, so the node's shards keep
// their epochs and their owner.
TEST_F(ClusterTest, ASecondProcessWithALiveNodesIdIsRefusedAndTheNodeServesOn) {
  auto epochs = [&] {
    std::vector<std::pair<std::string, std::uint64_t>> out;
    for (const auto& shard : cluster_.status(1)["shards"]) {
      out.emplace_back(shard["owner"].get<std::string>(),
                       shard["epoch"].get<std::uint64_t>());
    }
    return out;
  };
  const auto before = epochs();
  temp_dir other;
  const auto log = other.path() + "/stderr";
  child_process duplicate(
      DURIN_CLI,
      {"serve", "--data-dir", other.path() + "/data", "--listen", "127.0.0.1:0",
       "--etcd", cluster_.etcd_endpoints(), "--cluster", cluster_.name(),
       "--node-id", cluster_harness::node_id(0), "--peer-listen", "127.0.0.1:0",
       "--lease-ttl-s", "2"},
      {}, true, 0, log);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (duplicate.running() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_FALSE(duplicate.running()) << "the duplicate serves";
  EXPECT_NE(duplicate.terminate(), 0);
  std::ifstream said(log);
  const std::string text((std::istreambuf_iterator<char>(said)),
                         std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("node id '" + cluster_harness::node_id(0) +
                      "' is held in cluster"),
            std::string::npos)
      << text;
  EXPECT_EQ(epochs(), before);
  EXPECT_EQ(cluster_.client(0).get("/healthz").status, 200u);
}

// A cluster node's files are its owner's only, as a single node's: its
// data dir (made before the node joins its cluster) 0700, every file 0600.
TEST_F(ClusterTest, ANodesDataDirIsPrivateToItsOwner) {
  auto started = cluster_.client(0).post("/v1/runs", review("private"));
  ASSERT_EQ(started.status, 200u) << started.body;
  for (int i = 0; i < 3; ++i) {
    const auto dir = cluster_.data_dir(i);
    struct stat info {};
    ASSERT_EQ(::stat(dir.c_str(), &info), 0) << dir;
    EXPECT_EQ(info.st_mode & 0777, 0700u) << dir;
    int files = 0;
    for (const auto& entry :
         std::filesystem::recursive_directory_iterator(dir)) {
      ASSERT_EQ(::stat(entry.path().c_str(), &info), 0);
      EXPECT_EQ(info.st_mode & 0777, entry.is_directory() ? 0700u : 0600u)
          << entry.path();
      ++files;
    }
    EXPECT_GT(files, 3) << dir;
  }
}

TEST_F(ClusterTest, StatusNamesEveryNodeAndAnOwnerAndEpochPerShard) {
  auto view = cluster_.status(1);
  ASSERT_TRUE(view.is_object());
  SCOPED_TRACE(view.dump());
  EXPECT_EQ(view["nodes"].size(), 3u);
  for (const auto& node : view["nodes"]) {
    EXPECT_TRUE(node["http"].is_string());
    EXPECT_TRUE(node["peer"].is_string());
    EXPECT_GT(node["leaseLeftMs"].get<std::int64_t>(), 0);
  }
  ASSERT_EQ(view["shards"].size(), 8u);
  std::set<std::string> owners;
  for (const auto& shard : view["shards"]) {
    owners.insert(shard["owner"].get<std::string>());
    EXPECT_GE(shard["epoch"].get<std::uint64_t>(), 1u);
    EXPECT_EQ(shard["state"], "active");
  }
  EXPECT_GE(owners.size(), 2u);  // rendezvous spreads 8 shards over 3 nodes
  // Admin only.
  auto keys = cluster_.client(0);
  auto reader =
      keys.post("/v1/api-keys", {{"name", "r"}, {"role", "read-only"}});
  ASSERT_EQ(reader.status, 201u) << reader.body;
  api_client weak(cluster_.node(0).address(), reader.value["secret"]);
  EXPECT_EQ(weak.get("/v1/cluster").status, 403u);
}

TEST_F(ClusterTest, SigtermStopsANodeCleanlyAndItsShardsComeBackAtOnce) {
  auto started = cluster_.client(1).post("/v1/runs", review("sigterm"));
  ASSERT_EQ(started.status, 200u) << started.body;
  const auto began = std::chrono::steady_clock::now();
  EXPECT_EQ(cluster_.node(2).terminate(), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - began, 10s);
  cluster_.start(2);
  ASSERT_TRUE(cluster_.wait_for_routing(5s));  // it ended its lease
  auto got = cluster_.client(2).get("/v1/runs/" +
                                    started.value["id"].get<std::string>());
  EXPECT_EQ(got.status, 200u) << got.body;
}

TEST_F(ClusterTest, AnyNodeAnswersForAnyRunAndListsMergeEveryNode) {
  std::vector<std::string> ids;
  for (int i = 0; i < 24; ++i) {
    auto client = cluster_.client(i % 3);
    auto started = client.post("/v1/runs", review("o" + std::to_string(i)));
    ASSERT_EQ(started.status, 200u) << started.body;
    ids.push_back(started.value["id"]);
  }
  std::set<std::uint32_t> shards;
  for (const auto& id : ids) {
    shards.insert(shard_of_run(id, 8));
    for (int via = 0; via < 3; ++via) {
      auto client = cluster_.client(via);
      auto got = client.get("/v1/runs/" + id);
      ASSERT_EQ(got.status, 200u) << got.body;
      EXPECT_EQ(got.value["status"], "completed");
      auto history = client.get("/v1/runs/" + id + "/history");
      ASSERT_EQ(history.status, 200u) << history.body;
    }
  }
  EXPECT_GE(shards.size(), 3u);  // plain starts spread over the nodes
  // Pages of 5 through each node: every run once, newest first.
  for (int via = 0; via < 3; ++via) {
    auto client = cluster_.client(via);
    std::vector<std::string> seen;
    std::string cursor;
    for (int page = 0; page < 20; ++page) {
      auto listed = client.get("/v1/runs?limit=5" +
                               (cursor.empty() ? "" : "&cursor=" + cursor));
      ASSERT_EQ(listed.status, 200u) << listed.body;
      EXPECT_FALSE(listed.value.contains("unavailableShards"));
      for (const auto& run : listed.value["runs"]) {
        seen.push_back(run["id"]);
      }
      if (listed.value["nextCursor"].is_null()) {
        break;
      }
      cursor = listed.value["nextCursor"];
    }
    auto sorted = ids;
    std::sort(sorted.rbegin(), sorted.rend());
    EXPECT_EQ(seen, sorted) << "through node " << via;
    auto counted = client.get("/v1/run-counts");
    ASSERT_EQ(counted.status, 200u) << counted.body;
    EXPECT_EQ(counted.value["total"], 24);
    EXPECT_EQ(counted.value["counts"]["completed"], 24);
  }
}

TEST_F(ClusterTest, AWebhookPostedToAnyNodeReachesItsRun) {
  for (int i = 0; i < 6; ++i) {
    auto started = cluster_.client(i % 3).post(
        "/v1/runs", {{"flow", "acme.await-webhook"}, {"wait", false}});
    ASSERT_EQ(started.status, 202u) << started.body;
    const std::string id = started.value["id"];
    std::string url;
    ASSERT_TRUE(eventually(
        [&] {
          auto history = cluster_.client(0).get("/v1/runs/" + id + "/history");
          const auto text = history.body;
          const auto at = text.find("/v1/webhooks/wh_");
          if (at == std::string::npos) {
            return false;
          }
          url = text.substr(at, text.find('"', at) - at);
          return true;
        },
        10s));
    api_client anyone(cluster_.node((i + 1) % 3).address(), "");
    auto posted = anyone.send("POST", url, R"({"paid": true})",
                              {{"content-type", "application/json"}});
    ASSERT_LT(posted.status, 300u) << posted.status << " " << posted.body;
    auto reader = cluster_.client(2);
    auto done = wait_run(reader, id);
    EXPECT_EQ(done["status"], "completed") << done.dump();
  }
  api_client anyone(cluster_.node(0).address(), "");
  EXPECT_EQ(anyone.send("POST", "/v1/webhooks/wh_nobody", "{}").status, 404u);
}

TEST_F(ClusterTest,
       TheSameStartTokenInstanceIdOrKeySentAtOnceThroughEveryNodeStartsOneRun) {
  // 60 rounds in CI; DURIN_CLUSTER_ROUNDS=1000 for the longer tier. Rounds
  // take turns: an instance id, an idempotency key, a start hook token.
  const char* asked = std::getenv("DURIN_CLUSTER_ROUNDS");
  const int rounds = asked != nullptr ? std::atoi(asked) : 60;
  for (int round = 0; round < rounds; ++round) {
    const int kind = round % 3;
    const bool keyed = kind == 1;
    const bool hooked = kind == 2;
    const auto name = "r" + std::to_string(round);
    auto body = json{
        {"flow", "acme.sleep"}, {"input", {{"ms", 30'000}}}, {"wait", false}};
    if (kind == 0) {
      body["instanceId"] = name;
      body["onDuplicate"] = "return-existing-active";
    } else if (hooked) {
      body["hook"] = {{"token", "start:" + name}};
    }
    std::vector<std::future<api_client::answer>> answers;
    for (int via = 0; via < 3; ++via) {
      answers.push_back(std::async(std::launch::async, [&, via] {
        auto client = cluster_.client(via);
        // A key still held by the same request through another node is
        // 409 in-flight: retried, it gets that request's answer. A peer
        // not reached yet (just after the nodes started) sent nothing:
        // retried as a client would.
        for (;;) {
          auto got = client.post("/v1/runs", body, keyed ? name : "");
          if (got.code() != "idempotency-key-in-flight" &&
              got.code() != "peer-unreachable") {
            return got;
          }
          std::this_thread::sleep_for(5ms);
        }
      }));
    }
    std::set<std::string> runs;
    std::set<std::string> named;  // the runs hook conflicts name
    for (auto& answer : answers) {
      auto got = answer.get();
      if (hooked && got.status == 409u) {
        ASSERT_EQ(got.code(), "hook-conflict") << got.body;
        named.insert(got.value.value("conflictingRunId", ""));
        continue;
      }
      ASSERT_TRUE(got.status == 202u || got.status == 200u)
          << got.status << " " << got.body;
      runs.insert(got.value["id"].get<std::string>());
    }
    ASSERT_EQ(runs.size(), 1u) << "round " << round;
    if (hooked) {
      EXPECT_TRUE(named.empty() || named == runs)
          << "round " << round << ": a conflict names another run";
    }
  }
}

TEST_F(ClusterTest,
       AKeyedCancelOrResumeThroughAnyNodeIsCarriedOutOnceAndReplays) {
  for (int i = 0; i < 8; ++i) {
    auto sleeper = cluster_.client(i % 3).post(
        "/v1/runs",
        {{"flow", "acme.sleep"}, {"input", {{"ms", 60'000}}}, {"wait", false}});
    ASSERT_EQ(sleeper.status, 202u) << sleeper.body;
    const std::string id = sleeper.value["id"];
    const auto key = "cancel-" + std::to_string(i);
    json first;
    for (int via = 0; via < 3; ++via) {
      auto cancelled = cluster_.client(via).send(
          "POST", "/v1/runs/" + id + "/cancel", R"({"reason": "test"})",
          {{"Idempotency-Key", key}, {"content-type", "application/json"}});
      ASSERT_EQ(cancelled.status, 200u) << cancelled.body;
      EXPECT_EQ(cancelled.value["status"], "cancelled");
      if (via == 0) {
        first = cancelled.value;
      }
      EXPECT_EQ(cancelled.value, first) << "replayed through node " << via;
    }
  }
  // A keyed resume of a hook, through every node.
  auto notes = cluster_.client(0).post(
      "/v1/runs", {{"flow", "acme.order-notes"},
                   {"input", {{"orderId", "K-1"}, {"note", "first"}}},
                   {"hook", {{"token", "order:K-1"}}},
                   {"wait", false}});
  ASSERT_EQ(notes.status, 202u) << notes.body;
  ASSERT_TRUE(eventually(
      [&] {
        return cluster_.client(2).get("/v1/hooks/order:K-1").status == 200u;
      },
      10s));
  for (int via = 0; via < 3; ++via) {
    auto resumed = cluster_.client(via).send(
        "POST", "/v1/hooks/order:K-1/resume",
        R"({"payload": {"note": "last", "done": true}})",
        {{"Idempotency-Key", "resume-K-1"},
         {"content-type", "application/json"}});
    ASSERT_LT(resumed.status, 300u) << resumed.body;
  }
  auto reader = cluster_.client(1);
  auto done = wait_run(reader, notes.value["id"]);
  EXPECT_EQ(done["status"], "completed") << done.dump();
  EXPECT_EQ(done["output"]["notes"].size(), 2u) << done.dump();
}

TEST_F(ClusterTest,
       AKeyAgainWithAnotherBodyWhoseTokenLivesElsewhereIsAConflict) {
  auto client = cluster_.client(0);
  auto body = review("k1");
  body["hook"] = {{"token", "first-token"}};
  auto first = client.post("/v1/runs", body, "the-key");
  ASSERT_EQ(first.status, 200u) << first.body;
  for (int i = 0; i < 8; ++i) {
    auto other = review("k1");
    other["hook"] = {{"token", "other-token-" + std::to_string(i)}};
    for (int via = 0; via < 3; ++via) {
      auto again = cluster_.client(via).post("/v1/runs", other, "the-key");
      EXPECT_EQ(again.status, 409u) << again.body;
      EXPECT_EQ(again.code(), "conflict") << again.body;
    }
  }
  auto listed = client.get("/v1/runs?limit=100");
  EXPECT_EQ(listed.value["runs"].size(), 1u) << listed.body;
}

TEST_F(ClusterTest,
       AKeyedStartWhoseTokenLivesOnAnotherNodeIsOneRunReplayedAnywhere) {
  // Tokens whose shard differs from their key's and lives on another node
  // are among these (8 shards over 3 nodes).
  std::set<std::string> runs;
  for (int i = 0; i < 12; ++i) {
    auto body = review("t" + std::to_string(i));
    body["hook"] = {{"token", "tok-" + std::to_string(i)}};
    const auto key = "key-" + std::to_string(i);
    std::string id;
    for (int via = 0; via < 3; ++via) {
      auto got = cluster_.client(via).post("/v1/runs", body, key);
      ASSERT_EQ(got.status, 200u) << got.body;
      if (id.empty()) {
        id = got.value["id"];
      }
      EXPECT_EQ(got.value["id"], id) << "replay through node " << via;
    }
    runs.insert(id);
  }
  EXPECT_EQ(runs.size(), 12u);
  auto listed = cluster_.client(2).get("/v1/runs?limit=100");
  EXPECT_EQ(listed.value["runs"].size(), 12u);
}

TEST_F(ClusterTest, AKeyedStartKilledBetweenItsKeyAndItsRunStartsThatRunOnce) {
  // A key whose shard node 0 serves and a token whose shard node 1 serves:
  // the key's marker is written on node 0, the run admitted on node 1.
  const services::shard_map map(8);
  const auto on0 = shards_of(cluster_, 0);
  const auto on1 = shards_of(cluster_, 1);
  ASSERT_FALSE(on0.empty() || on1.empty());
  // The admin key's id: the caller part of its requests' key addresses.
  const std::string key_id = cluster_.admin_key().substr(3, 20);
  std::string key;
  std::string token;
  for (int i = 0; key.empty() || token.empty(); ++i) {
    const auto candidate = std::to_string(i);
    if (key.empty() &&
        on0.count(map.of_key({"default", key_id, "crash-" + candidate}))) {
      key = "crash-" + candidate;
    }
    if (token.empty() && on1.count(map.of_token(persistence::keys::token(
                             "default", "crash-tok-" + candidate)))) {
      token = "crash-tok-" + candidate;
    }
  }
  auto body = review("crash");
  body["hook"] = {{"token", token}};
  cluster_.stop(0);
  cluster_.start(0, {"DURIN_KILL_AT=gateway.after_key_marker:1"});
  ASSERT_TRUE(cluster_.wait_for_routing());
  auto lost = cluster_.client(0).post("/v1/runs", body, key);
  EXPECT_FALSE(lost.error.empty() && lost.status < 300) << lost.body;
  ASSERT_TRUE(cluster_.wait_killed(0));
  cluster_.start(0);
  ASSERT_TRUE(cluster_.wait_for_routing());
  // The retry through any node: the run the marker names, once.
  std::string id;
  for (int via = 0; via < 3; ++via) {
    auto again = cluster_.client(via).post("/v1/runs", body, key);
    ASSERT_EQ(again.status, 200u) << again.body;
    if (id.empty()) {
      id = again.value["id"];
    }
    EXPECT_EQ(again.value["id"], id);
  }
  auto listed = cluster_.client(2).get("/v1/runs?limit=100");
  ASSERT_EQ(listed.value["runs"].size(), 1u) << listed.body;
  EXPECT_EQ(listed.value["runs"][0]["id"], id);
}

TEST_F(ClusterTest, AKilledNodesShardsAnswer503AtOnceAndTheOthersServe) {
  const auto lost = shards_of(cluster_, 2);
  ASSERT_FALSE(lost.empty());
  // Acknowledged runs in every shard first, with their keys.
  std::map<std::string, std::string> acknowledged;  // key -> run id
  for (int i = 0; i < 40; ++i) {
    const auto key = "ack-" + std::to_string(i);
    auto got = cluster_.client(i % 2).post("/v1/runs", review(key), key);
    ASSERT_EQ(got.status, 200u) << got.body;
    acknowledged[key] = got.value["id"];
  }
  const auto killed_at = std::chrono::steady_clock::now();
  cluster_.kill9(2);
  // Within a second every request for a lost shard is a 503, never a hang.
  auto client = cluster_.client(0);
  bool all_503 = false;
  while (std::chrono::steady_clock::now() - killed_at < 1s && !all_503) {
    all_503 = true;
    for (const auto& [key, id] : acknowledged) {
      if (lost.count(shard_of_run(id, 8)) == 0) {
        continue;
      }
      auto got = client.get("/v1/runs/" + id);
      all_503 = all_503 && got.status == 503u;
    }
  }
  EXPECT_TRUE(all_503);
  for (const auto& [key, id] : acknowledged) {
    auto got = client.get("/v1/runs/" + id);
    if (lost.count(shard_of_run(id, 8)) != 0) {
      EXPECT_EQ(got.status, 503u) << got.body;
      EXPECT_TRUE(got.code() == "shard-unavailable" ||
                  got.code() == "peer-unreachable")
          << got.body;
    } else {
      EXPECT_EQ(got.status, 200u) << got.body;  // other shards unaffected
    }
  }
  // Once its lease is gone: shard-unavailable with the shard and a
  // Retry-After, and lists say which shards they lack.
  ASSERT_TRUE(eventually(
      [&] {
        auto got = client.get("/v1/runs/" + acknowledged.begin()->second);
        return lost.count(shard_of_run(acknowledged.begin()->second, 8)) == 0 ||
               got.code() == "shard-unavailable";
      },
      5s));
  // Every node's routing follows the watch: until the last has dropped the
  // dead node's lease keys, a list may still ask it (503).
  api_client::answer listed;
  EXPECT_TRUE(eventually(
      [&] {
        listed = client.get("/v1/runs?limit=100");
        return listed.status == 200u &&
               listed.value["unavailableShards"].size() == lost.size();
      },
      5s))
      << listed.status << " " << listed.body;
  // Restarted: every acknowledged run is there, every key replays.
  cluster_.start(2);
  ASSERT_TRUE(cluster_.wait_for_routing());
  auto replayer = cluster_.client(1);
  for (const auto& [key, id] : acknowledged) {
    // A node that has just rejoined may still be merging key tables
    // (503 keys-not-synced): a 503 is retried, never a wrong answer.
    api_client::answer again;
    eventually(
        [&] {
          again = replayer.post("/v1/runs", review(key), key);
          return again.status != 503u;
        },
        10s);
    ASSERT_EQ(again.status, 200u) << again.body;
    EXPECT_EQ(again.value["id"], id);
    EXPECT_EQ(again.value["status"], "completed");
  }
}

TEST_F(ClusterTest, APausedNodeGivesNo2xxAfterItsDeadlineAndServesAgainAfter) {
  const auto lost = shards_of(cluster_, 1);
  ASSERT_FALSE(lost.empty());
  auto direct = cluster_.client(1);
  auto before = direct.post("/v1/runs", review("before"));
  ASSERT_EQ(before.status, 200u);
  const auto epoch_before =
      cluster_.status(0)["shards"][*lost.begin()]["epoch"].get<std::uint64_t>();
  cluster_.pause(1);
  std::this_thread::sleep_for(3500ms);  // past the 2 s lease
  // Through the others: its shards answer 503, the rest serve.
  auto other = cluster_.client(0);
  for (int i = 0; i < 10; ++i) {
    auto got = other.post("/v1/runs", review("during"));
    EXPECT_TRUE(got.status == 200u || got.status == 503u) << got.body;
  }
  cluster_.resume(1);
  // At once after SIGCONT, the node itself serves none of its shards until
  // it has acquired them again: no 2xx from a stale lease.
  auto first = direct.get("/v1/runs/" + before.value["id"].get<std::string>());
  EXPECT_TRUE(first.status == 503u || first.status == 200u) << first.body;
  if (first.status == 200u) {
    // Acquired already: then at a higher epoch.
    EXPECT_GT(cluster_.status(0)["shards"][*lost.begin()]["epoch"]
                  .get<std::uint64_t>(),
              epoch_before);
  }
  ASSERT_TRUE(eventually(
      [&] {
        return direct.get("/v1/runs/" + before.value["id"].get<std::string>())
                   .status == 200u;
      },
      10s));
  EXPECT_GT(
      cluster_.status(0)["shards"][*lost.begin()]["epoch"].get<std::uint64_t>(),
      epoch_before);
}

// A forward its owner never answers (the owner's process paused, its
// lease still running) is answered 503 forward-outcome-unknown once
// --forward-timeout-ms has passed: not before, and before the peers'
// connection timeout (3 s without a heartbeat) would close the connection
// and answer it that way; counted as a forward timeout. The answer that
// comes after the owner resumes finds the forward settled and is dropped,
// and the run is served again.
TEST(ClusterForward, AForwardItsOwnerNeverAnswersFailsAtTheForwardTimeout) {
  cluster_setup setup;
  setup.nodes = 2;
  setup.lease_ttl_s = 10;  // the pause ends well within the owner's lease
  setup.flags = {"--forward-timeout-ms", "800"};
  cluster_harness cluster(setup);
  ASSERT_TRUE(cluster.wait_for_routing());
  const auto owned = shards_of(cluster, 1);
  ASSERT_FALSE(owned.empty());
  std::string id;
  for (int i = 0; i < 64 && id.empty(); ++i) {
    auto started =
        cluster.client(1).post("/v1/runs", review("fwd" + std::to_string(i)));
    ASSERT_EQ(started.status, 200u) << started.body;
    if (owned.count(shard_of_run(started.value["id"], 8)) != 0) {
      id = started.value["id"];
    }
  }
  ASSERT_FALSE(id.empty()) << "no run landed in a shard of node 1";
  auto via = cluster.client(0);
  ASSERT_EQ(via.get("/v1/runs/" + id).status, 200u);  // the peers connected
  const auto timed_out =
      cluster.metric(0, "durin_cluster_forward_timeouts_total");
  cluster.pause(1);
  const auto began = std::chrono::steady_clock::now();
  auto held = via.get("/v1/runs/" + id);
  const auto took = std::chrono::steady_clock::now() - began;
  cluster.resume(1);
  EXPECT_EQ(held.status, 503u) << held.body;
  EXPECT_EQ(held.value.value("code", ""), "forward-outcome-unknown")
      << held.body;
  EXPECT_GE(took, 800ms);
  EXPECT_LT(took, 2500ms);
  EXPECT_EQ(cluster.metric(0, "durin_cluster_forward_timeouts_total"),
            timed_out + 1);
  EXPECT_TRUE(eventually(
      [&] { return via.get("/v1/runs/" + id).status == 200u; }, 10s));
}

// A forwarded request whose route may block runs on the owner's peer
// workers; one that never blocks runs on the thread every peer message of
// the owner passes through (its middleman's). So a forward held up on the
// owner (here a list's page, held 5 s there: DURIN_TEST_HOLD_FORWARDED_MS)
// holds up no other forward to it: one sent once the page reached the
// owner, which would otherwise wait out most of the hold, is answered in
// well under half of it.
TEST(ClusterForward, AForwardThatBlocksHoldsUpNoOtherForward) {
  cluster_setup setup;
  setup.nodes = 2;
  setup.env = {"DURIN_TEST_HOLD_FORWARDED_MS=5000"};
  cluster_harness cluster(setup);
  ASSERT_TRUE(cluster.wait_for_routing());
  // A start without a token lives in a shard of the node it reached.
  auto started = cluster.client(1).post("/v1/runs", review("held-fwd"));
  ASSERT_EQ(started.status, 200u) << started.body;
  const std::string id = started.value["id"];
  auto via = cluster.client(0);
  ASSERT_EQ(via.get("/v1/runs/" + id).status, 200u);  // the peers connected
  const auto served = cluster.metric(1, "durin_cluster_forwards_served_total");
  std::atomic<bool> listed{false};
  auto list = std::async(std::launch::async, [&] {
    auto page = cluster.client(0).get("/v1/runs");
    listed = true;
    return page;
  });
  // Node 1 counts the page's forward as it arrives, then holds it.
  ASSERT_TRUE(eventually(
      [&] {
        return cluster.metric(1, "durin_cluster_forwards_served_total") >
               served;
      },
      4s));
  ASSERT_FALSE(listed.load()) << "the list's page was not held";
  const auto began = std::chrono::steady_clock::now();
  auto forwarded = via.get("/v1/runs/" + id);
  const auto took = std::chrono::steady_clock::now() - began;
  EXPECT_EQ(forwarded.status, 200u) << forwarded.body;
  EXPECT_LT(took, 2s) << "the forward waited for the held one";
  EXPECT_FALSE(listed.load()) << "the forward waited for the held one";
  auto page = list.get();
  ASSERT_EQ(page.status, 200u) << page.body;
  bool found = false;
  for (const auto& run : page.value["runs"]) {
    found = found || run.value("id", "") == id;
  }
  EXPECT_TRUE(found) << page.body;
}

// A node serves its shards only once it has acquired them and reopened
// their stores (about 0.1 s each here): until then /readyz answers 503
// naming the shards it does not serve yet, and the first 200 means every
// one of them serves. Seen where the port is known throughout: a node
// paused past its lease takes a new one, then its shards, once resumed.
TEST_F(ClusterTest, ANodeIsReadyOnlyOnceItServesItsShards) {
  const auto lost = shards_of(cluster_, 2);
  ASSERT_FALSE(lost.empty());
  std::map<std::uint32_t, std::string> run_in;  // shard -> a run of it
  for (int i = 0; run_in.size() < lost.size() && i < 400; ++i) {
    // A start without a token lives in a shard of the node it reached.
    auto got =
        cluster_.client(2).post("/v1/runs", review("r" + std::to_string(i)));
    ASSERT_EQ(got.status, 200u) << got.body;
    const std::string id = got.value["id"];
    if (lost.count(shard_of_run(id, 8)) != 0) {
      run_in.emplace(shard_of_run(id, 8), id);
    }
  }
  ASSERT_EQ(run_in.size(), lost.size());
  cluster_.pause(2);
  std::this_thread::sleep_for(3500ms);  // past the 2 s lease
  cluster_.resume(2);
  auto direct = cluster_.client(2);
  const auto deadline = std::chrono::steady_clock::now() + 15s;
  api_client::answer ready;
  int not_ready = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    ready = direct.get("/readyz");
    if (ready.status == 200u) {
      break;
    }
    ASSERT_EQ(ready.status, 503u) << ready.body;
    ++not_ready;
    if (ready.code() == "shards-not-acquired") {
      for (const auto& shard : ready.value["shards"]) {
        EXPECT_EQ(lost.count(shard.get<std::uint32_t>()), 1u) << ready.body;
      }
    } else {
      EXPECT_TRUE(ready.code() == "cluster-lease-lost" ||
                  ready.code() == "keys-not-synced")
          << ready.body;
    }
  }
  ASSERT_EQ(ready.status, 200u) << ready.body;
  // Ready: at once, every shard of the node answers through it.
  for (const auto& [shard, id] : run_in) {
    auto got = direct.get("/v1/runs/" + id);
    EXPECT_EQ(got.status, 200u) << "shard " << shard << " after " << not_ready
                                << " not-ready answers: " << got.body;
  }
}

// An owner whose data directory was deleted (one copy per shard here, so
// no other copy holds the shards' runs) does not serve its shards empty:
// that would answer every acknowledged run 404 and a retried keyed start
// with a second run. It refuses them, past two lease lengths and a
// restart, /readyz names them, until the operator accepts the loss, shard
// by shard; then they serve, without the runs that were lost.
TEST_F(
    ClusterTest,
    AnOwnerWhoseDataDirectoryWasDeletedServesNoShardEmptyUntilItsLossIsAccepted) {
  const auto lost = shards_of(cluster_, 2);
  ASSERT_FALSE(lost.empty());
  std::map<std::string, std::string> gone;  // key -> run id, in `lost`
  std::map<std::string, std::string> kept;  // in the other shards
  for (int i = 0; i < 40; ++i) {
    const auto key = "loss-" + std::to_string(i);
    auto got = cluster_.client(i % 2).post("/v1/runs", review(key), key);
    ASSERT_EQ(got.status, 200u) << got.body;
    const std::string id = got.value["id"];
    (lost.count(shard_of_run(id, 8)) != 0 ? gone : kept)[key] = id;
  }
  ASSERT_FALSE(gone.empty());
  cluster_.kill9(2);
  std::filesystem::remove_all(cluster_.data_dir(2));
  cluster_.start(2);
  // Its address changes with each restart.
  auto ready_of = [&] { return cluster_.client(2).get("/readyz"); };
  auto refused = [&] {
    auto ready = ready_of();
    std::set<std::uint32_t> named;
    for (const auto& shard : ready.value["shards"]) {
      named.insert(shard.get<std::uint32_t>());
    }
    return ready.status == 503u && ready.code() == "shard-copies-lost" &&
           named == lost;
  };
  ASSERT_TRUE(eventually(refused, 15s)) << ready_of().body;
  auto expect_refused = [&] {
    EXPECT_TRUE(refused()) << ready_of().body;
    EXPECT_EQ(cluster_.metric(2, "durin_cluster_shard_copies_lost"),
              lost.size());
    EXPECT_EQ(cluster_.status(2)["selfCopiesLost"].size(), lost.size());
    auto other = cluster_.client(0);
    for (const auto& [key, id] : gone) {
      auto read = other.get("/v1/runs/" + id);
      EXPECT_EQ(read.status, 503u) << read.body;
      auto again = other.post("/v1/runs", review(key), key);
      EXPECT_EQ(again.status, 503u) << again.body;  // never a second run
    }
    for (const auto& [key, id] : kept) {
      EXPECT_EQ(other.get("/v1/runs/" + id).status, 200u);
    }
  };
  expect_refused();
  std::this_thread::sleep_for(4500ms);  // past two lease lengths (2 s)
  expect_refused();
  cluster_.restart(2);
  ASSERT_TRUE(eventually(refused, 15s)) << ready_of().body;
  // The operator's way out: refused for a shard served now or none such.
  const std::vector<std::string> where = {"--etcd", cluster_.etcd_endpoints(),
                                          "--cluster", cluster_.name()};
  auto accept = [&](const std::string& shard, std::string* said) {
    std::vector<std::string> args = {"cluster", "accept-loss", shard,
                                     "--timeout-s", "20"};
    args.insert(args.end(), where.begin(), where.end());
    return cluster_harness::run_cli(args, said);
  };
  std::string said;
  std::uint32_t served = 0;
  while (lost.count(served) != 0) {
    ++served;
  }
  EXPECT_EQ(accept(std::to_string(served), &said), 1) << said;
  EXPECT_NE(said.find("nothing of it is lost"), std::string::npos) << said;
  EXPECT_EQ(accept("99", &said), 1) << said;
  EXPECT_NE(said.find("shard 99 does not exist"), std::string::npos) << said;
  for (const auto shard : lost) {
    ASSERT_EQ(accept(std::to_string(shard), &said), 0) << said;
    EXPECT_NE(said.find("served by n2"), std::string::npos) << said;
  }
  ASSERT_TRUE(eventually([&] { return ready_of().status == 200u; }, 15s))
      << ready_of().body;
  EXPECT_EQ(cluster_.metric(2, "durin_cluster_shard_copies_lost"), 0u);
  auto other = cluster_.client(0);
  for (const auto& [key, id] : gone) {
    auto read = other.get("/v1/runs/" + id);
    EXPECT_EQ(read.status, 404u) << read.body;
  }
  for (const auto& [key, id] : kept) {
    auto again = other.post("/v1/runs", review(key), key);
    ASSERT_EQ(again.status, 200u) << again.body;
    EXPECT_EQ(again.value["id"], id);
  }
  // Marked again: a plain restart serves the shards at once.
  cluster_.restart(2);
  ASSERT_TRUE(cluster_.wait_for_routing());
  EXPECT_TRUE(eventually([&] { return ready_of().status == 200u; }, 15s))
      << ready_of().body;
}

TEST_F(ClusterTest,
       EtcdLostNodesFailClosedAtTheirDeadlineAndRecoverByThemselves) {
  auto client = cluster_.client(0);
  ASSERT_EQ(client.post("/v1/runs", review("before")).status, 200u);
  cluster_.etcd().kill();
  std::this_thread::sleep_for(2500ms);  // past every node's deadline
  for (int via = 0; via < 3; ++via) {
    auto node = cluster_.client(via);
    auto got = node.post("/v1/runs", review("during"));
    EXPECT_EQ(got.status, 503u) << got.body;
    EXPECT_EQ(node.get("/readyz").status, 503u);
  }
  cluster_.etcd().restart();
  ASSERT_TRUE(eventually(
      [&] {
        for (int via = 0; via < 3; ++via) {
          if (cluster_.client(via).post("/v1/runs", review("after")).status !=
              200u) {
            return false;
          }
        }
        return true;
      },
      20s));
  EXPECT_TRUE(
      eventually([&] { return client.get("/readyz").status == 200u; }, 10s));
}

TEST_F(ClusterTest, AMoveAndADrainUnderLoadLoseNoAcknowledgedWrite) {
  // Keyed starts through two nodes all along; a 503 (a shard moving) is
  // retried with the same key until answered.
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::map<std::string, std::string> acknowledged;  // key -> run id
  auto load = [&](int via, int offset) {
    auto client = cluster_.client(via);
    for (int i = offset; !stop; i += 2) {
      const auto key = "load-" + std::to_string(i);
      for (int attempt = 0; attempt < 400 && !stop; ++attempt) {
        auto got = client.post("/v1/runs", review(key), key);
        if (got.status == 200u) {
          std::lock_guard lock(mutex);
          acknowledged[key] = got.value["id"];
          break;
        }
        EXPECT_TRUE(got.status == 503u ||
                    got.code() == "idempotency-key-in-flight")
            << got.status << " " << got.body;
        std::this_thread::sleep_for(20ms);
      }
    }
  };
  std::thread first(load, 0, 0);
  std::thread second(load, 1, 1);
  std::this_thread::sleep_for(500ms);
  const auto moved = *shards_of(cluster_, 2).begin();
  const auto epoch_before =
      cluster_.status(0)["shards"][moved]["epoch"].get<std::uint64_t>();
  std::string output;
  const auto etcd = cluster_.etcd().endpoint();
  ASSERT_EQ(
      cluster_harness::run_cli({"cluster", "move", std::to_string(moved),
                                "--to", cluster_harness::node_id(0), "--etcd",
                                etcd, "--cluster", cluster_.name()},
                               &output),
      0)
      << output;
  ASSERT_EQ(
      cluster_harness::run_cli({"cluster", "drain", cluster_harness::node_id(2),
                                "--etcd", etcd, "--cluster", cluster_.name()},
                               &output),
      0)
      << output;
  std::this_thread::sleep_for(300ms);
  stop = true;
  first.join();
  second.join();
  EXPECT_TRUE(shards_of(cluster_, 2).empty());
  EXPECT_EQ(cluster_.owner_of(moved), 0);
  EXPECT_GT(cluster_.status(0)["shards"][moved]["epoch"].get<std::uint64_t>(),
            epoch_before);
  ASSERT_GT(acknowledged.size(), 10u);
  // The CLI returns once etcd names the new owners; their stores may still
  // be opening.
  ASSERT_TRUE(cluster_.wait_for_routing());
  // Every acknowledged start is there and replays, through any node.
  int via = 0;
  for (const auto& [key, id] : acknowledged) {
    auto again = cluster_.client(via++ % 3).post("/v1/runs", review(key), key);
    ASSERT_EQ(again.status, 200u) << again.body;
    EXPECT_EQ(again.value["id"], id);
    EXPECT_EQ(again.value["status"], "completed");
  }
}

}  // namespace
}  // namespace durin::testing
