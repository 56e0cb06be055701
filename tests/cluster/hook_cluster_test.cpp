// Goal: a flow's hook on a token whose shard another node serves keeps every
// rule of one node (issue 13, rule 4): one owner cluster-wide, resumes
// through any node read in the order they were answered, force-claim and
// retention as on one node.
// Method: a real 3-node cluster (tests/support/cluster_harness.hpp); each
// acme.order-notes run is started through a node that does not serve its
// token's shard (plain starts stay on the node they reach), so its claim,
// its payloads and its end travel between nodes as hook mail.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>

#include "persistence/keys.hpp"
#include "services/shard_map.hpp"
#include "tests/support/cluster_harness.hpp"

namespace durin::testing {
namespace {

class HookClusterTest : public ::testing::Test {
 protected:
  explicit HookClusterTest(cluster_setup setup = {}) : cluster_(setup) {}

  void SetUp() override { ASSERT_TRUE(cluster_.wait_for_routing()); }

  // The node serving the shard of order `id`'s hook token, asked of `via`.
  int token_node(const std::string& id, int via = 0) {
    auto address = persistence::keys::token("default", "order:" + id);
    return cluster_.owner_of(services::shard_map(8).of_token(address), via);
  }

  // The node serving run `run_id`'s shard (its last two characters), asked
  // of `via`.
  int run_node(const std::string& run_id, int via = 0) {
    static const std::string digits = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    auto at = [&](std::size_t from_end) {
      return static_cast<std::uint32_t>(
          digits.find(run_id[run_id.size() - from_end]));
    };
    return cluster_.owner_of(at(2) * 32 + at(1), via);
  }

  // A waited start (200) by default; else answered at once (202).
  std::string start(int via, json input, bool wait = true) {
    auto started = cluster_.client(via).post(
        "/v1/runs",
        {{"flow", "acme.order-notes"}, {"input", input}, {"wait", wait}});
    EXPECT_EQ(started.status, wait ? 200u : 202u) << started.body;
    return started.value.value("id", "");
  }

  // Waits until the order's hook is held (active) by `run_id`, read through
  // node `via`.
  bool owned_by(int via, const std::string& id, const std::string& run_id) {
    return eventually(
        [&] {
          auto hook = cluster_.client(via).get("/v1/hooks/order:" + id);
          return hook.status == 200 &&
                 hook.value.value("runId", "") == run_id &&
                 hook.value.value("state", "") == "active";
        },
        std::chrono::seconds(20));
  }

  api_client::answer resume(int via, const std::string& id, json note) {
    return cluster_.client(via).post("/v1/hooks/order:" + id + "/resume",
                                     {{"payload", std::move(note)}});
  }

  // Waits until run `run_id` waits on its hook's next payload, having
  // subscribed: its subscription (sent before the run records itself
  // waiting) is then taken by the token's node well within the pause, so a
  // payload resumed after is pushed to the run, not read by that scan.
  bool reading(const std::string& run_id) {
    auto reader = cluster_.client(0);
    bool waits = eventually(
        [&] {
          auto run = reader.get("/v1/runs/" + run_id);
          return run.value.value("status", "") == "waiting";
        },
        std::chrono::seconds(20));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return waits;
  }

  // Resumes notes n1..n`count` (the last one done) through nodes n % 3 in
  // turn, each answered (once durable) as resumed to `owner`.
  void resume_notes(const std::string& id, int count,
                    const std::string& owner) {
    for (int n = 1; n <= count; ++n) {
      json note = {{"note", "n" + std::to_string(n)}};
      if (n == count) {
        note["done"] = true;
      }
      auto answered = resume(n % 3, id, note);
      ASSERT_EQ(answered.status, 200u) << answered.body;
      EXPECT_EQ(answered.value.value("runId", ""), owner) << answered.body;
    }
  }

  std::string fresh_id(const std::string& prefix) {
    return prefix + std::to_string(std::random_device{}());
  }

