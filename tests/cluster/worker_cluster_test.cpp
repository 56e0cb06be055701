// Goal: remote workers in a cluster (issue 13, "Workers"). A worker that
// polls any one node gets the tasks of every shard, whichever node serves
// it, and its reports reach the node that holds the attempt's lease, fenced
// there as on one node: a report of an attempt of another node's run is
// recorded once and its repeat answered stale; a batched report mixing
// three nodes' attempts is answered per item in the order sent; the items
// of a killed node's shards are answered unavailable while the others are
// recorded; a poll parked on one node hands out a task enqueued on another
// within a slice; the operators' task view merges every node's and names
// the nodes that did not answer. Method: a real etcd and three real
// `durin serve --etcd` nodes on loopback (tests/support/cluster_harness.hpp),
// runs of `acme.remote-echo` (bin/worker_steps.cpp), the worker driven
// through the HTTP API.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/cluster_harness.hpp"

namespace durin::testing {
namespace {

using namespace std::chrono_literals;

constexpr std::uint32_t shard_count = 8;
const std::string poll_path = "/v1/task-queues/workers/poll";

std::uint32_t shard_of_run(const std::string& id) {
  // Crockford base32, the last two characters (services/shard_map.hpp).
  static const std::string digits = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
  const auto high = digits.find(id[id.size() - 2]);
  const auto low = digits.find(id[id.size() - 1]);
  return static_cast<std::uint32_t>((high * 32 + low) % shard_count);
}

json complete_item(const json& task) {
  return {{"attemptId", task["attemptId"]},
          {"outcome", "complete"},
          {"result", task["args"][0]}};
}

class ClusterWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(cluster_.wait_for_routing()); }

  // Starts `acme.remote-echo` runs of `steps` steps (or runs of `flow`
  // with `input`), each with an instance id (so it lives in the id's
  // shard) and through node k % 3, until every shard has one; their run
  // ids.
  std::vector<std::string> runs_in_every_shard(
      int steps, const std::string& flow = "acme.remote-echo",
      json input = nullptr) {
    std::vector<std::string> ids;
    std::set<std::uint32_t> shards;
    for (int k = 0; k < 200 && shards.size() < shard_count; ++k) {
      auto client = cluster_.client(k % 3);
      auto started = client.post(
          "/v1/runs",
          {{"flow", flow},
           {"input",
            input.is_null() ? json{{"count", steps}, {"value", k}} : input},
           {"instanceId", "echo-" + std::to_string(k)},
           {"wait", false}});
      if (started.status != 202u) {
        // A store still opening after the routing settled: the next id.
        std::this_thread::sleep_for(50ms);
        continue;
      }
      const auto id = started.value["id"].get<std::string>();
      if (shards.insert(shard_of_run(id)).second) {
        ids.push_back(id);
      } else {
        EXPECT_EQ(
            client.post("/v1/runs/" + id + "/cancel", json::object()).status,
            200u);
      }
    }
    EXPECT_EQ(shards.size(), shard_count);
    return ids;
  }

  // The node serving each shard, as etcd says.
  std::map<std::uint32_t, int> owners() {
    std::map<std::uint32_t, int> out;
    for (std::uint32_t shard = 0; shard < shard_count; ++shard) {
      out[shard] = cluster_.owner_of(shard);
    }
    return out;
  }

  // Polls node `via` as worker "w" until `want` tasks were handed out
  // (at most 30 s); every task handed out.
  std::vector<json> poll_tasks(int via, std::size_t want) {
    auto client = cluster_.client(via);
    std::vector<json> tasks;
    const auto until = std::chrono::steady_clock::now() + 30s;
    for (int poll = 0;
         tasks.size() < want && std::chrono::steady_clock::now() < until;
         ++poll) {
      auto got = client.post(poll_path,
                             {{"workerId", "w"},
                              {"pollRequestId", "take-" + std::to_string(poll)},
                              {"waitMs", 500},
                              {"maxTasks", 64}});
      EXPECT_EQ(got.status, 200u) << got.body;
      for (const auto& task : got.value["tasks"]) {
        tasks.push_back(task);
      }
    }
    EXPECT_EQ(tasks.size(), want);
    return tasks;
  }

