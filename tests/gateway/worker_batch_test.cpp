// Goal: the batched worker protocol (issue 5, throughput): a poll claiming
// up to maxTasks tasks and one report carrying many outcomes, each fenced
// like the single routes, against a real `durin serve` process over
// loopback. Bad input is refused naming the field and changes nothing.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "tests/support/serve_process.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin {
namespace {

using testing::api_client;
using testing::serve_process;
using testing::start_run;
using testing::wait_run;

constexpr auto wait_max = std::chrono::seconds(60);
const std::string poll_path = "/v1/task-queues/workers/poll";

// Starts `runs` runs of one remote step each and waits until all of their
// attempts are queued; their run ids.
std::vector<std::string> queue_steps(api_client& client, int runs) {
  std::vector<std::string> ids;
  for (int i = 0; i < runs; ++i) {
    auto answer =
        client.post("/v1/runs", {{"flow", "acme.remote-echo"},
                                 {"input", {{"count", 1}, {"value", i}}},
                                 {"wait", false}});
    EXPECT_EQ(answer.status, 202u) << answer.body;
    ids.push_back(answer.value["id"].get<std::string>());
  }
  EXPECT_TRUE(testing::eventually(
      [&] { return client.get("/v1/tasks").value["stats"]["queued"] == runs; },
      wait_max));
  return ids;
}

std::int64_t queued(api_client& client) {
  return client.get("/v1/tasks").value["stats"]["queued"].get<std::int64_t>();
}

std::vector<std::string> attempt_ids(const json& tasks) {
  std::vector<std::string> ids;
  for (const auto& task : tasks) {
    ids.push_back(task["attemptId"].get<std::string>());
  }
  return ids;
}

json complete_item(const std::string& attempt_id, json result) {
  return {{"attemptId", attempt_id},
          {"outcome", "complete"},
          {"result", std::move(result)}};
}

// The step outcomes the run's history records.
std::size_t recorded_outcomes(api_client& client, const std::string& id) {
  auto history = client.get("/v1/runs/" + id + "/history").value;
  std::size_t outcomes = 0;
  for (const auto& event : history["events"]) {
    if (event["kind"] == "step-completed" || event["kind"] == "step-failed") {
      ++outcomes;
    }
  }
  return outcomes;
}

TEST(WorkerBatchTest, BatchedPollClaimsDistinctTasksUpToMaxTasks) {
  testing::temp_dir dir;
  serve_process node(dir.path());
  api_client client(node.address(), node.admin_key());
  queue_steps(client, 5);
  auto first = client.post(
      poll_path, {{"workerId", "w1"}, {"pollRequestId", "a"}, {"maxTasks", 3}});
  ASSERT_EQ(first.status, 200u) << first.body;
  ASSERT_TRUE(first.value["tasks"].is_array()) << first.body;
  EXPECT_FALSE(first.value.contains("task"));
  ASSERT_EQ(first.value["tasks"].size(), 3u);
  for (const auto& task : first.value["tasks"]) {
    EXPECT_EQ(task["leaseOwner"], "w1");
    EXPECT_EQ(task["stepName"], "remote-echo");
  }
  EXPECT_EQ(queued(client), 2);
  auto second = client.post(
      poll_path, {{"workerId", "w1"}, {"pollRequestId", "b"}, {"maxTasks", 3}});
  ASSERT_EQ(second.value["tasks"].size(), 2u) << second.body;
  auto ids = attempt_ids(first.value["tasks"]);
  for (const auto& id : attempt_ids(second.value["tasks"])) {
    ids.push_back(id);
  }
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), 5u);
  auto empty = client.post(poll_path, {{"workerId", "w1"},
                                       {"pollRequestId", "c"},
                                       {"waitMs", 0},
                                       {"maxTasks", 3}});
  EXPECT_EQ(empty.status, 200u);
  EXPECT_EQ(empty.value["tasks"], json::array());
  auto running = client.get("/v1/tasks").value["stats"]["running"];
  EXPECT_EQ(running, 5);
}

