// Goal: the crash rules of runs that make runs, at process level: a real
// `durin serve --shards 4` SIGKILLed at named kill points (DURIN_KILL_AT)
// between a parent's recorded child identity and the child's start, and
// between the child's durable admission and the parent's record of it; and
// around the write that ends a run continuing as new and admits its
// successor. After a restart, the parent has exactly one child per call and
// the chain of continued runs is whole, with the instance id held.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "tests/support/serve_process.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin::testing {
namespace {

class ChildrenServeTest : public ::testing::Test {
 protected:
  void start(std::vector<std::string> env = {}) {
    server_.reset();
    serve_setup setup;
    setup.env = std::move(env);
    setup.flags = {"--shards", "4"};
    server_ = std::make_unique<serve_process>(dir_.path(), std::move(setup));
  }
  api_client admin() { return {server_->address(), server_->admin_key()}; }

  // Starts `request` with idempotency key `key` on a server set to die at
  // kill point `point`, restarts it once it did, and starts again with the
  // same key when the first answer was lost: the run's id (empty after a
  // failed assertion).
  std::string start_across_kill(const json& request, const std::string& key,
                                const std::string& point) {
    std::string id;
    {
      auto client = admin();
      auto started = client.post("/v1/runs", request, key);
      if (started.status != 0u) {
        EXPECT_EQ(started.status, 202u) << started.body;
        id = started.value.value("id", "");
      }
    }
    EXPECT_TRUE(server_->wait_killed()) << "never reached " << point;
    start();
    if (id.empty()) {
      auto client = admin();
      auto again = client.post("/v1/runs", request, key);
      EXPECT_EQ(again.status, 202u) << again.body;
      id = again.value.value("id", "");
    }
    return id;
  }

  json wait_for_end(api_client& client, const std::string& id) {
    json run;
    EXPECT_TRUE(eventually(
        [&] {
          auto got = client.get("/v1/runs/" + id);
          run = got.value;
          auto status = run.value("status", std::string());
          return status == "completed" || status == "failed" ||
                 status == "cancelled";
        },
        std::chrono::seconds(30)))
        << run.dump();
    return run;
  }

  std::vector<json> runs_of_flow(api_client& client, const std::string& flow) {
    auto page = client.get("/v1/runs?limit=1000&flow=" + flow);
    EXPECT_EQ(page.status, 200u) << page.body;
    std::vector<json> out;
    for (auto& run : page.value["runs"]) {
      out.push_back(run);
    }
    return out;
  }

  temp_dir dir_;
  std::unique_ptr<serve_process> server_;
};

TEST_F(ChildrenServeTest, ExactlyOneChildPerParentCallAcrossCrashes) {
  const std::vector<std::string> points = {
      "run.before_child_start:1", "run.before_child_start:3",
      "run.after_child_admitted:1", "run.after_child_admitted:2"};
  int round = 0;
  for (const auto& point : points) {
    SCOPED_TRACE(point);
    start({"DURIN_KILL_AT=" + point});
    json orders = json::array();
    for (int i = 0; i < 4; ++i) {
      orders.push_back("P" + std::to_string(round) + "-" + std::to_string(i));
    }
    // Keyed: the kill may come before the 202 is sent (the parent's first
    // child starts as soon as it is admitted); the retry gets its answer.
    const json request = {{"flow", "acme.parent"},
                          {"input", {{"orders", orders}}},
                          {"wait", false}};
    const std::string key = "parent-" + std::to_string(round);
    const auto parent_id = start_across_kill(request, key, point);
    ASSERT_FALSE(parent_id.empty());
    auto client = admin();
    auto parent = wait_for_end(client, parent_id);
    ASSERT_EQ(parent["status"], "completed") << parent.dump();
    ASSERT_EQ(parent["output"]["results"].size(), 4u);
    std::set<std::string> seen;
    for (auto& child : runs_of_flow(client, "acme.review-order")) {
      if (child.value("parentRunId", "") == parent_id) {
        EXPECT_TRUE(seen.insert(child["input"]["orderId"]).second)
            << "a second child for " << child["input"].dump();
      }
    }
    EXPECT_EQ(seen.size(), 4u);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(parent["output"]["results"][i]["orderId"], orders[i]);
    }
    ASSERT_EQ(server_->terminate(), 0);
    ++round;
  }
}

TEST_F(ChildrenServeTest, ContinueAsNewIsAtomicAcrossCrashesAroundItsWrite) {
  int round = 0;
  for (const std::string point :
       {"run.before_continue_write:2", "run.after_continue_write:2"}) {
    SCOPED_TRACE(point);
    start({"DURIN_KILL_AT=" + point});
    std::string instance = "rolling-" + std::to_string(round++);
    // Keyed, in case the kill comes before the 202 is sent.
    const json request = {{"flow", "acme.rolling"},
                          {"input", {{"limit", 8}, {"every", 2}}},
                          {"instanceId", instance},
                          {"wait", false}};
    const auto first_id = start_across_kill(request, instance, point);
    ASSERT_FALSE(first_id.empty());
    auto client = admin();
    // Follow the chain from the first run: every link is whole.
    std::string id = first_id;
    json run;
    int links = 0;
    for (;;) {
      run = wait_for_end(client, id);
      ASSERT_EQ(run["status"], "completed") << run.dump();
      ASSERT_EQ(run["instanceId"], instance);
      ++links;
      ASSERT_LE(links, 4);
      if (!run["output"].contains("continuedAs")) {
        break;
      }
      auto next = run["output"]["continuedAs"].get<std::string>();
      auto successor = client.get("/v1/runs/" + next);
      ASSERT_EQ(successor.status, 200u) << successor.body;
      EXPECT_EQ(successor.value["continuedFrom"], id);
      id = next;
    }
    EXPECT_EQ(run["output"], (json{{"count", 8}, {"runs", 4}}));
    EXPECT_EQ(links, 4);
    // Exactly the runs of the chain exist for the instance.
    std::size_t of_instance = 0;
    for (auto& any : runs_of_flow(client, "acme.rolling")) {
      of_instance += any["instanceId"] == instance ? 1 : 0;
    }
    EXPECT_EQ(of_instance, 4u);
    ASSERT_EQ(server_->terminate(), 0);
  }
}

}  // namespace
}  // namespace durin::testing
