// Goal: API keys and tenants work cluster-wide (gateway/key_sync.hpp). A
// key created through any node authenticates on every node once the create
// has answered; a key revoked through any node is refused on every node
// once the DELETE has answered, though each node caches verified keys; a
// tenant made through one node works on the others; a node that was down
// while keys changed knows every change once it serves again; a change
// that cannot reach a live node answers 503 keys-not-propagated within its
// deadline, and its retry with the same Idempotency-Key converges. Method:
// real etcd and three real `durin serve --etcd` nodes on loopback, real
// SIGTERM and SIGSTOP (tests/support/cluster_harness.hpp); every check is
// made at once after the answer. A node whose lease lapsed (a paused node,
// or any node on a loaded machine) refuses with 503 keys-not-synced until
// it has merged the others' tables again: that is waited out, but a key
// taken for unknown (401) after its create, or accepted after its
// revocation, fails at once.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "services/shard_map.hpp"
#include "tests/support/cluster_harness.hpp"

namespace durin::testing {
namespace {

using namespace std::chrono_literals;

class KeySyncTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(cluster_.wait_for_routing()); }

  // A client of node `i` with `secret`.
  api_client as(int i, const std::string& secret) {
    return api_client(cluster_.node(i).address(), secret);
  }

  // `send` again while it answers 503 keys-not-synced (the node is
  // merging key tables after its lease lapsed), for at most 15 s.
  template <class Send>
  static api_client::answer in_step(Send send) {
    const auto until = std::chrono::steady_clock::now() + 15s;
    for (;;) {
      auto answer = send();
      if (answer.code() != "keys-not-synced" ||
          std::chrono::steady_clock::now() >= until) {
        return answer;
      }
      std::this_thread::sleep_for(20ms);
    }
  }

  // GET /v1/runs with `secret` through node `i`: 200 for a live key, 401
  // for an unknown or revoked one.
  unsigned probe(int i, const std::string& secret) {
    auto client = as(i, secret);
    // A list through a node that has just (re)joined may meet a shard still
    // being acquired (503): not an answer about the key, so asked again.
    const auto until = std::chrono::steady_clock::now() + 15s;
    for (;;) {
      auto answer = in_step([&] { return client.get("/v1/runs?limit=1"); });
      if (answer.status != 503u || std::chrono::steady_clock::now() >= until) {
        return answer.status;
      }
      std::this_thread::sleep_for(20ms);
    }
  }

  // The live keys named `name` that node `i` lists for the admin's tenant.
  int listed(int i, const std::string& name) {
    auto client = cluster_.client(i);
    auto keys = in_step([&] { return client.get("/v1/api-keys"); });
    int count = 0;
    for (const auto& key : keys.value["apiKeys"]) {
      count += key["name"] == name ? 1 : 0;
    }
    return count;
  }

  cluster_harness cluster_;
};

TEST_F(KeySyncTest,
       AKeyCreatedThroughAnyNodeAuthenticatesOnEveryNodeOnceTheCreateAnswered) {
  auto admin = cluster_.client(0);
  auto made = in_step([&] {
    return admin.post("/v1/api-keys", {{"name", "plain"}});
  });
  ASSERT_EQ(made.status, 201u) << made.body;
  const std::string secret = made.value["secret"];
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(probe(i, secret), 200u) << "node " << i;
  }
  // Keyed creates are made where their key's record lives (forwarded
  // there from the node they entered): their keys too reach every node,
  // and a replay makes no second key.
  for (int round = 0; round < 6; ++round) {
    const auto key = "create-" + std::to_string(round);
    auto via = cluster_.client(round % 3);
    auto keyed = in_step([&] {
      return via.post("/v1/api-keys", {{"name", "keyed"}}, key);
    });
    ASSERT_EQ(keyed.status, 201u) << keyed.body;
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(probe(i, keyed.value["secret"]), 200u)
          << "round " << round << ", node " << i;
    }
    auto other = cluster_.client((round + 1) % 3);
    auto again = in_step([&] {
      return other.post("/v1/api-keys", {{"name", "keyed"}}, key);
    });
    EXPECT_EQ(again.code(), "idempotency-key-replay-withheld") << again.body;
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(listed(i, "keyed"), 6) << "node " << i;
  }
}