TEST(WorkerBatchTest, RepeatedPollRequestIdReturnsTheSameBatchWhileLeasesHold) {
  testing::temp_dir dir;
  serve_process node(dir.path());
  api_client client(node.address(), node.admin_key());
  queue_steps(client, 3);
  json poll = {{"workerId", "w1"}, {"pollRequestId", "p1"}, {"maxTasks", 2}};
  auto first = client.post(poll_path, poll);
  ASSERT_EQ(first.value["tasks"].size(), 2u) << first.body;
  auto ids = attempt_ids(first.value["tasks"]);
  // A lost answer retried: the same tasks, nothing more leased.
  auto repeat = client.post(poll_path, poll);
  EXPECT_EQ(attempt_ids(repeat.value["tasks"]), ids);
  EXPECT_EQ(queued(client), 1);
  // Another worker's poll id of the same name is its own.
  auto other = client.post(
      poll_path,
      {{"workerId", "w2"}, {"pollRequestId", "p1"}, {"maxTasks", 2}});
  EXPECT_EQ(other.value["tasks"].size(), 1u) << other.body;
  auto done = client.post(
      "/v1/tasks/report",
      {{"workerId", "w1"}, {"reports", {complete_item(ids[0], "x")}}});
  ASSERT_EQ(done.status, 200u) << done.body;
  EXPECT_EQ(done.value["results"][0]["recorded"], true);
  // The ended attempt's lease no longer holds: only the other comes back.
  auto after = client.post(poll_path, poll);
  EXPECT_EQ(attempt_ids(after.value["tasks"]),
            std::vector<std::string>{ids[1]});
}

TEST(WorkerBatchTest, BatchedReportWithAStaleItemRecordsOnlyTheGoodOne) {
  testing::temp_dir dir;
  serve_process node(dir.path());
  api_client client(node.address(), node.admin_key());
  auto runs = queue_steps(client, 2);
  auto claimed = client.post(poll_path, {{"workerId", "w1"}, {"maxTasks", 2}});
  ASSERT_EQ(claimed.value["tasks"].size(), 2u) << claimed.body;
  const auto& tasks = claimed.value["tasks"];
  auto stale_id = tasks[0]["attemptId"].get<std::string>();
  auto good_id = tasks[1]["attemptId"].get<std::string>();
  auto stale_run = tasks[0]["runId"].get<std::string>();
  auto good_run = tasks[1]["runId"].get<std::string>();
  auto first = client.post("/v1/tasks/" + stale_id + "/complete",
                           {{"workerId", "w1"}, {"result", "first"}});
  ASSERT_EQ(first.value["recorded"], true) << first.body;
  auto batch = client.post(
      "/v1/tasks/report",
      {{"workerId", "w1"},
       {"reports",
        {complete_item(stale_id, "second"), complete_item(good_id, "good")}}});
  ASSERT_EQ(batch.status, 200u) << batch.body;
  const auto& results = batch.value["results"];
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0]["attemptId"], stale_id);
  EXPECT_EQ(results[0]["recorded"], false);
  EXPECT_EQ(results[0]["reason"], "stale_attempt");
  EXPECT_FALSE(results[0].contains("code"));
  EXPECT_EQ(results[1]["attemptId"], good_id);
  EXPECT_EQ(results[1]["recorded"], true);
  EXPECT_EQ(wait_run(client, stale_run)["output"]["value"], "first");
  EXPECT_EQ(wait_run(client, good_run)["output"]["value"], "good");
  EXPECT_EQ(recorded_outcomes(client, stale_run), 1u);
  EXPECT_EQ(recorded_outcomes(client, good_run), 1u);
}