  cluster_harness cluster_;
};

TEST_F(ClusterWorkerTest, AWorkerPollingOneNodeCompletesTheStepsOfEveryShard) {
  const auto ids = runs_in_every_shard(2);
  const auto owner = owners();
  auto worker = cluster_.client(0);
  std::set<int> served_by;
  std::set<std::string> finished;
  const auto until = std::chrono::steady_clock::now() + 45s;
  for (int poll = 0;
       finished.size() < ids.size() && std::chrono::steady_clock::now() < until;
       ++poll) {
    auto got =
        worker.post(poll_path, {{"workerId", "w"},
                                {"pollRequestId", "p" + std::to_string(poll)},
                                {"waitMs", 300},
                                {"maxTasks", 16}});
    ASSERT_EQ(got.status, 200u) << got.body;
    json reports = json::array();
    for (const auto& task : got.value["tasks"]) {
      EXPECT_EQ(task["leaseOwner"], "w");
      served_by.insert(owner.at(shard_of_run(task["runId"])));
      reports.push_back(complete_item(task));
    }
    if (!reports.empty()) {
      auto done = worker.post("/v1/tasks/report",
                              {{"workerId", "w"}, {"reports", reports}});
      ASSERT_EQ(done.status, 200u) << done.body;
      for (const auto& result : done.value["results"]) {
        EXPECT_EQ(result["recorded"], true) << done.body;
      }
    }
    for (const auto& id : ids) {
      if (worker.get("/v1/runs/" + id).value["status"] == "completed") {
        finished.insert(id);
      }
    }
  }
  EXPECT_EQ(finished.size(), ids.size());
  EXPECT_EQ(served_by, (std::set<int>{0, 1, 2}));
  for (const auto& id : ids) {
    auto run = worker.get("/v1/runs/" + id);
    EXPECT_EQ(run.value["status"], "completed") << run.body;
    EXPECT_EQ(run.value["output"]["count"], 2) << run.body;
  }
}

// Worker sessions (issue 17) in a cluster: two workers poll the queue
// through different nodes; every step of a session, whichever node serves
// its run, goes to the worker that reported the session's first step.
TEST_F(ClusterWorkerTest, EveryStepOfAWorkerSessionGoesToOneWorkerOnAnyNode) {
  const auto ids =
      runs_in_every_shard(0, "acme.session", {{"steps", 3}, {"sessions", 1}});
  const auto owner = owners();
  const std::vector<std::pair<std::string, int>> workers = {{"wa", 0},
                                                            {"wb", 1}};
  std::map<std::string, int> took;
  std::set<std::string> finished;
  const auto until = std::chrono::steady_clock::now() + 60s;
  for (int poll = 0;
       finished.size() < ids.size() && std::chrono::steady_clock::now() < until;
       ++poll) {
    const auto& [name, via] = workers[poll % 2];
    auto client = cluster_.client(via);
    auto got = client.post("/v1/task-queues/sessions/poll",
                           {{"workerId", name},
                            {"pollRequestId", name + std::to_string(poll)},
                            {"waitMs", 200},
                            {"maxTasks", 4}});
    ASSERT_EQ(got.status, 200u) << got.body;
    json reports = json::array();
    for (const auto& task : got.value["tasks"]) {
      took[name] += 1;
      reports.push_back(
          {{"attemptId", task["attemptId"]},
           {"outcome", "complete"},
           {"result", {{"by", name}, {"index", task["args"][0]}}}});
    }
    if (!reports.empty()) {
      auto done = client.post("/v1/tasks/report",
                              {{"workerId", name}, {"reports", reports}});
      ASSERT_EQ(done.status, 200u) << done.body;
    }
    for (const auto& id : ids) {
      if (client.get("/v1/runs/" + id).value["status"] == "completed") {
        finished.insert(id);
      }
    }
  }
  ASSERT_EQ(finished.size(), ids.size());
  std::set<int> nodes;
  for (const auto& id : ids) {
    auto run = cluster_.client(2).get("/v1/runs/" + id).value;
    const auto& sessions = run["output"]["sessions"];
    ASSERT_EQ(sessions.size(), 1u) << run.dump();
    const auto& results = sessions[0]["results"];
    ASSERT_EQ(results.size(), 3u) << run.dump();
    for (const auto& result : results) {
      EXPECT_EQ(result["by"], results[0]["by"]) << run.dump();
    }
    nodes.insert(owner.at(shard_of_run(id)));
  }
  EXPECT_EQ(nodes, (std::set<int>{0, 1, 2}));
  EXPECT_GT(took["wa"], 0);
  EXPECT_GT(took["wb"], 0);
}