TEST_F(KeySyncTest,
       AKeyRevokedThroughAnyNodeIsRefusedOnEveryNodeOnceTheDeleteAnswered) {
  auto admin = cluster_.client(0);
  auto made = in_step([&] {
    return admin.post("/v1/api-keys", {{"name", "doomed"}});
  });
  ASSERT_EQ(made.status, 201u) << made.body;
  const std::string secret = made.value["secret"];
  const std::string id = made.value["id"];
  for (int round = 0; round < 3; ++round) {  // every node caches it
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(probe(i, secret), 200u) << "node " << i;
    }
  }
  auto via_2 = cluster_.client(2);
  auto revoked =
      in_step([&] { return via_2.send("DELETE", "/v1/api-keys/" + id); });
  ASSERT_EQ(revoked.status, 200u) << revoked.body;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(probe(i, secret), 401u) << "node " << i;
    EXPECT_EQ(listed(i, "doomed"), 0) << "node " << i;
  }
  // Revoking again is the same revocation (a retry converges).
  auto via_1 = cluster_.client(1);
  auto again =
      in_step([&] { return via_1.send("DELETE", "/v1/api-keys/" + id); });
  EXPECT_EQ(again.status, 200u) << again.body;
  EXPECT_EQ(probe(0, secret), 401u);
}

// `durin admin reset-key` on a stopped node's data dir makes a new admin
// key in that node's store; the node's next join sends its table to every
// live node, so the key works everywhere once the node serves again.
TEST_F(KeySyncTest,
       AnAdminKeyResetOnAStoppedNodeWorksOnEveryNodeOnceItRejoined) {
  cluster_.stop(2);
  std::string said;
  ASSERT_EQ(
      cluster_harness::run_cli(
          {"admin", "reset-key", "--data-dir", cluster_.data_dir(2)}, &said),
      0)
      << said;
  std::string secret;
  {
    std::ifstream key_file(cluster_.data_dir(2) + "/admin.key");
    std::getline(key_file, secret);
  }
  ASSERT_FALSE(secret.empty());
  ASSERT_NE(secret, cluster_.admin_key());
  EXPECT_EQ(probe(0, secret), 401u);  // known only to node 2's store yet
  cluster_.start(2);
  ASSERT_TRUE(cluster_.wait_for_routing());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(probe(i, secret), 200u) << "node " << i;
  }
  EXPECT_EQ(probe(2, cluster_.admin_key()), 200u);  // the old one stays
}

TEST_F(KeySyncTest, ATenantCreatedThroughOneNodeWorksOnEveryNode) {
  auto admin = cluster_.client(1);
  auto tenant = in_step([&] {
    return admin.post("/v1/tenants", {{"name", "acme"}});
  });
  ASSERT_EQ(tenant.status, 201u) << tenant.body;
  const std::string first = tenant.value["apiKey"]["secret"];
  for (int i = 0; i < 3; ++i) {
    auto client = as(i, first);
    auto runs = in_step([&] { return client.get("/v1/runs"); });
    EXPECT_EQ(runs.status, 200u) << "node " << i << ": " << runs.body;
    EXPECT_EQ(runs.value["runs"].size(), 0u);  // none of tenant default's
  }
  // Its key makes keys of the tenant through another node.
  auto on_2 = as(2, first);
  auto more = in_step([&] {
    return on_2.post("/v1/api-keys", {{"name", "second"}});
  });
  ASSERT_EQ(more.status, 201u) << more.body;
  EXPECT_EQ(probe(0, more.value["secret"]), 200u);
  auto on_0 = as(0, first);
  auto listed_on_0 = in_step([&] { return on_0.get("/v1/api-keys"); });
  EXPECT_EQ(listed_on_0.value["apiKeys"].size(), 2u) << listed_on_0.body;
}

TEST_F(KeySyncTest, InternalRoutesAreNotFoundForClients) {
  const json records = {{"tenants", json::array()}, {"apiKeys", json::array()}};
  for (const auto* route :
       {"/v1/internal/key-records", "/v1/internal/key-table"}) {
    auto admin = cluster_.client(0).post(route, records);
    EXPECT_EQ(admin.status, 404u) << route << ": " << admin.body;
    auto anonymous =
        api_client(cluster_.node(0).address(), "").post(route, records);
    EXPECT_EQ(anonymous.status, 401u) << route << ": " << anonymous.body;
  }
}

TEST_F(
    KeySyncTest,
    ANodeRestartedAfterAKeyWasCreatedAndAnotherRevokedKnowsBothOnceItServes) {
  auto via_0 = cluster_.client(0);
  auto old_key = in_step([&] {
    return via_0.post("/v1/api-keys", {{"name", "old"}});
  });
  ASSERT_EQ(old_key.status, 201u) << old_key.body;
  const std::string old_secret = old_key.value["secret"];
  ASSERT_EQ(probe(2, old_secret), 200u);
  ASSERT_EQ(cluster_.node(2).terminate(), 0);
  // Once the others' routing has dropped it, changes answer without it.
  ASSERT_TRUE(eventually(
      [&] {
        for (int i = 0; i < 2; ++i) {
          auto view = cluster_.status(i);
          if (!view.is_object() || view["nodes"].size() != 2u) {
            return false;
          }
        }
        return true;
      },
      10s));
  auto new_key = in_step([&] {
    return via_0.post("/v1/api-keys", {{"name", "new"}});
  });
  ASSERT_EQ(new_key.status, 201u) << new_key.body;
  auto via_1 = cluster_.client(1);
  const std::string old_id = old_key.value["id"];
  auto revoked =
      in_step([&] { return via_1.send("DELETE", "/v1/api-keys/" + old_id); });
  ASSERT_EQ(revoked.status, 200u) << revoked.body;
  cluster_.start(2);  // returns once it says it listens
  EXPECT_EQ(probe(2, new_key.value["secret"]), 200u);
  EXPECT_EQ(probe(2, old_secret), 401u);
  EXPECT_EQ(listed(2, "old"), 0);
}