TEST(WorkerBatchTest, WrongOwnerItemIsRefusedPerItemWithoutHarmingTheOthers) {
  testing::temp_dir dir;
  serve_process node(dir.path());
  api_client client(node.address(), node.admin_key());
  queue_steps(client, 3);
  auto mine = client.post(poll_path, {{"workerId", "w1"}, {"maxTasks", 1}});
  auto theirs = client.post(poll_path, {{"workerId", "w2"}, {"maxTasks", 1}});
  ASSERT_EQ(mine.value["tasks"].size(), 1u) << mine.body;
  ASSERT_EQ(theirs.value["tasks"].size(), 1u) << theirs.body;
  auto mine_id = mine.value["tasks"][0]["attemptId"].get<std::string>();
  auto theirs_id = theirs.value["tasks"][0]["attemptId"].get<std::string>();
  std::string queued_id;
  auto listed = client.get("/v1/tasks").value;
  for (const auto& task : listed["tasks"]) {
    if (task["state"] == "queued") {
      queued_id = task["attemptId"].get<std::string>();
    }
  }
  ASSERT_FALSE(queued_id.empty()) << listed.dump();
  auto batch = client.post(
      "/v1/tasks/report",
      {{"workerId", "w2"},
       {"reports",
        {complete_item(mine_id, "stolen"), complete_item(queued_id, "early"),
         complete_item(theirs_id, "fair")}}});
  ASSERT_EQ(batch.status, 200u) << batch.body;
  const auto& results = batch.value["results"];
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0]["recorded"], false);
  EXPECT_EQ(results[0]["code"], "lease-conflict");
  EXPECT_EQ(results[0]["reason"], "wrong_owner");
  EXPECT_EQ(results[1]["code"], "lease-conflict");
  EXPECT_EQ(results[1]["reason"], "not_claimed");
  EXPECT_EQ(results[2]["recorded"], true);
  // The refusals changed nothing: the lease holder still reports.
  auto owner = client.post("/v1/tasks/" + mine_id + "/complete",
                           {{"workerId", "w1"}, {"result", "mine"}});
  EXPECT_EQ(owner.status, 200u);
  EXPECT_EQ(owner.value["recorded"], true);
  EXPECT_EQ(queued(client), 1);
}

TEST(WorkerBatchTest, BadBatchedInputIsRefusedNamingTheFieldAndChangesNothing) {
  testing::temp_dir dir;
  serve_process node(dir.path());
  api_client client(node.address(), node.admin_key());
  auto runs = queue_steps(client, 2);
  auto refused = [](const api_client::answer& answer,
                    const std::string& field) {
    EXPECT_EQ(answer.status, 400u) << answer.body;
    EXPECT_EQ(answer.code(), "invalid-argument") << answer.body;
    EXPECT_NE(answer.value["message"].get<std::string>().find(field),
              std::string::npos)
        << answer.body;
  };
  refused(client.post(poll_path, {{"workerId", "w1"}, {"maxTasks", 0}}),
          "maxTasks");
  refused(client.post(poll_path, {{"workerId", "w1"}, {"maxTasks", 257}}),
          "maxTasks");
  refused(client.post(poll_path, {{"workerId", "w1"}, {"maxTasks", "2"}}),
          "maxTasks");
  EXPECT_EQ(queued(client), 2);
  auto claimed = client.post(poll_path, {{"workerId", "w1"}, {"maxTasks", 1}});
  ASSERT_EQ(claimed.value["tasks"].size(), 1u);
  auto id = claimed.value["tasks"][0]["attemptId"].get<std::string>();
  refused(client.post("/v1/tasks/report",
                      {{"workerId", "w1"}, {"reports", complete_item(id, 1)}}),
          "reports");
  refused(client.post("/v1/tasks/report",
                      {{"workerId", "w1"}, {"reports", json::array()}}),
          "reports");
  refused(
      client.post("/v1/tasks/report", {{"reports", {complete_item(id, 1)}}}),
      "workerId");
  // One bad item refuses the whole request: the good one is not recorded.
  refused(
      client.post(
          "/v1/tasks/report",
          {{"workerId", "w1"},
           {"reports",
            {complete_item(id, 1), {{"attemptId", id}, {"outcome", "done"}}}}}),
      "reports[1].outcome");
  refused(
      client.post(
          "/v1/tasks/report",
          {{"workerId", "w1"},
           {"reports",
            {{{"attemptId", id}, {"outcome", "fail"}, {"retryable", "yes"}}}}}),
      "reports[0].retryable");
  refused(client.post(
              "/v1/tasks/report",
              {{"workerId", "w1"}, {"reports", {{{"outcome", "complete"}}}}}),
          "reports[0].attemptId");
  auto listed = client.get("/v1/tasks").value;
  EXPECT_EQ(listed["stats"]["running"], 1) << listed.dump();
  EXPECT_EQ(listed["stats"]["queued"], 1) << listed.dump();
  EXPECT_EQ(listed["stats"]["completed"], 0) << listed.dump();
  auto good = client.post(
      "/v1/tasks/report",
      {{"workerId", "w1"}, {"reports", {complete_item(id, "after")}}});
  EXPECT_EQ(good.value["results"][0]["recorded"], true) << good.body;
  EXPECT_EQ(client.get("/healthz").status, 200u);
}

}  // namespace
}  // namespace durin
