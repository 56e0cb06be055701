// Goal: messages, updates, queries and message-with-start reach their run
// through any node of a cluster (issue 17), forwarded by the run's (or the
// instance's) shard like every request for it.
// Method: a real 3-node cluster (tests/support/cluster_harness.hpp); each
// run is sent to through all three nodes, so at least two of them do not
// own its shard.
#include <gtest/gtest.h>

#include <string>

#include "tests/support/cluster_harness.hpp"

namespace durin::testing {
namespace {

class MessageClusterTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(cluster_.wait_for_routing()); }

  cluster_harness cluster_;
};

TEST_F(MessageClusterTest, MessagesUpdatesAndQueriesReachARunThroughAnyNode) {
  for (int i = 0; i < 4; ++i) {
    auto started = cluster_.client(i % 3).post(
        "/v1/runs", {{"flow", "acme.counter"}, {"input", json::object()}});
    ASSERT_EQ(started.status, 200u) << started.body;
    const std::string id = started.value["id"];
    const std::string base = "/v1/runs/" + id;
    for (int via = 0; via < 3; ++via) {
      auto client = cluster_.client(via);
      json add = {{"args", {{"by", 1}}},
                  {"updateId", "u" + std::to_string(via)}};
      auto added = client.post(base + "/updates/add", add);
      ASSERT_EQ(added.status, 200u) << "via node " << via << ": " << added.body;
      EXPECT_EQ(added.value["result"], json({{"value", via + 1}}));
      // A repeat through another node answers as the first.
      auto repeat =
          cluster_.client((via + 1) % 3).post(base + "/updates/add", add);
      EXPECT_EQ(repeat.body, added.body);
      auto value = client.get(base + "/queries/value");
      ASSERT_EQ(value.status, 200u) << value.body;
      EXPECT_EQ(value.value["result"], json({{"value", via + 1}}));
    }
    json stop = {{"idempotencyKey", "stop"}};
    auto stopped = cluster_.client(i % 3).post(base + "/messages/stop", stop);
    ASSERT_EQ(stopped.status, 200u) << stopped.body;
    auto again =
        cluster_.client((i + 2) % 3).post(base + "/messages/stop", stop);
    EXPECT_EQ(again.body, stopped.body);
    auto reader = cluster_.client((i + 1) % 3);
    auto done = wait_run(reader, id);
    EXPECT_EQ(done["output"], json({{"value", 3}})) << done.dump();
  }
}

TEST_F(MessageClusterTest, AMessageWithStartThroughAnyNodeStartsOneRun) {
  for (int i = 0; i < 4; ++i) {
    std::string target =
        "/v1/instances/box-" + std::to_string(i) + "/messages/note";
    json first = {
        {"payload", {{"n", 1}}},
        {"idempotencyKey", "first"},
        {"start", {{"flow", "acme.inbox"}, {"input", json::object()}}}};
    auto started = cluster_.client(i % 3).post(target, first);
    ASSERT_EQ(started.status, 200u) << started.body;
    EXPECT_EQ(started.value["started"], true);
    auto repeat = cluster_.client((i + 1) % 3).post(target, first);
    EXPECT_EQ(repeat.body, started.body);
    json last = first;
    last["payload"] = {{"done", true}};
    last["idempotencyKey"] = "last";
    auto delivered = cluster_.client((i + 2) % 3).post(target, last);
    ASSERT_EQ(delivered.status, 200u) << delivered.body;
    EXPECT_EQ(delivered.value["started"], false);
    EXPECT_EQ(delivered.value["runId"], started.value["runId"]);
    auto reader = cluster_.client(0);
    auto done = wait_run(reader, started.value["runId"]);
    EXPECT_EQ(done["output"]["notes"].size(), 2u) << done.dump();
  }
}

}  // namespace
}  // namespace durin::testing
