// Goal: GET /v1/runs?query= finds runs by their search attributes in a
// cluster as on one node: runs whose shards several nodes own are found by
// one query through any node (the list fans out with its query), and a
// query that does not type is refused through any node.
// Method: a real 3-node cluster (tests/support/cluster_harness.hpp); runs
// are started through every node, their owners read from etcd's view.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "tests/support/cluster_harness.hpp"

namespace durin::testing {
namespace {

std::uint32_t shard_of_run(const std::string& id, std::uint32_t shards) {
  // Crockford base32, the last two characters (services/shard_map.hpp).
  static const std::string digits = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
  const auto high = digits.find(id[id.size() - 2]);
  const auto low = digits.find(id[id.size() - 1]);
  return static_cast<std::uint32_t>((high * 32 + low) % shards);
}

std::string encoded(const std::string& text) {
  std::string out;
  const char* hex = "0123456789ABCDEF";
  for (unsigned char c : text) {
    if (std::isalnum(c) != 0) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

class SearchClusterTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(cluster_.wait_for_routing()); }

  cluster_harness cluster_;
};

TEST_F(SearchClusterTest, OneQueryThroughAnyNodeFindsRunsOfEveryNodesShards) {
  std::set<std::string> blue;
  std::set<int> owners;
  for (int i = 0; i < 9; ++i) {
    auto client = cluster_.client(i % 3);
    json body = {{"flow", "acme.tagged"},
                 {"input", json::object()},
                 {"wait", false},
                 {"searchAttributes",
                  {{"team", i % 3 == 2 ? "red" : "blue"}, {"size", i}}}};
    auto started = client.post("/v1/runs", body);
    ASSERT_EQ(started.status, 202u) << started.body;
    const std::string id = started.value["id"];
    if (i % 3 != 2) {
      blue.insert(id);
      owners.insert(cluster_.owner_of(shard_of_run(id, 8)));
    }
  }
  // The rule is about a cluster: the runs found live on several nodes.
  ASSERT_GE(owners.size(), 2u);
  for (int via = 0; via < 3; ++via) {
    auto client = cluster_.client(via);
    std::set<std::string> seen;
    std::string cursor;
    int pages = 0;
    do {
      auto page = client.get(
          "/v1/runs?limit=4&query=" + encoded("team = 'blue' AND size >= 0") +
          (cursor.empty() ? "" : "&cursor=" + cursor));
      ASSERT_EQ(page.status, 200u) << "via node " << via << ": " << page.body;
      for (auto& run : page.value["runs"]) {
        EXPECT_TRUE(seen.insert(run["id"].get<std::string>()).second);
      }
      const auto& next = page.value["nextCursor"];
      cursor = next.is_string() ? next.get<std::string>() : "";
    } while (!cursor.empty() && ++pages < 20);
    EXPECT_EQ(seen, blue) << "via node " << via;
    auto refused = client.get("/v1/runs?query=" + encoded("size = 'big'"));
    EXPECT_EQ(refused.status, 400u) << refused.body;
    EXPECT_EQ(refused.code(), "invalid-argument");
  }
}

TEST_F(SearchClusterTest, ANameTypedThroughOneNodeHasThatTypeThroughEveryNode) {
  json first = {{"flow", "acme.tagged"},
                {"input", json::object()},
                {"wait", false},
                {"searchAttributes", {{"grade", "gold"}}}};
  auto started = cluster_.client(0).post("/v1/runs", first);
  ASSERT_EQ(started.status, 202u) << started.body;
  // Several starts through each other node: whichever node admits them
  // (the owner of the run's shard) holds the type node 0 fixed.
  for (int via = 1; via < 3; ++via) {
    auto client = cluster_.client(via);
    for (int i = 0; i < 3; ++i) {
      json other = first;
      other["searchAttributes"] = {{"grade", 5 + i}};
      auto refused = client.post("/v1/runs", other);
      EXPECT_EQ(refused.status, 400u)
          << "via node " << via << ": " << refused.body;
      EXPECT_NE(refused.value["message"].get<std::string>().find(
                    "'grade' is keyword"),
                std::string::npos)
          << refused.body;
    }
    auto query = client.get("/v1/runs?query=" + encoded("grade = 5"));
    EXPECT_EQ(query.status, 400u) << "via node " << via << ": " << query.body;
    auto found = client.get("/v1/runs?query=" + encoded("grade = 'gold'"));
    ASSERT_EQ(found.status, 200u) << found.body;
    ASSERT_EQ(found.value["runs"].size(), 1u) << found.body;
    EXPECT_EQ(found.value["runs"][0]["id"], started.value["id"]);
  }
}

}  // namespace
}  // namespace durin::testing