TEST_F(ClusterWorkerTest, AParkedPollGetsATaskOfAnotherNodeWithinASlice) {
  auto parked = std::async(std::launch::async, [this] {
    auto client = cluster_.client(0);
    const auto began = std::chrono::steady_clock::now();
    auto got = client.post(poll_path, {{"workerId", "w"}, {"waitMs", 20'000}});
    return std::make_pair(got, std::chrono::steady_clock::now() - began);
  });
  std::this_thread::sleep_for(300ms);  // parked on node 0 by now
  // A plain start through node 1 is admitted in a shard node 1 serves.
  auto other = cluster_.client(1);
  auto started = other.post("/v1/runs", {{"flow", "acme.remote-echo"},
                                         {"input", {{"value", "far"}}},
                                         {"wait", false}});
  ASSERT_EQ(started.status, 202u) << started.body;
  const auto id = started.value["id"].get<std::string>();
  ASSERT_EQ(cluster_.owner_of(shard_of_run(id)), 1);
  const auto started_at = std::chrono::steady_clock::now();
  ASSERT_EQ(parked.wait_for(5s), std::future_status::ready)
      << "a poll parked on node 0 did not get node 1's task within 5 s";
  auto [answer, waited] = parked.get();
  ASSERT_EQ(answer.status, 200u) << answer.body;
  ASSERT_TRUE(answer.value["task"].is_object()) << answer.body;
  EXPECT_EQ(answer.value["task"]["runId"], id);
  // One slice (1 s) and the round's forwards, not the poll's 20 s.
  EXPECT_LT(std::chrono::steady_clock::now() - started_at, 2500ms);
  EXPECT_LT(waited, 5s);
}

std::set<std::string> attempt_ids(const json& tasks) {
  std::set<std::string> out;
  for (const auto& task : tasks) {
    out.insert(task["attemptId"].get<std::string>());
  }
  return out;
}

TEST_F(ClusterWorkerTest,
       ARepeatedPollRequestIdGetsBackWhatItHeldOnWhicheverNodeAndNoMore) {
  const auto ids = runs_in_every_shard(1);
  auto client = cluster_.client(0);
  ASSERT_TRUE(eventually(
      [&] {
        return client.get("/v1/tasks").value["stats"]["queued"] == ids.size();
      },
      10s));
  // Polls of one task each start at different nodes (the order rotates):
  // a repeat must come back with the same task, whichever node gave it,
  // and never lease another.
  std::size_t claimed = 0;
  for (int poll = 0; poll < 4; ++poll) {
    SCOPED_TRACE(poll);
    const json body = {{"workerId", "w"},
                       {"pollRequestId", "r" + std::to_string(poll)},
                       {"waitMs", 0},
                       {"maxTasks", 1}};
    auto first = client.post(poll_path, body);
    ASSERT_EQ(first.status, 200u) << first.body;
    ASSERT_EQ(first.value["tasks"].size(), 1u) << first.body;
    claimed += 1;
    for (int again = 0; again < 2; ++again) {
      auto repeat = client.post(poll_path, body);
      ASSERT_EQ(repeat.status, 200u) << repeat.body;
      EXPECT_EQ(attempt_ids(repeat.value["tasks"]),
                attempt_ids(first.value["tasks"]))
          << repeat.body;
    }
  }
  auto stats = client.get("/v1/tasks").value["stats"];
  EXPECT_EQ(stats["running"], claimed) << stats;
  EXPECT_EQ(stats["queued"], ids.size() - claimed) << stats;
}

TEST_F(ClusterWorkerTest,
       AReportSentToANodeNotServingTheRunIsRecordedAndItsRepeatIsStale) {
  auto started =
      cluster_.client(1).post("/v1/runs", {{"flow", "acme.remote-echo"},
                                           {"input", {{"value", "hello"}}},
                                           {"wait", false}});
  ASSERT_EQ(started.status, 202u) << started.body;
  const auto id = started.value["id"].get<std::string>();
  const int owner = cluster_.owner_of(shard_of_run(id));
  ASSERT_GE(owner, 0);
  const int elsewhere = (owner + 1) % 3;
  const int third = (owner + 2) % 3;
  auto tasks = poll_tasks(third, 1);
  ASSERT_EQ(tasks.size(), 1u);
  const auto base = "/v1/tasks/" + tasks[0]["attemptId"].get<std::string>();
  auto via = cluster_.client(elsewhere);
  auto beat = via.post(base + "/heartbeat", {{"workerId", "w"}});
  EXPECT_EQ(beat.status, 200u) << beat.body;
  EXPECT_EQ(beat.value["continue"], true) << beat.body;
  auto intruder = via.post(base + "/complete", {{"workerId", "x"}});
  EXPECT_EQ(intruder.status, 409u) << intruder.body;
  EXPECT_EQ(intruder.value["reason"], "wrong_owner") << intruder.body;
  auto done =
      via.post(base + "/complete", {{"workerId", "w"}, {"result", "HELLO"}});
  ASSERT_EQ(done.status, 200u) << done.body;
  EXPECT_EQ(done.value["recorded"], true) << done.body;
  auto again = cluster_.client(third).post(
      base + "/complete", {{"workerId", "w"}, {"result", "other"}});
  EXPECT_EQ(again.status, 200u) << again.body;
  EXPECT_EQ(again.value["recorded"], false) << again.body;
  EXPECT_EQ(again.value["reason"], "stale_attempt") << again.body;
  auto run = wait_run(via, id);
  EXPECT_EQ(run["status"], "completed");
  EXPECT_EQ(run["output"]["value"], "HELLO");
  // The run's attempts and refusals, kept where the run is, from anywhere.
  auto transport = via.get("/v1/tasks?runId=" + id);
  ASSERT_EQ(transport.status, 200u) << transport.body;
  ASSERT_EQ(transport.value["attempts"].size(), 1u) << transport.body;
  EXPECT_EQ(transport.value["attempts"][0]["state"], "completed");
  EXPECT_EQ(transport.value["refusedReports"].size(), 2u) << transport.body;
}

TEST_F(ClusterWorkerTest,
       ABatchMixingThreeNodesAttemptsRecordsAllAndAnswersInTheOrderSent) {
  const auto ids = runs_in_every_shard(1);
  const auto owner = owners();
  auto tasks = poll_tasks(2, ids.size());
  ASSERT_EQ(tasks.size(), ids.size());
  // The operators' view through node 1: every node's tasks, tagged.
  auto view = cluster_.client(1).get("/v1/tasks");
  ASSERT_EQ(view.status, 200u) << view.body;
  EXPECT_EQ(view.value["tasks"].size(), ids.size()) << view.body;
  EXPECT_EQ(view.value["unansweredNodes"], json::array()) << view.body;
  EXPECT_EQ(view.value["nodes"].size(), 3u) << view.body;
  EXPECT_EQ(view.value["stats"]["running"], ids.size()) << view.body;
  for (const auto& task : view.value["tasks"]) {
    EXPECT_EQ(task["node"],
              cluster_harness::node_id(owner.at(shard_of_run(task["runId"]))));
  }
  // Reversed, with an id of before ids named their run and one naming a
  // real run but no attempt of it.
  json reports = json::array();
  std::vector<std::string> sent;
  for (auto task = tasks.rbegin(); task != tasks.rend(); ++task) {
    reports.push_back(complete_item(*task));
    sent.push_back((*task)["attemptId"]);
    if (sent.size() == 3) {
      reports.push_back(complete_item(
          {{"attemptId", "att_0123456789abcdef01234567"}, {"args", {1}}}));
      sent.push_back("att_0123456789abcdef01234567");
      const auto forged = "att_0123456789abcdef01234567_" + ids.back();
      reports.push_back(complete_item({{"attemptId", forged}, {"args", {1}}}));
      sent.push_back(forged);
    }
  }
  auto client = cluster_.client(1);
  for (const char* round : {"first", "again"}) {
    SCOPED_TRACE(round);
    const bool first = std::string(round) == "first";
    auto done = client.post("/v1/tasks/report",
                            {{"workerId", "w"}, {"reports", reports}});
    ASSERT_EQ(done.status, 200u) << done.body;
    const auto& results = done.value["results"];
    ASSERT_EQ(results.size(), sent.size()) << done.body;
    for (std::size_t i = 0; i < sent.size(); ++i) {
      EXPECT_EQ(results[i]["attemptId"], sent[i]) << i;
      if (i == 3 || i == 4) {
        EXPECT_EQ(results[i]["recorded"], false) << results[i];
        EXPECT_EQ(results[i]["reason"], "task_not_found") << results[i];
      } else {
        EXPECT_EQ(results[i]["recorded"], first) << results[i];
        if (!first) {
          EXPECT_EQ(results[i]["reason"], "stale_attempt") << results[i];
        }
      }
    }
  }
  for (const auto& id : ids) {
    EXPECT_EQ(wait_run(client, id)["status"], "completed") << id;
  }
}

TEST_F(ClusterWorkerTest,
       AReportForAKilledNodesShardIsUnavailableWhileTheOthersAreRecorded) {
  const auto ids = runs_in_every_shard(1);
  const auto owner = owners();
  auto tasks = poll_tasks(0, ids.size());
  ASSERT_EQ(tasks.size(), ids.size());
  cluster_.kill9(2);
  // While its lease lasts (2 s), node 2 is still asked, and named.
  std::this_thread::sleep_for(200ms);
  auto client = cluster_.client(0);
  auto view = client.get("/v1/tasks");
  ASSERT_EQ(view.status, 200u) << view.body;
  EXPECT_EQ(view.value["unansweredNodes"], json::array({"n2"})) << view.body;
  for (const auto& task : view.value["tasks"]) {
    EXPECT_NE(task["node"], "n2");
  }
  // Once its lease is gone, its shards have no owner.
  std::string lost_run;
  for (const auto& id : ids) {
    if (owner.at(shard_of_run(id)) == 2) {
      lost_run = id;
    }
  }
  ASSERT_FALSE(lost_run.empty());
  ASSERT_TRUE(eventually(
      [&] {
        return client.get("/v1/runs/" + lost_run).code() == "shard-unavailable";
      },
      10s));
  json reports = json::array();
  for (const auto& task : tasks) {
    reports.push_back(complete_item(task));
  }
  auto done = client.post("/v1/tasks/report",
                          {{"workerId", "w"}, {"reports", reports}});
  ASSERT_EQ(done.status, 200u) << done.body;
  const auto& results = done.value["results"];
  ASSERT_EQ(results.size(), tasks.size()) << done.body;
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    EXPECT_EQ(results[i]["attemptId"], tasks[i]["attemptId"]);
    const auto shard = shard_of_run(tasks[i]["runId"]);
    if (owner.at(shard) == 2) {
      EXPECT_FALSE(results[i].contains("recorded")) << results[i];
      EXPECT_EQ(results[i]["code"], "shard-unavailable") << results[i];
      EXPECT_EQ(results[i]["shard"], shard) << results[i];
    } else {
      EXPECT_EQ(results[i]["recorded"], true) << results[i];
    }
  }
}

}  // namespace
}  // namespace durin::testing