  cluster_harness cluster_;
};

TEST_F(HookClusterTest,
       AHookOnATokenOfAnotherNodeHasOneOwnerAndReadsResumesInOrder) {
  for (int round = 0; round < 3; ++round) {
    auto id = fresh_id("remote-" + std::to_string(round) + "-");
    const int home = token_node(id);
    ASSERT_GE(home, 0);
    const int via = (home + 1 + round % 2) % 3;
    auto first = start(via, {{"orderId", id}, {"note", "n0"}});
    ASSERT_FALSE(first.empty());
    ASSERT_NE(run_node(first), home) << "the run must live on another node";
    ASSERT_TRUE(owned_by(round % 3, id, first));
    // A second claim of the token, from a run on the third node, meets the
    // first owner.
    auto second = start(3 - home - via, {{"orderId", id}, {"note", "x"}});
    auto reader = cluster_.client(0);
    auto duplicate = wait_run(reader, second);
    EXPECT_EQ(duplicate["output"],
              json({{"orderId", id}, {"duplicateOf", first}}))
        << duplicate.dump();
    // Resumes through every node, each answered once durable: read in the
    // order answered.
    ASSERT_NO_FATAL_FAILURE(resume_notes(id, 6, first));
    auto done = wait_run(reader, first);
    EXPECT_EQ(done["status"], "completed") << done.dump();
    EXPECT_EQ(done["output"]["notes"],
              json({"n0", "n1", "n2", "n3", "n4", "n5", "n6"}))
        << done.dump();
    // The owner's end reached the token's node: the token is free again.
    EXPECT_TRUE(eventually(
        [&] {
          return cluster_.client(home).get("/v1/hooks/order:" + id).status ==
                 404;
        },
        std::chrono::seconds(10)));
  }
}

TEST_F(HookClusterTest,
       ForceClaimAndRetentionOfATokenOfAnotherNodeBehaveAsOnOneNode) {
  auto id = fresh_id("forced-");
  const int home = token_node(id);
  ASSERT_GE(home, 0);
  const int a_node = (home + 1) % 3;
  const int b_node = (home + 2) % 3;
  auto a = start(a_node, {{"orderId", id}, {"note", "a0"}});
  ASSERT_NE(run_node(a), home);
  ASSERT_TRUE(owned_by(b_node, id, a));
  auto early = resume(home, id, {{"note", "a1"}});
  ASSERT_EQ(early.status, 200u) << early.body;
  EXPECT_EQ(early.value.value("runId", ""), a);
  // B, on the third node, takes the token: A reads what was resumed to it
  // before, then fails with the force-claim.
  auto b = start(
      b_node,
      {{"orderId", id}, {"note", "b0"}, {"force", true}, {"retainMs", 4000}});
  ASSERT_NE(run_node(b), home);
  ASSERT_TRUE(owned_by(a_node, id, b));
  auto reader = cluster_.client(home);
  auto lost = wait_run(reader, a);
  EXPECT_EQ(lost["status"], "failed") << lost.dump();
  EXPECT_EQ(lost["error"]["message"],
            "the hook's token was force-claimed by run " + b)
      << lost.dump();
  auto history = reader.get("/v1/runs/" + a + "/history");
  ASSERT_EQ(history.status, 200u) << history.body;
  EXPECT_NE(history.body.find("\"a1\""), std::string::npos)
      << "A read the payload resumed to it before: " << history.body;
  auto to_b = resume(a_node, id, {{"note", "b1"}, {"done", true}});
  ASSERT_EQ(to_b.status, 200u) << to_b.body;
  EXPECT_EQ(to_b.value.value("runId", ""), b);
  auto b_done = wait_run(reader, b);
  EXPECT_EQ(b_done["output"]["notes"], json({"b0", "b1"})) << b_done.dump();
  // B ended on its node; its token's node keeps the token for B's
  // retention: a new claim meets B until then, and succeeds after.
  EXPECT_TRUE(eventually(
      [&] {
        auto hook = cluster_.client(a_node).get("/v1/hooks/order:" + id);
        return hook.value.value("state", "") == "retained" &&
               hook.value.value("runId", "") == b;
      },
      std::chrono::seconds(10)));
  auto c = start(a_node, {{"orderId", id}, {"note", "c0"}});
  auto c_done = wait_run(reader, c);
  EXPECT_EQ(c_done["output"], json({{"orderId", id}, {"duplicateOf", b}}))
      << c_done.dump();
  EXPECT_TRUE(eventually(
      [&] {
        return cluster_.client(b_node).get("/v1/hooks/order:" + id).status ==
               404;
      },
      std::chrono::seconds(10)));
  auto d = start(b_node, {{"orderId", id}, {"note", "d0"}});
  ASSERT_TRUE(owned_by(home, id, d));
  auto to_d = resume(b_node, id, {{"note", "d1"}, {"done", true}});
  ASSERT_EQ(to_d.status, 200u) << to_d.body;
  auto d_done = wait_run(reader, d);
  EXPECT_EQ(d_done["output"]["notes"], json({"d0", "d1"})) << d_done.dump();
}

// The token's node is killed (kill -9) while a run on another node waits on
// its hook: every resume acknowledged before the kill is read after the
// restart, none twice, and a claim sent while the node is down is taken once
// it is back (the run's node retries its mail and asks again).
TEST_F(
    HookClusterTest,
    ARunWaitingOnATokenOfAKilledNodeReadsEveryAcknowledgedResumeAfterItsRestart) {
  auto id = fresh_id("killed-");
  const int home = token_node(id);
  ASSERT_GE(home, 0);
  const int other = (home + 1) % 3;
  auto run = start(other, {{"orderId", id}, {"note", "n0"}});
  ASSERT_NE(run_node(run), home);
  ASSERT_TRUE(owned_by(other, id, run));
  ASSERT_TRUE(reading(run));
  // Acknowledged, so durable in the token's inbox; its push to the run may
  // or may not leave the node before the kill.
  // Another token of the dead node's shards, claimed while it is down.
  std::string later = fresh_id("later-");
  for (int draw = 0; draw < 200 && token_node(later) != home; ++draw) {
    later = fresh_id("later-");
  }
  ASSERT_EQ(token_node(later), home);
  auto acknowledged = resume(other, id, {{"note", "n1"}});
  ASSERT_EQ(acknowledged.status, 200u) << acknowledged.body;
  cluster_.kill9(home);
  // While the token's node is down its hook answers 503, never a 2xx.
  auto refused = resume(other, id, {{"note", "never"}});
  EXPECT_EQ(refused.status, 503u) << refused.body;
  // Sent now, taken once the node is back.
  auto late = start(other, {{"orderId", later}, {"note", "l0"}}, false);
  ASSERT_FALSE(late.empty());
  ASSERT_EQ(run_node(late, other), other);

  cluster_.start(home);
  ASSERT_TRUE(cluster_.wait_for_routing());
  ASSERT_TRUE(owned_by(other, id, run));
  ASSERT_TRUE(owned_by(other, later, late));
  auto resume_done = [&](const std::string& order, const std::string& note) {
    api_client::answer answered;
    EXPECT_TRUE(eventually(
        [&] {
          answered =
              resume((home + 2) % 3, order, {{"note", note}, {"done", true}});
          return answered.status != 503u;
        },
        std::chrono::seconds(10)));
    return answered;
  };
  auto last = resume_done(id, "n2");
  ASSERT_EQ(last.status, 200u) << last.body;
  EXPECT_EQ(last.value.value("runId", ""), run);
  auto reader = cluster_.client(other);
  auto done = wait_run(reader, run);
  EXPECT_EQ(done["status"], "completed") << done.dump();
  EXPECT_EQ(done["output"]["notes"], json({"n0", "n1", "n2"})) << done.dump();
  auto late_last = resume_done(later, "l1");
  ASSERT_EQ(late_last.status, 200u) << late_last.body;
  auto late_done = wait_run(reader, late);
  EXPECT_EQ(late_done["output"]["notes"], json({"l0", "l1"}))
      << late_done.dump();
}

// Every node loses its first payload pushed to a run on another node
// (DURIN_FAIL_AT, persistence/test_points.hpp): what a restart of the
// token's node does to mail not yet sent.
class HookClusterLossTest : public HookClusterTest {
 protected:
  static cluster_setup lossy() {
    cluster_setup setup;
    setup.env = {"DURIN_FAIL_AT=token.remote_payload_push:1"};
    return setup;
  }
  HookClusterLossTest() : HookClusterTest(lossy()) {}
};

TEST_F(HookClusterLossTest,
       APayloadPushLostBetweenNodesIsReadInOrderAndWithoutANewResume) {
  // A gap: the payload after a lost one is pushed; the run reads the lost
  // one first (from the token's inbox), then it.
  auto id = fresh_id("gap-");
  const int home = token_node(id);
  ASSERT_GE(home, 0);
  auto run = start((home + 1) % 3, {{"orderId", id}, {"note", "n0"}});
  ASSERT_NE(run_node(run), home);
  ASSERT_TRUE(owned_by(home, id, run));
  ASSERT_TRUE(reading(run));
  ASSERT_NO_FATAL_FAILURE(resume_notes(id, 3, run));
  auto reader = cluster_.client(0);
  // Read at once, not by the run's asking again (every 2 s) alone.
  auto done = wait_run(reader, run, std::chrono::seconds(2));
  EXPECT_EQ(done["output"]["notes"], json({"n0", "n1", "n2", "n3"}))
      << done.dump();

  // No payload after: a run waiting on another node's token asks again
  // (every 2 s), and reads the lost one without any new resume.
  // On another token node: the first node lost its one push already.
  std::string other = fresh_id("quiet-");
  for (int draw = 0; draw < 100 && token_node(other) == home; ++draw) {
    other = fresh_id("quiet-");
  }
  const int other_home = token_node(other);
  ASSERT_GE(other_home, 0);
  ASSERT_NE(other_home, home);
  auto waiting = start((other_home + 1) % 3, {{"orderId", other}});
  ASSERT_TRUE(owned_by(other_home, other, waiting));
  ASSERT_TRUE(reading(waiting));
  auto last = resume(other_home, other, {{"note", "last"}, {"done", true}});
  ASSERT_EQ(last.status, 200u) << last.body;
  auto quiet = wait_run(reader, waiting, std::chrono::seconds(10));
  EXPECT_EQ(quiet["status"], "completed") << quiet.dump();
  EXPECT_EQ(quiet["output"]["notes"], json({"", "last"})) << quiet.dump();
}

}  // namespace
}  // namespace durin::testing
