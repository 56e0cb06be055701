// Schedules in a real cluster (tests/support/cluster_harness.hpp: etcd and
// three `durin serve --etcd` nodes, 8 shards): a schedule created through
// any node lives in its shard and fires on the shard's owner; killed with
// SIGKILL and restarted, then moved to another node with `durin cluster
// move`, it goes on firing, and every occurrence has exactly one run,
// listed through any node (GET /v1/runs?scheduleId= merges every node's),
// and the schedule itself is listed once through every node.
#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "services/shard_map.hpp"
#include "tests/support/cluster_harness.hpp"

namespace durin::testing {
namespace {

using namespace std::chrono_literals;

// Firings so far; a transient 503 (a peer coming up) is asked again.
std::uint64_t fired(api_client& client, const std::string& id) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto view = client.get("/v1/schedules/" + id);
    if (view.status == 200) {
      return view.value["info"]["fired"].get<std::uint64_t>();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return 0;
}

TEST(ScheduleClusterTest,
     AScheduleFiresOncePerOccurrenceWhileItsNodeDiesAndItMoves) {
  cluster_harness cluster;
  ASSERT_TRUE(cluster.wait_for_routing());
  const std::string id = "cluster-every-second";
  const auto shard = services::shard_map(8).of_schedule("default", id);
  const int owner = cluster.owner_of(shard);
  ASSERT_GE(owner, 0);
  const int entry = (owner + 1) % 3;  // created through another node
  auto client = cluster.client(entry);
  // A peer connection may still be coming up: a 503 is retried with the
  // same Idempotency-Key, which is what makes the retry safe.
  api_client::answer made;
  ASSERT_TRUE(eventually(
      [&] {
        made = client.post(
            "/v1/schedules",
            {{"scheduleId", id},
             {"spec", {{"interval", "1s"}}},
             {"action",
              {{"flow", "acme.review-order"}, {"input", {{"orderId", id}}}}},
             {"overlap", "allow_all"}},
            "create-" + id);
        return made.status != 503;
      },
      20s));
  ASSERT_EQ(made.status, 201u) << made.body;
  ASSERT_TRUE(eventually([&] { return fired(client, id) >= 2; }, 20s));
  // Listed once through every node: GET /v1/schedules merges every node's
  // page, so the two nodes that do not own its shard list it too.
  for (int via = 0; via < 3; ++via) {
    api_client::answer listed;
    ASSERT_TRUE(eventually(
        [&] {
          listed = cluster.client(via).get("/v1/schedules");
          return listed.status != 503;  // a peer still connecting
        },
        20s));
    ASSERT_EQ(listed.status, 200u) << listed.body;
    ASSERT_EQ(listed.value["schedules"].size(), 1u) << listed.body;
    EXPECT_EQ(listed.value["schedules"][0]["scheduleId"], id) << listed.body;
  }

  // The owner dies mid-stream and comes back: the shard fires again.
  cluster.kill9(owner);
  std::this_thread::sleep_for(500ms);
  cluster.start(owner);
  ASSERT_TRUE(cluster.wait_for_routing(30s));
  auto before_move = fired(client, id);
  ASSERT_TRUE(
      eventually([&] { return fired(client, id) >= before_move + 2; }, 20s));

  // Moved to another node: the new owner fires it from the record.
  const int target = (owner + 2) % 3;
  std::string output;
  ASSERT_EQ(cluster_harness::run_cli(
                {"cluster", "move", std::to_string(shard), "--to",
                 cluster_harness::node_id(target), "--etcd",
                 cluster.etcd().endpoint(), "--cluster", cluster.name()},
                &output),
            0)
      << output;
  ASSERT_TRUE(
      eventually([&] { return cluster.owner_of(shard) == target; }, 30s));
  ASSERT_TRUE(cluster.wait_for_routing(30s));
  auto after_move = fired(client, id);
  ASSERT_TRUE(
      eventually([&] { return fired(client, id) >= after_move + 2; }, 20s));

  ASSERT_TRUE(eventually(
      [&] {
        return client
                   .post("/v1/schedules/" + id + "/pause", json::object(),
                         "pause-" + id)
                   .status == 200;
      },
      20s));
  std::this_thread::sleep_for(1s);
  const auto total = fired(client, id);
  std::map<std::string, int> by_occurrence;
  ASSERT_TRUE(eventually(
      [&] {
        by_occurrence.clear();
        auto page = client.get("/v1/runs?limit=1000&scheduleId=" + id);
        if (page.status != 200) {
          return false;
        }
        for (auto& run : page.value["runs"]) {
          by_occurrence[run.value("occurrence", "")] += 1;
        }
        return by_occurrence.size() == total;
      },
      20s));
  for (const auto& [occurrence, count] : by_occurrence) {
    EXPECT_EQ(count, 1) << occurrence;
  }
  EXPECT_EQ(by_occurrence.size(), total);
}

}  // namespace
}  // namespace durin::testing