TEST_F(KeySyncTest, ANodePausedPastItsLeaseAcceptsNoKeyRevokedMeanwhile) {
  auto via_0 = cluster_.client(0);
  auto made = in_step([&] {
    return via_0.post("/v1/api-keys", {{"name", "stale"}});
  });
  ASSERT_EQ(made.status, 201u) << made.body;
  const std::string secret = made.value["secret"];
  const std::string id = made.value["id"];
  ASSERT_EQ(probe(1, secret), 200u);  // cached there now
  cluster_.pause(1);
  // Once its lease is gone from etcd, the others no longer send it changes.
  ASSERT_TRUE(eventually(
      [&] {
        auto view = cluster_.status(0);
        return view.is_object() && view["nodes"].size() == 2u;
      },
      10s));
  auto revoked =
      in_step([&] { return via_0.send("DELETE", "/v1/api-keys/" + id); });
  ASSERT_EQ(revoked.status, 200u) << revoked.body;
  // Sent while it is stopped, read the moment it runs again: before it has
  // heard from etcd that its lease is gone.
  auto stale = std::async(std::launch::async, [&] {
    return as(1, secret).get("/v1/runs?limit=1");
  });
  std::this_thread::sleep_for(200ms);
  cluster_.resume(1);
  auto first = stale.get();
  EXPECT_EQ(first.status, 503u) << first.body;
  EXPECT_EQ(first.code(), "keys-not-synced") << first.body;
  EXPECT_EQ(probe(1, secret), 401u);
}

TEST_F(
    KeySyncTest,
    ACreateWhileANodeIsPausedAnswers503InTimeAndItsRetryConvergesEverywhere) {
  // A key whose record lives on node 0 (not forwarded to the paused node).
  const auto& secret_0 = cluster_.admin_key();
  const auto admin_id = secret_0.substr(3, secret_0.find('_', 7) - 3);
  std::string idempotency_key;
  for (int i = 0; idempotency_key.empty() && i < 100; ++i) {
    const auto candidate = "while-paused-" + std::to_string(i);
    if (cluster_.owner_of(services::shard_map(8).of_key(
            {"default", admin_id, candidate})) == 0) {
      idempotency_key = candidate;
    }
  }
  ASSERT_FALSE(idempotency_key.empty());
  cluster_.pause(1);
  const auto sent = std::chrono::steady_clock::now();
  auto via_0 = cluster_.client(0);
  auto first = in_step([&] {
    return via_0.post("/v1/api-keys", {{"name", "paused"}}, idempotency_key);
  });
  const auto took = std::chrono::steady_clock::now() - sent;
  EXPECT_EQ(first.status, 503u) << first.body;
  EXPECT_EQ(first.code(), "keys-not-propagated") << first.body;
  EXPECT_FALSE(first.value.contains("secret")) << first.body;
  EXPECT_EQ(first.value["missingNodes"], json::array({"n1"})) << first.body;
  // The 5 s deadline, then at most 1 s to withdraw the key.
  EXPECT_LT(took, 7500ms);
  EXPECT_EQ(listed(0, "paused"), 0);  // withdrawn
  cluster_.resume(1);
  auto retry = in_step([&] {
    return via_0.post("/v1/api-keys", {{"name", "paused"}}, idempotency_key);
  });
  ASSERT_EQ(retry.status, 201u) << retry.body;
  const std::string secret = retry.value["secret"];
  EXPECT_EQ(probe(0, secret), 200u);
  EXPECT_EQ(probe(2, secret), 200u);
  EXPECT_EQ(listed(0, "paused"), 1);
  EXPECT_EQ(listed(2, "paused"), 1);
  // The paused node lost its lease: it refuses (503) until it has merged
  // the others' tables, and never takes the key for unknown.
  EXPECT_EQ(probe(1, secret), 200u);
  EXPECT_TRUE(eventually([&] { return listed(1, "paused") == 1; }, 5s));
}

}  // namespace
}  // namespace durin::testing
