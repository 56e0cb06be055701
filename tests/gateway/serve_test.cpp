// End-to-end tests of `durin serve`: every rule of request idempotency
// (seeds/001, issue 4 rules 1-7), every route, auth and tenants, bad input,
// crashes and races, against real server processes over loopback.
//
// Method: each test starts its own `durin serve` on a fresh data dir with
// --listen 127.0.0.1:0 (tests/support/serve_process.hpp) and talks HTTP to
// it. Test-only knobs of the server: DURIN_TEST_HOLD_MS (a keyed request
// holds its key that long before acting, so a repeat can arrive while it
// runs) and DURIN_KILL_AT=gateway.after_hold:1 / gateway.after_admit:1 (the
// server SIGKILLs itself at that point of a keyed request).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <filesystem>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "durin/limits.hpp"
#include "tests/support/serve_process.hpp"
#include "tests/support/shard_dirs.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin::testing {
namespace {

const std::string conflict_text =
    "Idempotency-Key was reused with a different request body. Use a fresh "
    "key or the original body.";
const std::string in_flight_text =
    "A request with this Idempotency-Key is still running. Retry after it "
    "answers (Retry-After), and you'll get its answer.";

json review(const std::string& order) {
  return {{"flow", "acme.review-order"}, {"input", {{"orderId", order}}}};
}

class ServeTest : public ::testing::Test {
 protected:
  void start(std::vector<std::string> env = {}) {
    server_.reset();
    server_ = std::make_unique<serve_process>(dir_.path(), std::move(env));
  }
  api_client admin() { return {server_->address(), server_->admin_key()}; }
  api_client as(const std::string& key) { return {server_->address(), key}; }

  // Runs of the tenant of `client` whose input names `order`.
  int runs_for(api_client& client, const std::string& order) {
    auto page = client.get("/v1/runs?limit=1000");
    EXPECT_EQ(page.status, 200u) << page.body;
    int count = 0;
    for (auto& run : page.value["runs"]) {
      if (run["input"].value("orderId", "") == order) {
        ++count;
      }
    }
    return count;
  }

  void SetUp() override { start(); }

  temp_dir dir_;
  std::unique_ptr<serve_process> server_;
};

// Rule 1: a repeat after the first answered gets it again byte for byte,
// marked as a replay, with the status as it was then.
TEST_F(ServeTest, Rule1_RepeatAfterAnswerReplaysTheFirstResponse) {
  auto client = admin();
  auto first = client.post("/v1/runs", review("A-1"), "key-1");
  ASSERT_EQ(first.status, 200u) << first.body;
  EXPECT_EQ(first.value["status"], "completed");
  EXPECT_EQ(first.headers.count("idempotent-replayed"), 0u);
  auto again = client.post("/v1/runs", review("A-1"), "key-1");
  ASSERT_EQ(again.status, 200u);
  EXPECT_EQ(again.body, first.body);
  EXPECT_EQ(again.headers["idempotent-replayed"], "true");
  // The status as it was then: a background start answered `pending`.
  json background = review("A-2");
  background["wait"] = false;
  auto pending = client.post("/v1/runs", background, "key-2");
  ASSERT_EQ(pending.status, 202u) << pending.body;
  std::string id = pending.value["id"];
  ASSERT_TRUE(eventually([&] {
    return client.get("/v1/runs/" + id).value["status"] == "completed";
  }));
  auto replay = client.post("/v1/runs", background, "key-2");
  EXPECT_EQ(replay.body, pending.body);
  EXPECT_EQ(replay.value["status"], pending.value["status"]);
  EXPECT_EQ(runs_for(client, "A-1"), 1);
  EXPECT_EQ(runs_for(client, "A-2"), 1);
}

// Rule 2 (and rule 4 while running): a repeat while the first still runs is
// refused with idempotency-key-in-flight and Retry-After: 5; another
// request with the key is a conflict; after the first answers, the repeat
// gets its answer.
TEST_F(ServeTest, Rule2_RepeatWhileInFlightIsRefused) {
  start({"DURIN_TEST_HOLD_MS=1500"});
  api_client::answer first;
  std::thread runner([&] {
    auto client = admin();
    first = client.post("/v1/runs", review("B-1"), "key-b");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  auto client = admin();
  auto repeat = client.post("/v1/runs", review("B-1"), "key-b");
  EXPECT_EQ(repeat.status, 409u);
  EXPECT_EQ(repeat.code(), "idempotency-key-in-flight");
  EXPECT_EQ(repeat.value["message"], in_flight_text);
  EXPECT_EQ(repeat.headers["retry-after"], "5");
  auto other = client.post("/v1/runs", review("B-2"), "key-b");
  EXPECT_EQ(other.status, 409u);
  EXPECT_EQ(other.code(), "conflict");
  EXPECT_EQ(other.value["message"], conflict_text);
  runner.join();
  ASSERT_EQ(first.status, 200u) << first.body;
  auto after = client.post("/v1/runs", review("B-1"), "key-b");
  EXPECT_EQ(after.body, first.body);
  EXPECT_EQ(runs_for(client, "B-1"), 1);
  EXPECT_EQ(runs_for(client, "B-2"), 0);
}

// Rule 3: the server dies (SIGKILL) after holding the key durably and before
// starting; after a restart the key is free at once and the retry starts one
// run.
TEST_F(ServeTest, Rule3_KeyOfACrashedRequestIsFreeAfterRestart) {
  start({"DURIN_KILL_AT=gateway.after_hold:1"});
  {
    auto client = admin();
    auto lost = client.post("/v1/runs", review("C-1"), "key-c");
    EXPECT_FALSE(lost.error.empty()) << lost.body;
  }
  EXPECT_TRUE(server_->wait_killed());
  start();
  auto client = admin();
  auto retry = client.post("/v1/runs", review("C-1"), "key-c");
  ASSERT_EQ(retry.status, 200u) << retry.body;
  EXPECT_EQ(runs_for(client, "C-1"), 1);
}

// Rule 3, crash after the run was admitted: the retry answers that run and
// never starts a second one.
TEST_F(ServeTest, Rule3_CrashAfterAdmissionRetryGivesTheSameSingleRun) {
  start({"DURIN_KILL_AT=gateway.after_admit:1"});
  {
    auto client = admin();
    auto lost = client.post("/v1/runs", review("C-2"), "key-c2");
    EXPECT_FALSE(lost.error.empty()) << lost.body;
  }
  EXPECT_TRUE(server_->wait_killed());
  start();
  auto client = admin();
  auto retry = client.post("/v1/runs", review("C-2"), "key-c2");
  ASSERT_EQ(retry.status, 200u) << retry.body;
  EXPECT_EQ(runs_for(client, "C-2"), 1);
  auto again = client.post("/v1/runs", review("C-2"), "key-c2");
  EXPECT_EQ(again.body, retry.body);
}

// Rule 3, kill -9 from outside while a keyed start is in flight.
TEST_F(ServeTest, Rule3_KillNineMidKeyedStartThenRetryGivesOneRun) {
  start({"DURIN_TEST_HOLD_MS=2000"});
  std::thread runner([&] {
    auto client = admin();
    (void)client.post("/v1/runs", review("C-3"), "key-c3");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  server_->kill9();
  runner.join();
  start();
  auto client = admin();
  auto retry = client.post("/v1/runs", review("C-3"), "key-c3");
  ASSERT_EQ(retry.status, 200u) << retry.body;
  EXPECT_EQ(runs_for(client, "C-3"), 1);
}

// One run per key across a kill -9 on either side of the admission's group
// write (kill points committer.before_write / committer.after_write, armed
// for the first write after a restart): the key's record rides in the
// admission batch, so the retry either starts the only run or answers the
// one that landed. For waited and background starts, with and without a
// start hook.
TEST_F(ServeTest, Rule3_KillNineAroundTheAdmissionWriteNeverGivesTwoRuns) {
  int round = 0;
  for (std::string point :
       {"committer.before_write", "committer.after_write"}) {
    for (bool wait : {true, false}) {
      for (bool hooked : {false, true}) {
        std::string order = "K-" + std::to_string(++round);
        json request = review(order);
        request["wait"] = wait;
        if (hooked) {
          request["hook"] = {{"token", "review:" + order}};
        }
        std::string key = "key-kill-" + order;
        SCOPED_TRACE(point + " wait=" + std::to_string(wait) +
                     " hooked=" + std::to_string(hooked));
        ASSERT_EQ(server_->terminate(), 0);
        start({"DURIN_KILL_AT=" + point + ":1"});
        {
          auto client = admin();
          auto lost = client.post("/v1/runs", request, key);
          EXPECT_FALSE(lost.error.empty()) << point << " " << lost.body;
        }
        ASSERT_TRUE(server_->wait_killed()) << point;
        start();
        auto client = admin();
        auto retry = client.post("/v1/runs", request, key);
        ASSERT_EQ(retry.status, wait ? 200u : 202u)
            << point << " wait=" << wait << " hooked=" << hooked << " "
            << retry.body;
        // Landed before the kill: a background start's kept answer is
        // replayed as the admission wrote it.
        // With several shards a start token's run may live apart from its
        // key, whose marker is then the first write: the retry starts that
        // run afresh instead of replaying it.
        bool landed = point == "committer.after_write";
        if (!hooked || testing::shard_count(dir_.path()) == 1) {
          EXPECT_EQ(retry.headers.count("idempotent-replayed"),
                    landed && !wait ? 1u : 0u)
              << point << " wait=" << wait;
        }
        auto again = client.post("/v1/runs", request, key);
        EXPECT_EQ(again.body, retry.body);
        EXPECT_EQ(again.value["id"], retry.value["id"]);
        EXPECT_EQ(runs_for(client, order), 1)
            << point << " wait=" << wait << " hooked=" << hooked;
        // Quiet before the next restart: the kill point must meet that
        // round's admission, not this run's later writes (its end, the
        // release of its token).
        std::string id = retry.value["id"];
        ASSERT_TRUE(eventually([&] {
          return client.get("/v1/runs/" + id).value["status"] == "completed" &&
                 (!hooked ||
                  client.get("/v1/hooks/review:" + order).status == 404u);
        }));
      }
    }
  }
}

// A waited start answers once its run waits for something (here a hook),
// told by the store rather than by polling; the run stays waiting.
TEST_F(ServeTest, WaitedStartAnswersWhenTheRunWaits) {
  auto client = admin();
  auto started =
      client.post("/v1/runs",
                  {{"flow", "acme.order-notes"},
                   {"input", {{"orderId", "W-1"}, {"note", "first"}}}},
                  "key-waits");
  ASSERT_EQ(started.status, 200u) << started.body;
  EXPECT_EQ(started.value["status"], "waiting");
  auto hook = client.get("/v1/hooks/order:W-1");
  EXPECT_EQ(hook.status, 200u) << hook.body;
  EXPECT_EQ(hook.value["runId"], started.value["id"]);
}

// A waited keyed start keeps its answer in the write that records the run
// completed (or waiting), not in a write of its own: it costs the fsync'd
// groups of the same start without a key. The answer replays byte for byte,
// across a restart too, and one waiting on a hook is kept as it was then.
TEST_F(ServeTest, AWaitedKeyedStartKeepsItsAnswerInTheRunsSettlingWrite) {
  auto groups = [&] {
    auto metrics = admin().get("/metrics");
    std::string name = "\ndurin_commit_groups_total ";
    auto at = metrics.body.find(name);
    EXPECT_NE(at, std::string::npos) << metrics.body;
    return at == std::string::npos
               ? -1L
               : std::stol(metrics.body.substr(at + name.size()));
  };
  auto client = admin();
  auto before = groups();
  auto plain = client.post("/v1/runs", review("S-1"));
  ASSERT_EQ(plain.status, 200u) << plain.body;
  auto plain_groups = groups() - before;
  before = groups();
  auto keyed = client.post("/v1/runs", review("S-2"), "settle-1");
  ASSERT_EQ(keyed.status, 200u) << keyed.body;
  ASSERT_EQ(keyed.value["status"], "completed");
  EXPECT_EQ(groups() - before, plain_groups);
  json notes = {{"flow", "acme.order-notes"},
                {"input", {{"orderId", "S-W"}, {"note", "n"}}}};
  auto waiting = client.post("/v1/runs", notes, "settle-2");
  ASSERT_EQ(waiting.value["status"], "waiting") << waiting.body;
  ASSERT_EQ(server_->terminate(), 0);
  start();
  auto restarted = admin();
  auto again = restarted.post("/v1/runs", review("S-2"), "settle-1");
  EXPECT_EQ(again.body, keyed.body);
  EXPECT_EQ(again.headers["idempotent-replayed"], "true");
  auto still = restarted.post("/v1/runs", notes, "settle-2");
  EXPECT_EQ(still.body, waiting.body);
  EXPECT_EQ(still.value["status"], "waiting");
}

// A waited start is answered by the thread that sees its run settle; one
// that takes longer than about a second (here a step waiting for a remote
// worker) is handed to a gateway worker, and is answered just the same once
// the run ends: completed, and replayed byte for byte under its key.
TEST_F(ServeTest, AWaitedStartOutlastingItsHandOverIsAnsweredWhenItSettles) {
  json body = {{"flow", "acme.remote-echo"}, {"input", {{"value", "sent"}}}};
  auto waited = std::async(std::launch::async, [&] {
    return admin().post("/v1/runs", body, "slow-1");
  });
  auto client = admin();
  json task;
  for (int i = 0; i < 100 && task.is_null(); ++i) {
    auto polled = client.post("/v1/task-queues/workers/poll",
                              {{"workerId", "w1"}, {"waitMs", 100}});
    ASSERT_EQ(polled.status, 200u) << polled.body;
    task = polled.value["task"];
  }
  ASSERT_FALSE(task.is_null());
  // Handed over to a worker, and still unanswered: the run has not ended.
  const std::string handed = "\ndurin_waited_starts_handed_over_total 1\n";
  bool handed_over = false;
  for (int i = 0; i < 100 && !handed_over; ++i) {
    handed_over = client.get("/metrics").body.find(handed) != std::string::npos;
    if (!handed_over) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ASSERT_TRUE(handed_over);
  ASSERT_EQ(waited.wait_for(std::chrono::seconds(0)),
            std::future_status::timeout);
  auto done = client.post(
      "/v1/tasks/" + task["attemptId"].get<std::string>() + "/complete",
      {{"workerId", "w1"}, {"result", "echoed"}});
  ASSERT_EQ(done.status, 200u) << done.body;
  auto answer = waited.get();
  ASSERT_EQ(answer.status, 200u) << answer.body;
  EXPECT_EQ(answer.value["status"], "completed");
  EXPECT_EQ(answer.value["output"]["value"], "echoed");
  auto again = client.post("/v1/runs", body, "slow-1");
  EXPECT_EQ(again.body, answer.body);
  EXPECT_EQ(again.headers["idempotent-replayed"], "true");
  auto page = client.get("/v1/runs?flow=acme.remote-echo");
  EXPECT_EQ(page.value["runs"].size(), 1u) << page.body;
}

// Waited starts answered from the run's actor keep every rule under load:
// 200 starts on 16 connections, half keyed and each key sent twice at once,
// give one run per key, and every answer is the run ended or a refusal of
// a key still in flight.
TEST_F(ServeTest, ConcurrentWaitedStartsAnswerOncePerRunAndKey) {
  constexpr int clients = 16;
  constexpr int per_client = 12;
  std::vector<std::thread> threads;
  std::mutex mutex;
  std::map<std::string, std::set<std::string>> runs_by_key;
  int unkeyed_runs = 0;
  std::vector<std::string> problems;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      auto client = admin();
      for (int i = 0; i < per_client; ++i) {
        // Clients c and c^1 send the same keys at once.
        std::string key =
            i % 2 == 0 ? ""
                       : "k-" + std::to_string(c / 2) + "-" + std::to_string(i);
        auto answer =
            client.post("/v1/runs",
                        {{"flow", "acme.review-order"},
                         {"input", {{"orderId", key.empty() ? "U" : key}}}},
                        key);
        std::lock_guard lock(mutex);
        if (answer.status == 200u && answer.value["status"] == "completed") {
          if (key.empty()) {
            ++unkeyed_runs;
          } else {
            runs_by_key[key].insert(answer.value["id"].get<std::string>());
          }
        } else if (answer.status != 409u ||
                   answer.code() != "idempotency-key-in-flight") {
          problems.push_back(std::to_string(answer.status) + " " + answer.body);
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  EXPECT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(unkeyed_runs, clients * per_client / 2);
  auto client = admin();
  for (const auto& [key, ids] : runs_by_key) {
    EXPECT_EQ(ids.size(), 1u) << key;
    EXPECT_EQ(runs_for(client, key), 1) << key;
  }
  EXPECT_EQ(runs_for(client, "U"), clients * per_client / 2);
}

// GET /metrics carries durin_runs{status=...}, a gauge of the runs stored
// by status: it moves with the runs and is right again after a restart.
TEST_F(ServeTest, MetricsGaugeRunsByStatusAcrossRestarts) {
  auto gauge = [&](const std::string& status) {
    auto metrics = admin().get("/metrics");
    EXPECT_EQ(metrics.status, 200u);
    std::string name = "durin_runs{status=\"" + status + "\"} ";
    auto at = metrics.body.find(name);
    if (at == std::string::npos) {
      ADD_FAILURE() << "no " << name << " in " << metrics.body;
      return -1L;
    }
    return std::stol(metrics.body.substr(at + name.size()));
  };
  EXPECT_NE(admin().get("/metrics").body.find("# TYPE durin_runs gauge"),
            std::string::npos);
  EXPECT_EQ(gauge("completed"), 0);
  auto client = admin();
  for (int i = 0; i < 3; ++i) {
    auto done = client.post("/v1/runs", review("G-" + std::to_string(i)));
    ASSERT_EQ(done.status, 200u) << done.body;
    ASSERT_EQ(done.value["status"], "completed");
  }
  auto waiting =
      client.post("/v1/runs", {{"flow", "acme.order-notes"},
                               {"input", {{"orderId", "G-W"}, {"note", "n"}}}});
  ASSERT_EQ(waiting.value["status"], "waiting") << waiting.body;
  EXPECT_EQ(gauge("completed"), 3);
  EXPECT_EQ(gauge("waiting"), 1);
  EXPECT_EQ(gauge("pending"), 0);
  EXPECT_EQ(gauge("running"), 0);
  ASSERT_EQ(server_->terminate(), 0);
  start();
  EXPECT_EQ(gauge("completed"), 3);
  EXPECT_EQ(gauge("waiting"), 1);
  auto resumed = admin().post("/v1/hooks/order:G-W/resume",
                              {{"payload", {{"note", "end"}, {"done", true}}}});
  ASSERT_EQ(resumed.status, 200u) << resumed.body;
  EXPECT_TRUE(eventually([&] { return gauge("completed") == 4; }));
  EXPECT_EQ(gauge("waiting"), 0);
  EXPECT_EQ(gauge("running"), 0);
}

// The webhook URL a run of acme.await-webhook published in its history.
std::string webhook_url_of(api_client& client, const std::string& run_id) {
  std::string url;
  eventually([&] {
    auto history = client.get("/v1/runs/" + run_id + "/history");
    auto at = history.body.find("/v1/webhooks/wh_");
    if (at == std::string::npos) {
      return false;
    }
    url = history.body.substr(at, history.body.find('"', at) - at);
    return true;
  });
  return url;
}

// POST /v1/webhooks/{token} needs no API key: it finds the token's tenant
// in the webhook index and hands the run the request's method, headers and
// body. A released token, an unknown one and a plain hook's token answer
// 404 with an empty body; another tenant cannot see the webhook's hook.
TEST_F(ServeTest, WebhookDeliversMethodHeadersAndBodyWithoutAnApiKey) {
  auto client = admin();
  auto tenant = client.post("/v1/tenants", {{"name", "hooks-b"}});
  ASSERT_EQ(tenant.status, 201u) << tenant.body;
  auto other = as(tenant.value["apiKey"]["secret"]);
  auto run = other.post("/v1/runs", {{"flow", "acme.await-webhook"}});
  ASSERT_EQ(run.status, 200u) << run.body;
  EXPECT_EQ(run.value["status"], "waiting");
  std::string id = run.value["id"];
  std::string url = webhook_url_of(other, id);
  ASSERT_FALSE(url.empty());
  std::string token = url.substr(std::string("/v1/webhooks/").size());
  // Another tenant sees no such hook.
  EXPECT_EQ(client.get("/v1/hooks/" + token).status, 404u);
  EXPECT_EQ(other.get("/v1/hooks/" + token).status, 200u);
  api_client anonymous(server_->address(), "");
  auto delivered = anonymous.send(
      "POST", url, R"({"paid":true})",
      {{"Content-Type", "application/json"}, {"X-Signature", "sig-1"}});
  EXPECT_EQ(delivered.status, 202u) << delivered.body;
  ASSERT_TRUE(eventually([&] {
    return other.get("/v1/runs/" + id).value["status"] == "completed";
  }));
  auto output = other.get("/v1/runs/" + id).value["output"];
  EXPECT_EQ(output["method"], "POST");
  EXPECT_EQ(output["headers"]["x-signature"], "sig-1");
  EXPECT_EQ(output["body"], json({{"paid", true}}));
  // Released with the run: 404, empty body.
  ASSERT_TRUE(eventually([&] {
    auto again = anonymous.post(url, json::object());
    return again.status == 404u && again.body.empty();
  }));
  auto unknown = anonymous.post("/v1/webhooks/wh_nothing", json::object());
  EXPECT_EQ(unknown.status, 404u);
  EXPECT_TRUE(unknown.body.empty());
  // A plain hook's token is not a webhook, even when it looks like one.
  auto plain =
      client.post("/v1/runs", {{"flow", "acme.order-notes"},
                               {"input", {{"orderId", "P-1"}, {"note", "n"}}},
                               {"hook", {{"token", "wh_plain"}}}});
  ASSERT_EQ(plain.status, 200u) << plain.body;
  auto refused = anonymous.post("/v1/webhooks/wh_plain", json::object());
  EXPECT_EQ(refused.status, 404u);
  EXPECT_TRUE(refused.body.empty());
}

// Rule 4: the same key with another body, other options or another route is
// a conflict and starts nothing; spacing and key order do not matter.
TEST_F(ServeTest, Rule4_SameKeyWithADifferentRequestIsAConflict) {
  auto client = admin();
  auto first = client.post("/v1/runs", review("D-1"), "key-d");
  ASSERT_EQ(first.status, 200u);
  auto other_body = client.post("/v1/runs", review("D-2"), "key-d");
  EXPECT_EQ(other_body.status, 409u);
  EXPECT_EQ(other_body.code(), "conflict");
  EXPECT_EQ(other_body.value["message"], conflict_text);
  json other_options = review("D-1");
  other_options["wait"] = false;
  EXPECT_EQ(client.post("/v1/runs", other_options, "key-d").code(), "conflict");
  std::string id = first.value["id"];
  EXPECT_EQ(
      client.post("/v1/runs/" + id + "/cancel", json::object(), "key-d").code(),
      "conflict");
  auto reordered = client.send("POST", "/v1/runs",
                               "{ \"input\" : {\"orderId\":\"D-1\"},\n  "
                               "\"flow\":\"acme.review-order\" }",
                               {{"Idempotency-Key", "key-d"}});
  EXPECT_EQ(reordered.status, 200u);
  EXPECT_EQ(reordered.body, first.body);
  EXPECT_EQ(runs_for(client, "D-2"), 0);
  EXPECT_EQ(runs_for(client, "D-1"), 1);
}

// Rule 5: refused requests keep nothing; the key works once the cause is
// fixed.
TEST_F(ServeTest, Rule5_OnlySuccessfulAnswersAreKept) {
  auto client = admin();
  auto missing = client.post(
      "/v1/runs", {{"flow", "acme.not-yet"}, {"input", json::object()}},
      "key-e");
  EXPECT_EQ(missing.status, 404u);
  EXPECT_EQ(missing.code(), "flow-not-found");
  auto bad = client.post("/v1/runs", {{"flow", 7}}, "key-e");
  EXPECT_EQ(bad.status, 400u);
  EXPECT_EQ(bad.code(), "invalid-argument");
  auto fixed = client.post("/v1/runs", review("E-1"), "key-e");
  EXPECT_EQ(fixed.status, 200u) << fixed.body;
  EXPECT_EQ(fixed.headers.count("idempotent-replayed"), 0u);
  auto gone = client.post("/v1/runs/run_nope/cancel", json::object(), "key-e2");
  EXPECT_EQ(gone.code(), "run-not-found");
  auto works = client.post("/v1/runs", review("E-2"), "key-e2");
  EXPECT_EQ(works.status, 200u) << works.body;
}

// Rule 6: keys are per tenant and per caller.
TEST_F(ServeTest, Rule6_KeysArePerTenantAndPerCaller) {
  auto client = admin();
  auto mine = client.post("/v1/runs", review("F-1"), "key-f");
  ASSERT_EQ(mine.status, 200u);
  auto second = client.post("/v1/api-keys", {{"name", "second"}});
  ASSERT_EQ(second.status, 201u) << second.body;
  auto colleague = as(second.value["secret"]);
  auto theirs = colleague.post("/v1/runs", review("F-1"), "key-f");
  ASSERT_EQ(theirs.status, 200u);
  EXPECT_EQ(theirs.headers.count("idempotent-replayed"), 0u);
  EXPECT_NE(theirs.value["id"], mine.value["id"]);
  auto tenant = client.post("/v1/tenants", {{"name", "other"}});
  ASSERT_EQ(tenant.status, 201u) << tenant.body;
  auto stranger = as(tenant.value["apiKey"]["secret"]);
  auto foreign = stranger.post("/v1/runs", review("F-1"), "key-f");
  ASSERT_EQ(foreign.status, 200u);
  EXPECT_NE(foreign.value["id"], mine.value["id"]);
  EXPECT_EQ(runs_for(client, "F-1"), 2);
  EXPECT_EQ(runs_for(stranger, "F-1"), 1);
}

// Rule 7: an answer with a secret is never kept; a retry is refused with
// idempotency-key-replay-withheld and creates nothing.
TEST_F(ServeTest, Rule7_SecretsAreNeverReplayed) {
  auto client = admin();
  auto created = client.post("/v1/api-keys", {{"name", "ci"}}, "key-g");
  ASSERT_EQ(created.status, 201u) << created.body;
  std::string secret = created.value["secret"];
  auto retry = client.post("/v1/api-keys", {{"name", "ci"}}, "key-g");
  EXPECT_EQ(retry.status, 409u);
  EXPECT_EQ(retry.code(), "idempotency-key-replay-withheld");
  EXPECT_NE(retry.value["message"].get<std::string>().find("succeeded at"),
            std::string::npos);
  EXPECT_EQ(retry.body.find(secret), std::string::npos);
  auto keys = client.get("/v1/api-keys");
  EXPECT_EQ(keys.value["apiKeys"].size(), 2u) << keys.body;  // admin + ci
  auto tenant = client.post("/v1/tenants", {{"name", "t"}}, "key-h");
  ASSERT_EQ(tenant.status, 201u);
  auto again = client.post("/v1/tenants", {{"name", "t"}}, "key-h");
  EXPECT_EQ(again.code(), "idempotency-key-replay-withheld");
  EXPECT_EQ(
      again.body.find(tenant.value["apiKey"]["secret"].get<std::string>()),
      std::string::npos);
}

// Rule 8: kept keys survive a restart (they are in the `requests` family).
TEST_F(ServeTest, Rule8_KeptAnswersSurviveARestart) {
  std::string body;
  {
    auto client = admin();
    body = client.post("/v1/runs", review("H-1"), "key-h").body;
  }
  ASSERT_EQ(server_->terminate(), 0);
  start();
  auto client = admin();
  auto replay = client.post("/v1/runs", review("H-1"), "key-h");
  EXPECT_EQ(replay.body, body);
  EXPECT_EQ(replay.headers["idempotent-replayed"], "true");
}

// 64 clients send the same keyed start at once: one run; every answer is the
// run or idempotency-key-in-flight.
TEST_F(ServeTest, RaceOf64SameKeyStartsGivesOneRun) {
  constexpr int clients = 64;
  std::vector<api_client::answer> answers(clients);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      auto client = admin();
      (void)client.get("/healthz");  // connect first
      ready.fetch_add(1);
      while (ready.load() < clients) {
        std::this_thread::yield();
      }
      answers[i] = client.post("/v1/runs", review("R-1"), "key-race");
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  std::string id;
  int runs = 0;
  for (auto& answer : answers) {
    if (answer.status == 200) {
      ++runs;
      if (id.empty()) {
        id = answer.value["id"];
      }
      EXPECT_EQ(answer.value["id"], id);
    } else {
      EXPECT_EQ(answer.status, 409u) << answer.body << answer.error;
      EXPECT_EQ(answer.code(), "idempotency-key-in-flight");
    }
  }
  EXPECT_GE(runs, 1);
  auto client = admin();
  EXPECT_EQ(runs_for(client, "R-1"), 1);
}

// Runs: start (waited), get, history, list with filters and cursor. `id`
// is the first run's.
void expect_run_routes(api_client& client, std::string& id) {
  auto run = client.post("/v1/runs", review("K-1"));
  ASSERT_EQ(run.status, 200u);
  for (auto field : {"id", "flow", "status", "input", "output", "error",
                     "createdAt", "startedAt", "completedAt"}) {
    EXPECT_TRUE(run.value.contains(field)) << field;
  }
  EXPECT_EQ(run.value["output"]["orderId"], "K-1");
  std::string created = run.value["createdAt"];
  EXPECT_EQ(created.size(), 24u) << created;  // 2026-01-01T00:00:00.000Z
  id = run.value["id"].get<std::string>();
  EXPECT_EQ(client.get("/v1/runs/" + id).value["id"], id);
  auto history = client.get("/v1/runs/" + id + "/history");
  ASSERT_EQ(history.status, 200u);
  EXPECT_GE(history.value["events"].size(), 2u);
  EXPECT_EQ(history.value["events"][0]["sequence"], 1);
  (void)client.post("/v1/runs", review("K-2"));
  auto page = client.get("/v1/runs?limit=1&flow=acme.review-order");
  ASSERT_EQ(page.value["runs"].size(), 1u);
  EXPECT_EQ(page.value["runs"][0]["input"]["orderId"], "K-2");  // newest
  std::string cursor = page.value["nextCursor"];
  auto next = client.get("/v1/runs?limit=1&cursor=" + cursor);
  EXPECT_EQ(next.value["runs"][0]["input"]["orderId"], "K-1");
  EXPECT_EQ(client.get("/v1/runs?status=completed").value["runs"].size(), 2u);
  EXPECT_EQ(client.get("/v1/runs?status=bogus").code(), "invalid-argument");
  // A cursor no list gave is refused, not read as an empty last page.
  auto garbage = client.get("/v1/runs?cursor=not-a-cursor");
  EXPECT_EQ(garbage.status, 400u);
  EXPECT_EQ(garbage.code(), "invalid-argument");
  EXPECT_NE(garbage.value["message"].get<std::string>().find("cursor"),
            std::string::npos);
}

// Cancel a sleeping run (replayed with its key, refused once finished), a
// retried step, an unknown run.
void expect_cancel_routes(api_client& client) {
  auto sleeper = client.post(
      "/v1/runs", {{"flow", "acme.sleep"}, {"input", {{"ms", 600000}}}});
  ASSERT_EQ(sleeper.status, 200u) << sleeper.body;
  EXPECT_EQ(sleeper.value["status"], "waiting");
  std::string sleeper_id = sleeper.value["id"];
  auto cancelled = client.post("/v1/runs/" + sleeper_id + "/cancel",
                               {{"reason", "test"}}, "cancel-1");
  EXPECT_EQ(cancelled.status, 200u) << cancelled.body;
  EXPECT_EQ(cancelled.value["status"], "cancelled");
  auto replayed = client.post("/v1/runs/" + sleeper_id + "/cancel",
                              {{"reason", "test"}}, "cancel-1");
  EXPECT_EQ(replayed.body, cancelled.body);
  auto twice =
      client.post("/v1/runs/" + sleeper_id + "/cancel", json::object());
  EXPECT_EQ(twice.status, 409u);
  EXPECT_EQ(twice.code(), "run-finished");
  auto flaky = client.post(
      "/v1/runs", {{"flow", "acme.flaky"}, {"input", {{"failures", 1}}}});
  ASSERT_EQ(flaky.status, 200u) << flaky.body;
  EXPECT_TRUE(flaky.value["status"] == "completed" ||
              flaky.value["status"] == "waiting");
  EXPECT_EQ(client.get("/v1/runs/run_missing").code(), "run-not-found");
  EXPECT_EQ(client.get("/v1/runs/run_missing").status, 404u);
}

// Every route answers as documented, with tenants isolated.
TEST_F(ServeTest, RoutesAnswerAsDocumented) {
  auto client = admin();
  auto health = api_client(server_->address(), "").get("/healthz");
  EXPECT_EQ(health.status, 200u);
  std::string id;
  ASSERT_NO_FATAL_FAILURE(expect_run_routes(client, id));
  ASSERT_NO_FATAL_FAILURE(expect_cancel_routes(client));
  // Another tenant sees none of it.
  auto tenant = client.post("/v1/tenants", {{"name", "acme"}});
  ASSERT_EQ(tenant.status, 201u);
  EXPECT_TRUE(tenant.value["id"].is_string());
  EXPECT_TRUE(tenant.value["apiKey"]["id"].is_string());
  auto stranger = as(tenant.value["apiKey"]["secret"]);
  EXPECT_EQ(stranger.get("/v1/runs/" + id).code(), "run-not-found");
  EXPECT_EQ(stranger.get("/v1/runs/" + id + "/history").code(),
            "run-not-found");
  EXPECT_EQ(stranger.post("/v1/runs/" + id + "/cancel", json::object()).code(),
            "run-not-found");
  EXPECT_EQ(stranger.get("/v1/runs").value["runs"].size(), 0u);
  EXPECT_EQ(stranger.post("/v1/tenants", {{"name", "x"}}).status, 403u);
  // Keys: create, list, revoke; a revoked key is refused.
  auto key = client.post("/v1/api-keys", {{"name", "temp"}});
  ASSERT_EQ(key.status, 201u);
  for (auto field : {"id", "name", "secret", "createdAt"}) {
    EXPECT_TRUE(key.value.contains(field)) << field;
  }
  auto temp = as(key.value["secret"]);
  EXPECT_EQ(temp.get("/v1/runs").status, 200u);
  std::string key_id = key.value["id"];
  EXPECT_EQ(stranger.send("DELETE", "/v1/api-keys/" + key_id).code(),
            "api-key-not-found");
  EXPECT_EQ(client.send("DELETE", "/v1/api-keys/" + key_id).status, 200u);
  EXPECT_EQ(temp.get("/v1/runs").status, 401u);
  // Revoked already: the same revocation again (a retry converges).
  EXPECT_EQ(client.send("DELETE", "/v1/api-keys/" + key_id).status, 200u);
  EXPECT_EQ(temp.get("/v1/runs").status, 401u);
  // Metrics.
  auto metrics = client.get("/metrics");
  EXPECT_EQ(metrics.status, 200u);
  EXPECT_NE(metrics.body.find("durin_http_requests_total"), std::string::npos);
  EXPECT_NE(metrics.body.find("durin_commit_batches_per_group"),
            std::string::npos);
  // Webhooks: an unknown token is 404 with an empty body, without a key.
  auto unknown = api_client(server_->address(), "")
                     .post("/v1/webhooks/wh_unknown", json::object());
  EXPECT_EQ(unknown.status, 404u);
  EXPECT_TRUE(unknown.body.empty());
}

// Verified API keys are cached in memory; a DELETE that has answered still
// refuses the key at once, on every path that authenticates (reads on the
// io thread, background starts, replays, worker-pool routes).
TEST_F(ServeTest, RevokedKeyIsRefusedAtOnceThoughKeysAreCached) {
  auto client = admin();
  auto key = client.post("/v1/api-keys", {{"name", "cached"}});
  ASSERT_EQ(key.status, 201u) << key.body;
  auto temp = as(key.value["secret"]);
  auto start = review("CACHED-1");
  start["wait"] = false;
  for (int round = 0; round < 3; ++round) {  // warm every path's cache
    ASSERT_EQ(temp.get("/v1/runs").status, 200u);
    ASSERT_EQ(temp.post("/v1/runs", start, "cached-key").status, 202u);
  }
  ASSERT_EQ(
      client.send("DELETE", "/v1/api-keys/" + std::string(key.value["id"]))
          .status,
      200u);
  EXPECT_EQ(temp.get("/v1/runs").status, 401u);
  EXPECT_EQ(temp.post("/v1/runs", start, "cached-key").status, 401u);
  EXPECT_EQ(temp.post("/v1/runs", start, "another-key").status, 401u);
  EXPECT_EQ(temp.post("/v1/runs", review("CACHED-2")).status, 401u);
  EXPECT_EQ(runs_for(client, "CACHED-2"), 0);
  // The admin key, cached too, is unaffected.
  EXPECT_EQ(client.get("/v1/runs").status, 200u);
}

// Hooks: a waiting run's hook by token, resume (idempotent with a key), a
// start hook, hook-conflict naming the owner, tenants isolated.
TEST_F(ServeTest, HookRoutesResumeAndConflict) {
  auto client = admin();
  auto run = client.post("/v1/runs",
                         {{"flow", "acme.order-notes"},
                          {"input", {{"orderId", "N-1"}, {"note", "first"}}}});
  if (run.code() == "flow-not-found") {
    GTEST_SKIP() << "acme.order-notes is not registered on this build";
  }
  ASSERT_EQ(run.status, 200u) << run.body;
  EXPECT_EQ(run.value["status"], "waiting");
  std::string id = run.value["id"];
  auto hook = client.get("/v1/hooks/order:N-1");
  ASSERT_EQ(hook.status, 200u) << hook.body;
  EXPECT_EQ(hook.value["runId"], id);
  auto tenant = client.post("/v1/tenants", {{"name", "other"}});
  auto stranger = as(tenant.value["apiKey"]["secret"]);
  EXPECT_EQ(stranger.get("/v1/hooks/order:N-1").code(), "hook-not-found");
  EXPECT_EQ(
      stranger.post("/v1/hooks/order:N-1/resume", {{"payload", 1}}).code(),
      "hook-not-found");
  auto resumed = client.post(
      "/v1/hooks/order:N-1/resume",
      {{"payload", {{"note", "second"}, {"done", true}}}}, "resume-1");
  ASSERT_EQ(resumed.status, 200u) << resumed.body;
  EXPECT_EQ(resumed.value["runId"], id);
  auto again = client.post("/v1/hooks/order:N-1/resume",
                           {{"payload", {{"note", "second"}, {"done", true}}}},
                           "resume-1");
  EXPECT_EQ(again.body, resumed.body);
  EXPECT_EQ(again.headers["idempotent-replayed"], "true");
  ASSERT_TRUE(eventually([&] {
    return client.get("/v1/runs/" + id).value["status"] == "completed";
  }));
  auto done = client.get("/v1/runs/" + id);
  EXPECT_EQ(done.value["output"]["notes"].size(), 2u) << done.body;
  EXPECT_EQ(client.post("/v1/hooks/nobody/resume", {{"payload", 1}}).code(),
            "hook-not-found");
  EXPECT_EQ(client.post("/v1/hooks/x/resume", json::object()).code(),
            "invalid-argument");
  // A start hook: the token is held by the run; a second start on it is a
  // hook-conflict naming the owner, and keeps nothing.
  json with_hook = {
      {"flow", "acme.order-notes"},
      {"input", {{"orderId", "N-2"}, {"note", "a"}}},
      {"wait", false},
      {"hook", {{"token", "order:N-2"}, {"metadata", {{"shop", "x"}}}}}};
  auto owner = client.post("/v1/runs", with_hook, "hook-key");
  ASSERT_EQ(owner.status, 202u) << owner.body;
  auto meta = client.get("/v1/hooks/order:N-2");
  EXPECT_EQ(meta.value["metadata"]["shop"], "x") << meta.body;
  auto conflict = client.post("/v1/runs", with_hook, "hook-key-2");
  EXPECT_EQ(conflict.status, 409u) << conflict.body;
  EXPECT_EQ(conflict.code(), "hook-conflict");
  EXPECT_EQ(conflict.value["conflictingRunId"], owner.value["id"]);
  EXPECT_EQ(client.post("/v1/runs", with_hook, "hook-key-2").code(),
            "hook-conflict");  // nothing kept
  EXPECT_EQ(client
                .post("/v1/runs",
                      {{"flow", "acme.order-notes"}, {"hook", {{"token", 5}}}})
                .code(),
            "invalid-argument");
}

// Bad input of every kind gets a clear error and changes nothing.
TEST_F(ServeTest, BadInputIsRefusedClearly) {
  auto client = admin();
  auto expect = [&](const api_client::answer& answer, unsigned status,
                    const std::string& code) {
    EXPECT_EQ(answer.status, status) << answer.body << answer.error;
    EXPECT_EQ(answer.code(), code) << answer.body;
    EXPECT_TRUE(answer.value.is_object() &&
                !answer.value.value("message", "").empty())
        << answer.body;
  };
  expect(client.send("POST", "/v1/runs", "{\"flow\":"), 400, "invalid-json");
  expect(client.send("POST", "/v1/runs", "[1,2]"), 400, "invalid-argument");
  expect(client.post("/v1/runs", {{"flow", 1}}), 400, "invalid-argument");
  expect(client.post("/v1/runs", {{"input", {}}}), 400, "invalid-argument");
  expect(client.post("/v1/runs", {{"flow", "acme.sleep"}, {"wait", "yes"}}),
         400, "invalid-argument");
  expect(client.post("/v1/runs", {{"flow", "acme.sleep"}, {"extra", 1}}), 400,
         "invalid-argument");
  expect(client.send("POST", "/v1/runs",
                     "{\"flow\":\"acme.review-order\",\"input\":{\"orderId\":"
                     "\"\xff\xfe\"}}"),
         400, "invalid-json");
  expect(client.send("POST", "/v1/runs", std::string(2 << 20, ' ')), 413,
         "payload-too-large");
  std::string deep(200, '[');
  expect(client.send("POST", "/v1/runs", "{\"flow\":" + deep), 400,
         "invalid-json");
  expect(client.post("/v1/runs", review("x"), std::string(300, 'k')), 400,
         "invalid-argument");
  expect(api_client(server_->address(), "").get("/v1/runs"), 401,
         "unauthorized");
  expect(api_client(server_->address(), "wrong").get("/v1/runs"), 401,
         "unauthorized");
  expect(api_client(server_->address(),
                    "dk_key_0000000000000000_" + std::string(64, '0'))
             .get("/v1/runs"),
         401, "unauthorized");
  for (auto target : {"/v1/runs/../api-keys", "/v1/runs/%2e%2e", "//v1/runs",
                      "/v1/runs/a%2Fb", "/v1/runs/%zz", "/v1/runs/a%00b"}) {
    expect(client.get(target), 400, "invalid-path");
  }
  expect(client.get("/v1/nothing"), 404, "not-found");
  expect(client.send("PUT", "/v1/runs"), 405, "method-not-allowed");
  expect(client.get("/v1/runs?limit=0"), 400, "invalid-argument");
  expect(client.get("/v1/runs?limit=abc"), 400, "invalid-argument");
  expect(client.get("/v1/runs?bogus=1"), 400, "invalid-argument");
  EXPECT_EQ(client.get("/v1/runs").value["runs"].size(), 0u);
}

// Every route takes the query parameters it documents, each once: another
// name, or one given twice, is 400 naming it, before the body is read or a
// key is held, so nothing changes. A webhook, the probes and the metrics
// take any (their callers add their own).
TEST_F(ServeTest, UnknownOrRepeatedQueryParametersAreRefusedOnEveryRoute) {
  auto client = admin();
  auto started = client.post("/v1/runs", review("Q-1"));
  ASSERT_EQ(started.status, 200u) << started.body;
  const std::string run = "/v1/runs/" + started.value["id"].get<std::string>();
  auto refused = [&](const std::string& target, const std::string& needle) {
    auto answer = client.get(target);
    EXPECT_EQ(answer.status, 400u) << target << answer.body;
    EXPECT_EQ(answer.code(), "invalid-argument") << answer.body;
    EXPECT_NE(answer.value.value("message", "").find(needle), std::string::npos)
        << answer.body;
  };
  for (const auto& target : std::vector<std::string>{
           "/v1/runs", run, run + "/history", run + "/queries/value",
           "/v1/run-counts", "/v1/instances/i-1", "/v1/hooks/t-1",
           "/v1/api-keys", "/v1/schedules", "/v1/schedules/s-1", "/v1/tasks"}) {
    refused(target + "?bogus=1", "unknown query parameter 'bogus'");
  }
  refused("/v1/hooks/t-1?x=1", "GET /v1/hooks/t-1 takes no query");
  refused(run + "?y=1", "takes waitMs");
  refused("/v1/runs?limit=1&flow=a&limit=2",
          "query parameter 'limit' is given more than once");
  refused("/v1/tasks?runId=", "runId must be a run id of 1 to 128");
  // A mutating route with a stray parameter changes nothing, and its key
  // stays free for the request as meant.
  auto stray = client.send("POST", "/v1/runs?wait=false", review("Q-2").dump(),
                           {{"Idempotency-Key", "key-q2"}});
  EXPECT_EQ(stray.status, 400u) << stray.body;
  EXPECT_EQ(runs_for(client, "Q-2"), 0);
  auto meant = client.post("/v1/runs", review("Q-2"), "key-q2");
  EXPECT_EQ(meant.status, 200u) << meant.body;
  EXPECT_EQ(runs_for(client, "Q-2"), 1);
  EXPECT_EQ(client.get("/healthz?probe=1").status, 200u);
  EXPECT_EQ(client.get("/readyz?probe=1").status, 200u);
  EXPECT_EQ(client.get("/metrics?scrape=1").status, 200u);
  auto page = client.get("/v1/runs?limit=1&flow=acme.review-order");
  EXPECT_EQ(page.status, 200u) << page.body;
  EXPECT_EQ(page.value["runs"].size(), 1u);
}

// Slow and half-closed connections are timed out or closed; the server
// keeps serving.
TEST_F(ServeTest, SlowAndHalfClosedConnectionsAreClosed) {
  namespace asio = boost::asio;
  asio::io_context io;
  auto connect = [&] {
    asio::ip::tcp::socket socket(io);
    socket.connect({asio::ip::make_address("127.0.0.1"),
                    static_cast<unsigned short>(server_->port())});
    return socket;
  };
  auto read_all = [](asio::ip::tcp::socket& socket) {
    std::string text;
    boost::system::error_code ec;
    char chunk[4096];
    for (;;) {
      auto got = socket.read_some(asio::buffer(chunk), ec);
      if (ec) {
        break;
      }
      text.append(chunk, got);
    }
    return text;
  };
  {
    auto slow = connect();
    asio::write(slow, asio::buffer(std::string("POST /v1/runs HTTP/1.1\r\n")));
    auto started = std::chrono::steady_clock::now();
    auto text = read_all(slow);  // the server answers 408 and closes
    EXPECT_NE(text.find("408"), std::string::npos) << text;
    EXPECT_NE(text.find("request-timeout"), std::string::npos) << text;
    EXPECT_LT(std::chrono::steady_clock::now() - started,
              std::chrono::seconds(5));
  }
  {
    auto slow_body = connect();
    asio::write(slow_body,
                asio::buffer(std::string("POST /v1/runs HTTP/1.1\r\nHost: x\r\n"
                                         "Content-Length: 100\r\n\r\n{")));
    auto text = read_all(slow_body);
    EXPECT_NE(text.find("408"), std::string::npos) << text;
  }
  {
    auto half = connect();
    asio::write(half, asio::buffer(std::string("GET /v1/ru")));
    half.shutdown(asio::ip::tcp::socket::shutdown_send);
    auto text = read_all(half);  // closed, perhaps with an error answer
    EXPECT_EQ(text.find("200 OK"), std::string::npos) << text;
  }
  {
    auto idle = connect();
    auto text = read_all(idle);  // closed after the read timeout
    EXPECT_TRUE(text.empty()) << text;
  }
  {
    auto garbage = connect();
    asio::write(garbage,
                asio::buffer(std::string("HELLO\x01\x02 world\r\n\r\n")));
    auto text = read_all(garbage);
    EXPECT_NE(text.find("400"), std::string::npos) << text;
  }
  auto client = admin();
  EXPECT_EQ(client.get("/healthz").status, 200u);
  EXPECT_EQ(client.get("/v1/runs").value["runs"].size(), 0u);
}

// SIGTERM stops the server cleanly; what it acknowledged is still there.
TEST_F(ServeTest, SigtermStopsCleanly) {
  std::string id;
  {
    auto client = admin();
    id = client.post("/v1/runs", review("S-1"), "key-s").value["id"];
  }
  EXPECT_EQ(server_->terminate(), 0);
  start();
  auto client = admin();
  EXPECT_EQ(client.get("/v1/runs/" + id).value["status"], "completed");
}

// The seed's CLI example, run twice: the same id and createdAt.
TEST_F(ServeTest, CliStartWithIdempotencyKeyTwicePrintsTheSameRun) {
  auto run_cli = [&] {
    auto ran = run_durin(
        "runs start --flow=acme.review-order "
        "--input='{\"orderId\":\"A-100\"}' "
        "--idempotency-key=order-A-100-review --server http://127.0.0.1:" +
        std::to_string(server_->port()) + " --data-dir " + dir_.path());
    EXPECT_EQ(ran.code, 0) << ran.output;
    return json::parse(ran.output);
  };
  auto first = run_cli();
  auto second = run_cli();
  EXPECT_EQ(first["id"], second["id"]);
  EXPECT_EQ(first["createdAt"], second["createdAt"]);
  EXPECT_EQ(first["status"], "completed");
  // Errors: code: message on stderr, non-zero exit.
  auto missing = run_durin("runs get run_missing --server http://127.0.0.1:" +
                           std::to_string(server_->port()) + " --data-dir " +
                           dir_.path() + " 2>&1");
  EXPECT_NE(missing.code, 0);
  EXPECT_EQ(missing.output.rfind("run-not-found: ", 0), 0u) << missing.output;
}

}  // namespace
}  // namespace durin::testing

namespace durin::testing {
namespace {

// The CLI refuses numbers out of their documented range before it sends
// or opens anything (a page size, a worker's concurrency, `durin run`'s
// timeout), and `durin serve` refuses
// a read timeout that is not positive or a negative drain timeout before
// it opens its store.
TEST_F(ServeTest, CliNumbersOutOfRangeAreRefusedBeforeAnythingIsSent) {
  const std::string server =
      " --server http://127.0.0.1:" + std::to_string(server_->port()) +
      " --data-dir " + dir_.path() + " 2>&1";
  for (const std::string args :
       {"runs list --limit 0", "runs list --limit -5", "runs list --limit 1001",
        "schedules list --limit 0", "worker --concurrency 0",
        "worker --concurrency -1", "worker --concurrency 257",
        "runs list --timeout-ms -1", "runs list --timeout-ms 0"}) {
    auto ran = run_durin(args + server);
    EXPECT_NE(ran.code, 0) << args;
    EXPECT_NE(ran.output.find("not in range"), std::string::npos)
        << args << ": " << ran.output;
  }
  auto listed = run_durin("runs list --limit 1000" + server);
  EXPECT_EQ(listed.code, 0) << listed.output;
  temp_dir untouched;
  auto run = run_durin("run acme.sleep --timeout-ms -5 --data-dir " +
                       untouched.path() + "/db 2>&1");
  EXPECT_NE(run.code, 0);
  EXPECT_NE(run.output.find("not in range"), std::string::npos) << run.output;
  EXPECT_FALSE(std::filesystem::exists(untouched.path() + "/db"));
  // A wide timeout in range is taken (it used to overflow an int).
  auto wide = run_durin("run acme.sleep --timeout-ms 5000000000 --data-dir " +
                        untouched.path() + "/wide 2>&1");
  EXPECT_EQ(wide.output.find("not in range"), std::string::npos) << wide.output;
  EXPECT_EQ(wide.output.find("Could not convert"), std::string::npos)
      << wide.output;
  temp_dir other;
  // Sizes are checked as signed numbers: -1 is no "unlimited".
  for (const std::string args :
       {"--max-connections -1", "--max-polls-per-tenant -1",
        "--max-polls-per-tenant 0"}) {
    auto ran = run_durin("serve --listen 127.0.0.1:0 --data-dir " +
                         other.path() + " " + args + " 2>&1");
    EXPECT_NE(ran.code, 0) << args;
    EXPECT_NE(ran.output.find("not in range"), std::string::npos)
        << args << ": " << ran.output;
  }
  for (const auto& [flag, value, says] :
       {std::tuple<std::string, std::string, std::string>{
            "--read-timeout-ms", "0", "--read-timeout-ms must be positive"},
        {"--read-timeout-ms", "-1", "--read-timeout-ms: a duration of -1 ms"},
        {"--drain-timeout-ms", "-1",
         "--drain-timeout-ms: a duration of -1 ms"}}) {
    auto ran = run_durin("serve --listen 127.0.0.1:0 --data-dir " +
                         other.path() + " " + flag + " " + value + " 2>&1");
    EXPECT_EQ(ran.code, 2) << flag << " " << value;
    EXPECT_NE(ran.output.find("invalid-argument: " + says), std::string::npos)
        << ran.output;
  }
  EXPECT_FALSE(std::filesystem::exists(other.path() + "/admin.key"));
}

// A word that names no command is named, with the commands there are
// (CLI11 alone said "A subcommand is required"); an option that would be
// dropped (--min-retention without its token) is refused.
TEST_F(ServeTest, AWordThatNamesNoCommandIsNamedWithTheCommands) {
  auto top = run_durin("bogus 2>&1");
  EXPECT_EQ(top.code, 2) << top.output;
  EXPECT_NE(top.output.find("invalid-argument: 'bogus' is no command of "
                            "durin; its commands: run, serve"),
            std::string::npos)
      << top.output;
  auto nested = run_durin("runs lst 2>&1");
  EXPECT_EQ(nested.code, 2) << nested.output;
  EXPECT_NE(nested.output.find("'lst' is no command of durin runs"),
            std::string::npos)
      << nested.output;
  EXPECT_NE(nested.output.find("list"), std::string::npos) << nested.output;
  auto bare = run_durin("runs 2>&1");
  EXPECT_NE(bare.code, 0);
  EXPECT_NE(bare.output.find("A subcommand is required"), std::string::npos)
      << bare.output;
  auto retention = run_durin(
      "runs start --flow acme.sleep --min-retention 1h --server "
      "http://127.0.0.1:" +
      std::to_string(server_->port()) + " --data-dir " + dir_.path() + " 2>&1");
  EXPECT_NE(retention.code, 0);
  EXPECT_NE(retention.output.find(
                "invalid-argument: --min-retention needs --hook-token"),
            std::string::npos)
      << retention.output;
}

// A --server the client cannot speak to is refused, saying why, before
// anything is sent; a server that is not there is `unavailable` (nothing
// reached it), not `shutting-down`.
TEST_F(ServeTest, AServerUrlIsCheckedAndAnAbsentServerIsUnavailable) {
  for (const auto& [url, says] :
       std::vector<std::pair<std::string, std::string>>{
           {"https://127.0.0.1:7070", "only http is spoken"},
           {"ftp://127.0.0.1:7070", "only http is spoken"},
           {"http://127.0.0.1:7070/prefix", "no path"},
           {"http://127.0.0.1:99999", "a port from 1 to 65535"},
           {"http://127.0.0.1:http", "a port from 1 to 65535"},
           {"http://127.0.0.1", "a host and a port"}}) {
    auto ran = run_durin("runs list --api-key k --server " + url + " 2>&1");
    EXPECT_NE(ran.code, 0) << url;
    EXPECT_NE(ran.output.find(
                  "invalid-argument: a server is http://host:port (" + says),
              std::string::npos)
        << url << ": " << ran.output;
  }
  auto absent =
      run_durin("runs list --api-key k --server http://127.0.0.1:1 2>&1");
  EXPECT_NE(absent.code, 0);
  EXPECT_EQ(absent.output.rfind("unavailable: cannot connect", 0), 0u)
      << absent.output;
}

// A header value with a line break (a key file saved with CRLF, a pasted
// key) would smuggle in another header: the CLI refuses it, naming it,
// and sends nothing.
TEST_F(ServeTest, AHeaderValueWithALineBreakIsRefusedByTheClient) {
  const std::string server =
      " --server http://127.0.0.1:" + std::to_string(server_->port()) + " 2>&1";
  auto ran = run_durin(
      "runs list --api-key \"$(printf 'abc\\r\\nX-Injected: yes')\"" + server);
  EXPECT_NE(ran.code, 0) << ran.output;
  EXPECT_NE(ran.output.find("invalid-argument: the Authorization header's "
                            "value may not contain a line break"),
            std::string::npos)
      << ran.output;
  auto keyed = run_durin(
      "runs start --flow acme.sleep --idempotency-key \"$(printf 'a\\nb')\"" +
      server + " --data-dir " + dir_.path());
  EXPECT_NE(keyed.code, 0) << keyed.output;
  EXPECT_NE(keyed.output.find("the Idempotency-Key header's value"),
            std::string::npos)
      << keyed.output;
}

// Issue 5's durable identities over HTTP: an instance id has one active run
// (reject or return the active one), and a repeated command id gets the
// recorded outcome of the start, cancel or resume it names.
TEST_F(ServeTest, InstanceIdsAndCommandIdsOverHttp) {
  auto client = admin();
  json notes = {{"flow", "acme.order-notes"},
                {"input", {{"orderId", "I-1"}, {"note", "first"}}},
                {"wait", false},
                {"instanceId", "order-I-1"}};
  auto first = client.post("/v1/runs", notes);
  ASSERT_EQ(first.status, 202u) << first.body;
  auto id = first.value["id"].get<std::string>();
  EXPECT_EQ(first.value["instanceId"], "order-I-1");
  auto duplicate = client.post("/v1/runs", notes);
  EXPECT_EQ(duplicate.status, 409u) << duplicate.body;
  EXPECT_EQ(duplicate.value["code"], "hook-conflict");
  EXPECT_EQ(duplicate.value["conflictingRunId"], id);
  notes["onDuplicate"] = "return-existing-active";
  auto existing = client.post("/v1/runs", notes);
  ASSERT_EQ(existing.status, 202u) << existing.body;
  EXPECT_EQ(existing.value["id"], id);
  auto found = client.get("/v1/instances/order-I-1");
  ASSERT_EQ(found.status, 200u) << found.body;
  EXPECT_EQ(found.value["id"], id);
  EXPECT_EQ(client.get("/v1/instances/nobody").status, 404u);
  notes["onDuplicate"] = "newest-wins";
  auto bad = client.post("/v1/runs", notes);
  EXPECT_EQ(bad.status, 400u);
  EXPECT_NE(bad.value["message"].get<std::string>().find("onDuplicate"),
            std::string::npos);

  json cancel = {{"commandId", "cancel-I-1"}, {"reason", "test"}};
  auto cancelled = client.post("/v1/runs/" + id + "/cancel", cancel);
  ASSERT_EQ(cancelled.status, 200u) << cancelled.body;
  auto again = client.post("/v1/runs/" + id + "/cancel", cancel);
  ASSERT_EQ(again.status, 200u) << again.body;
  EXPECT_EQ(again.value["completedAt"], cancelled.value["completedAt"]);
  auto other = client.post("/v1/runs/" + id + "/cancel",
                           json{{"commandId", "cancel-I-2"}});
  EXPECT_EQ(other.status, 409u) << other.body;

  json command = {{"flow", "acme.review-order"},
                  {"input", {{"orderId", "I-2"}}},
                  {"wait", false},
                  {"commandId", "start-I-2"}};
  auto once = client.post("/v1/runs", command);
  ASSERT_EQ(once.status, 202u) << once.body;
  auto twice = client.post("/v1/runs", command);
  ASSERT_EQ(twice.status, 202u) << twice.body;
  EXPECT_EQ(twice.value["id"], once.value["id"]);
  EXPECT_EQ(runs_for(client, "I-2"), 1);
}

}  // namespace
}  // namespace durin::testing

namespace durin::testing {
namespace {

// The CLI passes instance and command ids through: a repeated --command-id
// prints the first run, and a second --instance-id start is refused.
TEST_F(ServeTest, CliStartWithInstanceAndCommandIds) {
  auto run_cli = [&](const std::string& args) {
    auto ran = run_durin("runs start " + args + " --server http://127.0.0.1:" +
                         std::to_string(server_->port()) + " --data-dir " +
                         dir_.path() + " 2>&1");
    return std::pair<int, std::string>(ran.code, ran.output);
  };
  const std::string notes =
      "--flow=acme.order-notes --input='{\"orderId\":\"C-1\"}' --no-wait ";
  auto first = run_cli(notes + "--instance-id=order-C-1 --command-id=c1");
  ASSERT_EQ(first.first, 0) << first.second;
  auto id = json::parse(first.second)["id"];
  auto repeat = run_cli(notes + "--instance-id=order-C-1 --command-id=c1");
  ASSERT_EQ(repeat.first, 0) << repeat.second;
  EXPECT_EQ(json::parse(repeat.second)["id"], id);
  auto duplicate = run_cli(notes + "--instance-id=order-C-1");
  EXPECT_NE(duplicate.first, 0);
  EXPECT_EQ(duplicate.second.rfind("hook-conflict: ", 0), 0u)
      << duplicate.second;
  auto existing = run_cli(
      notes + "--instance-id=order-C-1 --on-duplicate=return-existing-active");
  ASSERT_EQ(existing.first, 0) << existing.second;
  EXPECT_EQ(json::parse(existing.second)["id"], id);
}

// An Idempotency-Key header that is empty, or sent twice, is refused as bad
// input (never taken as no key, never the first one silently): nothing runs.
TEST_F(ServeTest, AnEmptyOrRepeatedIdempotencyKeyIsRefused) {
  auto client = admin();
  auto empty = client.send("POST", "/v1/runs", review("K-1").dump(),
                           {{"Idempotency-Key", ""}});
  EXPECT_EQ(empty.status, 400u) << empty.body;
  EXPECT_EQ(empty.code(), "invalid-argument");
  auto twice =
      client.send("POST", "/v1/runs", review("K-1").dump(),
                  {{"Idempotency-Key", "k-1"}, {"Idempotency-Key", "k-2"}});
  EXPECT_EQ(twice.status, 400u) << twice.body;
  EXPECT_EQ(twice.code(), "invalid-argument");
  EXPECT_NE(twice.value["message"].get<std::string>().find("Idempotency-Key"),
            std::string::npos);
  EXPECT_EQ(runs_for(client, "K-1"), 0);
}

// The same request is the same request however it is spelled: another
// Content-Type parameter, other spacing and key order, a default sent
// explicitly. Only another meaning (here "wait": false) is a conflict.
TEST_F(ServeTest, TheFingerprintIsTheRequestsMeaningNotItsSpelling) {
  auto client = admin();
  auto first = client.send(
      "POST", "/v1/runs", review("F-1").dump(),
      {{"Idempotency-Key", "spelled"}, {"Content-Type", "application/json"}});
  ASSERT_EQ(first.status, 200u) << first.body;
  std::string respelled =
      R"({ "input": {"orderId": "F-1"}, "wait": true, "flow": "acme.review-order" })";
  auto again =
      client.send("POST", "/v1/runs", respelled,
                  {{"Idempotency-Key", "spelled"},
                   {"Content-Type", "application/json; charset=utf-8"}});
  EXPECT_EQ(again.status, 200u) << again.body;
  EXPECT_EQ(again.headers["idempotent-replayed"], "true");
  EXPECT_EQ(again.body, first.body);
  json other = review("F-1");
  other["wait"] = false;
  auto changed = client.post("/v1/runs", other, "spelled");
  EXPECT_EQ(changed.status, 409u) << changed.body;
  EXPECT_EQ(changed.code(), "conflict");
  EXPECT_EQ(runs_for(client, "F-1"), 1);
}

// Every default a start takes is its meaning when sent explicitly: the
// duplicate policy, and null for a hook, a memo and search attributes.
TEST_F(ServeTest, TheFingerprintTakesEveryDefaultOfAStartAsSent) {
  auto client = admin();
  json plain = review("F-2");
  plain["wait"] = false;
  auto first = client.post("/v1/runs", plain, "defaults");
  ASSERT_EQ(first.status, 202u) << first.body;
  json spelled = plain;
  spelled["onDuplicate"] = "reject-duplicate";
  spelled["hook"] = nullptr;
  spelled["memo"] = nullptr;
  spelled["searchAttributes"] = nullptr;
  auto again = client.post("/v1/runs", spelled, "defaults");
  EXPECT_EQ(again.status, 202u) << again.body;
  EXPECT_EQ(again.headers["idempotent-replayed"], "true");
  EXPECT_EQ(again.body, first.body);
  spelled["onDuplicate"] = "return-existing-active";
  auto other = client.post("/v1/runs", spelled, "defaults");
  EXPECT_EQ(other.code(), "conflict") << other.body;
  EXPECT_EQ(runs_for(client, "F-2"), 1);
}

// A waited start that finds its instance id held and asks for the active
// run gets that run (it admits nothing of its own, so it is answered from
// the run as it is, not from a settle of its own that never comes).
TEST_F(ServeTest, AWaitedStartOfAHeldInstanceAnswersTheActiveRun) {
  auto client = admin();
  json notes = {{"flow", "acme.order-notes"},
                {"input", {{"orderId", "E-1"}, {"note", "n"}}},
                {"instanceId", "order-E-1"}};
  auto first = client.post("/v1/runs", notes);
  ASSERT_EQ(first.status, 200u) << first.body;
  notes["onDuplicate"] = "return-existing-active";
  auto existing = client.post("/v1/runs", notes, "existing-E-1");
  ASSERT_EQ(existing.status, 200u) << existing.body;
  EXPECT_EQ(existing.value["id"], first.value["id"]);
  auto replay = client.post("/v1/runs", notes, "existing-E-1");
  EXPECT_EQ(replay.headers["idempotent-replayed"], "true");
  EXPECT_EQ(replay.value["id"], first.value["id"]);
}

// A conflict names what the caller sent (the instance id), never the
// token it is stored as internally.
TEST_F(ServeTest, AnInstanceConflictNamesTheInstanceIdNotAnInternalToken) {
  auto client = admin();
  json notes = {{"flow", "acme.order-notes"},
                {"input", {{"orderId", "N-1"}, {"note", "n"}}},
                {"instanceId", "order-N-1"}};
  ASSERT_EQ(client.post("/v1/runs", notes).status, 200u);
  auto conflict = client.post("/v1/runs", notes);
  ASSERT_EQ(conflict.status, 409u) << conflict.body;
  std::string message = conflict.value["message"];
  EXPECT_NE(message.find("instance id 'order-N-1'"), std::string::npos)
      << message;
  EXPECT_EQ(message.find('\x1f'), std::string::npos) << message;
  EXPECT_EQ(conflict.body.find("\\u001f"), std::string::npos) << conflict.body;
}

// A run started with a command id shows no start token: that token is the
// command id's internal form, not one the caller sent.
TEST_F(ServeTest, ARunStartedWithACommandIdShowsNoInternalToken) {
  auto client = admin();
  json start = review("C-9");
  start["commandId"] = "cmd-C-9";
  auto run = client.post("/v1/runs", start);
  ASSERT_EQ(run.status, 200u) << run.body;
  EXPECT_FALSE(run.value.contains("startToken")) << run.body;
  auto got = client.get("/v1/runs/" + run.value["id"].get<std::string>());
  EXPECT_FALSE(got.value.contains("startToken")) << got.body;
  EXPECT_EQ(got.body.find("\\u001f"), std::string::npos) << got.body;
}

// The id of the first key of `role` in the caller's tenant.
std::string key_of_role(api_client& client, const std::string& role) {
  auto keys = client.get("/v1/api-keys");
  for (auto& key : keys.value["apiKeys"]) {
    if (key["role"] == role) {
      return key["id"];
    }
  }
  return "";
}

// Seed 004's server roles: a key acts and manages keys only up to its role.
// An operator key cannot revoke the admin key (which goes on working, also
// after a restart, so tenants can still be made).
TEST_F(ServeTest, ANonAdminKeyCannotRevokeTheAdminKey) {
  auto admin_client = admin();
  auto made = admin_client.post("/v1/api-keys", {{"name", "ops"}});
  ASSERT_EQ(made.status, 201u) << made.body;
  EXPECT_EQ(made.value["role"], "operator");
  auto ops = as(made.value["secret"]);
  std::string admin_id = key_of_role(admin_client, "admin");
  ASSERT_FALSE(admin_id.empty());
  auto refused = ops.send("DELETE", "/v1/api-keys/" + admin_id);
  EXPECT_EQ(refused.status, 403u) << refused.body;
  EXPECT_EQ(refused.code(), "forbidden");
  auto escalate = ops.post("/v1/api-keys", {{"role", "admin"}});
  EXPECT_EQ(escalate.status, 403u) << escalate.body;
  auto tenant = ops.post("/v1/tenants", {{"name", "nope"}});
  EXPECT_EQ(tenant.status, 403u) << tenant.body;
  ASSERT_EQ(server_->terminate(), 0);
  start();
  auto after = admin().post("/v1/tenants", {{"name", "still-possible"}});
  EXPECT_EQ(after.status, 201u) << after.body;
}

// Read-only keys read and do nothing else; worker keys also poll and
// report; neither starts, cancels or manages keys.
TEST_F(ServeTest, ReadOnlyAndWorkerKeysDoOnlyTheirPart) {
  auto admin_client = admin();
  auto started = admin_client.post("/v1/runs", review("R-1"));
  ASSERT_EQ(started.status, 200u) << started.body;
  std::string run_id = started.value["id"];
  auto reader_key = admin_client.post("/v1/api-keys", {{"role", "read-only"}});
  auto worker_key = admin_client.post("/v1/api-keys", {{"role", "worker"}});
  ASSERT_EQ(reader_key.status, 201u) << reader_key.body;
  ASSERT_EQ(worker_key.status, 201u) << worker_key.body;
  auto reader = as(reader_key.value["secret"]);
  auto worker = as(worker_key.value["secret"]);
  EXPECT_EQ(reader.get("/v1/runs/" + run_id).status, 200u);
  EXPECT_EQ(worker.get("/v1/runs/" + run_id).status, 200u);
  for (auto* client : {&reader, &worker}) {
    auto start = client->post("/v1/runs", review("R-2"));
    EXPECT_EQ(start.status, 403u) << start.body;
    EXPECT_EQ(start.code(), "forbidden");
    auto cancel =
        client->post("/v1/runs/" + run_id + "/cancel", json::object());
    EXPECT_EQ(cancel.status, 403u) << cancel.body;
    auto key = client->post("/v1/api-keys", json::object());
    EXPECT_EQ(key.status, 403u) << key.body;
  }
  json poll = {{"workerId", "w-1"}, {"waitMs", 0}};
  auto by_reader = reader.post("/v1/task-queues/workers/poll", poll);
  EXPECT_EQ(by_reader.status, 403u) << by_reader.body;
  auto by_worker = worker.post("/v1/task-queues/workers/poll", poll);
  EXPECT_EQ(by_worker.status, 200u) << by_worker.body;
  EXPECT_EQ(runs_for(admin_client, "R-2"), 0);
}

// The last admin key cannot be revoked, not even by itself: no one could
// create tenants again.
TEST_F(ServeTest, TheLastAdminKeyCannotBeRevoked) {
  auto client = admin();
  std::string admin_id = key_of_role(client, "admin");
  ASSERT_FALSE(admin_id.empty());
  auto refused = client.send("DELETE", "/v1/api-keys/" + admin_id);
  EXPECT_EQ(refused.status, 409u) << refused.body;
  EXPECT_EQ(refused.code(), "last-admin-key");
  EXPECT_EQ(client.get("/v1/api-keys").status, 200u);
}

// `durin admin reset-key` recovers offline: with the node stopped it writes
// a new admin key, which works once the node is back; it refuses while the
// node runs (the store is in use).
TEST_F(ServeTest, AdminResetKeyRecoversOffline) {
  auto run = [&](const std::string& dir) {
    auto ran = run_durin("admin reset-key --data-dir " + dir + " 2>&1");
    return std::pair<int, std::string>{ran.code, ran.output};
  };
  auto while_running = run(dir_.path());
  EXPECT_NE(while_running.first, 0) << while_running.second;
  std::string old_key = server_->admin_key();
  ASSERT_EQ(server_->terminate(), 0);
  auto reset = run(dir_.path());
  ASSERT_EQ(reset.first, 0) << reset.second;
  start();
  EXPECT_NE(server_->admin_key(), old_key);
  auto tenant = admin().post("/v1/tenants", {{"name", "after-reset"}});
  EXPECT_EQ(tenant.status, 201u) << tenant.body;
  // A path that holds no node's data (a typo, an empty dir) is refused,
  // and nothing is made there.
  temp_dir elsewhere;
  for (const auto& path : {elsewhere.path() + "/typo", elsewhere.path()}) {
    auto refused = run(path);
    EXPECT_EQ(refused.first, 1) << refused.second;
    EXPECT_NE(refused.second.find("holds no node's data"), std::string::npos)
        << refused.second;
  }
  EXPECT_FALSE(std::filesystem::exists(elsewhere.path() + "/typo"));
  EXPECT_TRUE(std::filesystem::is_empty(elsewhere.path()));
}

// GET /metrics shows node-wide counters: it needs an admin key (401 without
// one, 403 with a tenant's key), unless the node was started with
// --metrics-open for a scraper.
TEST_F(ServeTest, MetricsNeedAnAdminKeyUnlessOpened) {
  api_client anonymous(server_->address(), "");
  EXPECT_EQ(anonymous.get("/metrics").status, 401u);
  auto tenant = admin().post("/v1/tenants", {{"name", "metrics-t"}});
  ASSERT_EQ(tenant.status, 201u) << tenant.body;
  EXPECT_EQ(as(tenant.value["apiKey"]["secret"]).get("/metrics").status, 403u);
  auto allowed = admin().get("/metrics");
  EXPECT_EQ(allowed.status, 200u);
  EXPECT_NE(allowed.body.find("durin_http_requests_total"), std::string::npos);
  ASSERT_EQ(server_->terminate(), 0);
  server_.reset();
  server_ = std::make_unique<serve_process>(
      dir_.path(), serve_setup{{}, 1000, {"--metrics-open"}, 0});
  api_client scraper(server_->address(), "");
  EXPECT_EQ(scraper.get("/metrics").status, 200u);
  EXPECT_EQ(scraper.get("/v1/runs").status, 401u);
}

// A node's files are its owner's only: the data dir 0700, the admin key and
// the store's files 0600.
TEST_F(ServeTest, TheDataDirIsPrivateToItsOwner) {
  struct stat info {};
  ASSERT_EQ(::stat(dir_.path().c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat((dir_.path() + "/admin.key").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  auto started = admin().post("/v1/runs", review("M-1"));
  ASSERT_EQ(started.status, 200u);
  int files = 0;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(dir_.path())) {
    ASSERT_EQ(::stat(entry.path().c_str(), &info), 0);
    auto expected = entry.is_directory() ? 0700u : 0600u;
    EXPECT_EQ(info.st_mode & 0777, expected) << entry.path();
    ++files;
  }
  EXPECT_GT(files, 3);
}

// A data dir that exists keeps its mode (it may be shared, as with
// --data-dir .); the node's own files in it are still 0600.
TEST_F(ServeTest, AnExistingDataDirKeepsItsMode) {
  const auto shared = dir_.path() + "/shared";
  ASSERT_EQ(::mkdir(shared.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(shared.c_str(), 01777), 0);
  serve_process other(shared);
  struct stat info {};
  ASSERT_EQ(::stat(shared.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 01777u);
  ASSERT_EQ(::stat((shared + "/admin.key").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
}

// A webhook delivery hands its run the request's headers but not the
// credentials a sender's proxy or browser may attach (cookies, API keys).
TEST_F(ServeTest, WebhookDeliveriesDropCredentialHeaders) {
  auto client = admin();
  auto run = client.post("/v1/runs", {{"flow", "acme.await-webhook"}});
  ASSERT_EQ(run.status, 200u) << run.body;
  std::string id = run.value["id"];
  std::string url = webhook_url_of(client, id);
  ASSERT_FALSE(url.empty());
  api_client anonymous(server_->address(), "");
  auto delivered = anonymous.send("POST", url, R"({"paid":true})",
                                  {{"Cookie", "session=secret"},
                                   {"X-Api-Key", "k"},
                                   {"X-Signature", "sig-2"}});
  ASSERT_EQ(delivered.status, 202u) << delivered.body;
  ASSERT_TRUE(eventually([&] {
    return client.get("/v1/runs/" + id).value["status"] == "completed";
  }));
  auto headers = client.get("/v1/runs/" + id).value["output"]["headers"];
  EXPECT_EQ(headers["x-signature"], "sig-2");
  EXPECT_FALSE(headers.contains("cookie")) << headers.dump();
  EXPECT_FALSE(headers.contains("x-api-key")) << headers.dump();
}

// Worker ids are self-declared, so a worker key's leases are bound to the
// key: another worker key sending the same workerId is refused as another
// worker (409 lease-conflict, wrong_owner), and the claimer's report stands.
TEST_F(ServeTest, AWorkerKeyReportsOnlyForItself) {
  auto client = admin();
  auto first_key = client.post("/v1/api-keys", {{"role", "worker"}});
  auto second_key = client.post("/v1/api-keys", {{"role", "worker"}});
  ASSERT_EQ(first_key.status, 201u);
  ASSERT_EQ(second_key.status, 201u);
  auto first = as(first_key.value["secret"]);
  auto second = as(second_key.value["secret"]);
  auto run = client.post("/v1/runs", {{"flow", "acme.remote-echo"},
                                      {"input", {{"text", "hi"}}},
                                      {"wait", false}});
  ASSERT_EQ(run.status, 202u) << run.body;
  auto polled = first.post("/v1/task-queues/workers/poll",
                           {{"workerId", "w"}, {"waitMs", 5000}});
  ASSERT_EQ(polled.status, 200u) << polled.body;
  ASSERT_TRUE(polled.value["task"].is_object()) << polled.body;
  std::string attempt = polled.value["task"]["attemptId"];
  auto spoofed = second.post("/v1/tasks/" + attempt + "/complete",
                             {{"workerId", "w"}, {"result", "forged"}});
  EXPECT_EQ(spoofed.status, 409u) << spoofed.body;
  EXPECT_EQ(spoofed.code(), "lease-conflict");
  auto honest = first.post("/v1/tasks/" + attempt + "/complete",
                           {{"workerId", "w"}, {"result", "echo"}});
  EXPECT_EQ(honest.status, 200u) << honest.body;
  EXPECT_EQ(honest.value["recorded"], true);
}

// `durin runs message` and `runs update` take --idempotency-key as every
// mutating command does: a repeat gets the first answer, and the same key
// with another payload is a conflict.
TEST_F(ServeTest, CliMessageAndUpdateTakeAnIdempotencyKey) {
  auto client = admin();
  auto run = client.post(
      "/v1/runs",
      {{"flow", "acme.counter"}, {"input", json::object()}, {"wait", false}});
  ASSERT_EQ(run.status, 202u) << run.body;
  const auto id = run.value["id"].get<std::string>();
  const auto common =
      " --server http://127.0.0.1:" + std::to_string(server_->port()) +
      " --data-dir " + dir_.path() + " 2>&1";
  auto first =
      run_durin("runs update " + id +
                " add --args '{\"by\":2}' --idempotency-key=u-1" + common);
  ASSERT_EQ(first.code, 0) << first.output;
  auto repeat =
      run_durin("runs update " + id +
                " add --args '{\"by\":2}' --idempotency-key=u-1" + common);
  ASSERT_EQ(repeat.code, 0) << repeat.output;
  EXPECT_EQ(json::parse(repeat.output, nullptr, false),
            json::parse(first.output, nullptr, false))
      << repeat.output;
  auto other =
      run_durin("runs update " + id +
                " add --args '{\"by\":5}' --idempotency-key=u-1" + common);
  EXPECT_NE(other.code, 0);
  EXPECT_EQ(other.output.rfind("conflict: ", 0), 0u) << other.output;
  auto sent = run_durin("runs message " + id +
                        " stop --payload '{}' --idempotency-key=m-1" + common);
  ASSERT_EQ(sent.code, 0) << sent.output;
  auto changed =
      run_durin("runs message " + id +
                " stop --payload '{\"x\":1}' --idempotency-key=m-1" + common);
  EXPECT_NE(changed.code, 0);
  EXPECT_EQ(changed.output.rfind("conflict: ", 0), 0u) << changed.output;
}

// A key given twice in one JSON object is refused, naming it, rather than
// resolved by the last one winning (what a proxy or a log reads of a body
// is what the node acts on); the same key in different objects is fine.
TEST_F(ServeTest, ARepeatedKeyInABodyIsRefusedNotResolved) {
  auto client = admin();
  for (
      const std::string body :
      {R"({"flow":"acme.review-order","flow":"acme.sleep","input":{"orderId":"D-1","ms":1}})",
       R"({"flow":"acme.review-order","input":{"orderId":"D-1","orderId":"D-2"}})"}) {
    auto refused = client.send("POST", "/v1/runs", body);
    EXPECT_EQ(refused.status, 400u) << refused.body;
    EXPECT_EQ(refused.code(), "invalid-json") << refused.body;
    EXPECT_NE(refused.value.value("message", "").find("twice"),
              std::string::npos)
        << refused.body;
  }
  EXPECT_TRUE(client.get("/v1/runs").value["runs"].empty());
  auto fine = client.send(
      "POST", "/v1/runs",
      R"({"flow":"acme.review-order","input":{"orderId":"D-3","flow":"x"}})");
  EXPECT_EQ(fine.status, 200u) << fine.body;
}

// An id no route could name (a '/', a dot segment, a control character) is
// refused where it is made, naming the field (durin/ids.hpp): a schedule id
// of "u/1" used to be accepted and then fire for ever, out of reach of
// every route that reads, pauses or deletes it.
TEST_F(ServeTest, IdsNoRouteCouldNameAreRefusedWhereTheyAreMade) {
  auto client = admin();
  auto refused = [&](const api_client::answer& answer, const std::string& field,
                     const std::string& id) {
    EXPECT_EQ(answer.status, 400u) << id << ": " << answer.body;
    EXPECT_EQ(answer.code(), "invalid-argument") << answer.body;
    EXPECT_NE(answer.value.value("message", "").find(field), std::string::npos)
        << answer.body;
  };
  const json sleeper = {
      {"flow", "acme.sleep"}, {"input", {{"ms", 600'000}}}, {"wait", false}};
  for (const std::string& id : std::vector<std::string>{
           "u/1", "..", ".", std::string("a\0b", 3), "a\nb", "a\\b"}) {
    refused(client.post("/v1/schedules", {{"scheduleId", id},
                                          {"spec", {{"interval", "1h"}}},
                                          {"action",
                                           {{"flow", "acme.review-order"},
                                            {"input", {{"orderId", "S"}}}}}}),
            "scheduleId", id);
    auto hooked = sleeper;
    hooked["hook"] = {{"token", id}};
    refused(client.post("/v1/runs", hooked), "hook.token", id);
    auto instance = sleeper;
    instance["instanceId"] = id;
    refused(client.post("/v1/runs", instance), "instance id", id);
  }
  auto schedules = client.get("/v1/schedules");
  ASSERT_EQ(schedules.status, 200u) << schedules.body;
  EXPECT_TRUE(schedules.value["schedules"].empty()) << schedules.body;
  EXPECT_TRUE(client.get("/v1/runs").value["runs"].empty());
  // Dots inside an id are ordinary: made, then reached by its route.
  auto hooked = sleeper;
  hooked["hook"] = {{"token", "order.A-1"}};
  ASSERT_EQ(client.post("/v1/runs", hooked).status, 202u);
  EXPECT_EQ(client.get("/v1/hooks/order.A-1").status, 200u);
}

// A cancel's or terminate's command id keys the command, as a start's and a
// resume's do: an empty one is refused, as there; a reason is kept in the
// run's error, so it has a limit. Neither refusal changes the run.
TEST_F(ServeTest, CancelAndTerminateRefuseAnEmptyCommandIdOrAnOversizeReason) {
  auto client = admin();
  auto run = client.post(
      "/v1/runs",
      {{"flow", "acme.sleep"}, {"input", {{"ms", 600'000}}}, {"wait", false}});
  ASSERT_EQ(run.status, 202u) << run.body;
  const auto id = run.value["id"].get<std::string>();
  // A start that does not wait is answered at admission; the run reaches
  // `waiting` after the answer.
  ASSERT_TRUE(eventually([&] {
    return client.get("/v1/runs/" + id).value.value("status", "") == "waiting";
  }));
  for (const std::string verb : {"cancel", "terminate"}) {
    auto empty =
        client.post("/v1/runs/" + id + "/" + verb, {{"commandId", ""}});
    EXPECT_EQ(empty.status, 400u) << empty.body;
    EXPECT_NE(empty.value.value("message", "").find("commandId"),
              std::string::npos)
        << empty.body;
    auto wordy = client.post(
        "/v1/runs/" + id + "/" + verb,
        {{"reason", std::string(limits::reason_bytes_max + 1, 'r')}});
    EXPECT_EQ(wordy.status, 400u) << wordy.body;
    EXPECT_NE(wordy.value.value("message", "").find("reason"),
              std::string::npos)
        << wordy.body;
  }
  auto now = client.get("/v1/runs/" + id);
  ASSERT_EQ(now.status, 200u) << now.body;
  EXPECT_EQ(now.value["status"], "waiting") << now.body;
  auto cancelled =
      client.post("/v1/runs/" + id + "/cancel",
                  {{"reason", std::string(limits::reason_bytes_max, 'r')}});
  EXPECT_EQ(cancelled.status, 200u) << cancelled.body;
  EXPECT_EQ(cancelled.value["status"], "cancelled") << cancelled.body;
}

// Names (of tenants and API keys) are shown in lists and on terminals: a
// control character in one is refused. A field sent to a route that takes
// none is named, and the answer says the route takes none.
TEST_F(ServeTest, NamesWithControlCharactersAndFieldsNoRouteTakesAreRefused) {
  auto client = admin();
  for (const std::string& name :
       std::vector<std::string>{"a\nb", std::string("a\0b", 3), "bell\a"}) {
    for (const char* target : {"/v1/tenants", "/v1/api-keys"}) {
      auto made = client.post(target, {{"name", name}});
      EXPECT_EQ(made.status, 400u) << target << ": " << made.body;
      EXPECT_NE(made.value.value("message", "").find("control"),
                std::string::npos)
          << made.body;
    }
  }
  EXPECT_EQ(client.post("/v1/tenants", {{"name", "beta"}}).status, 201u);
  auto extra = client.send("DELETE", "/v1/api-keys/nobody", "{\"a\":1}");
  EXPECT_EQ(extra.status, 400u) << extra.body;
  EXPECT_EQ(extra.value.value("message", ""),
            "unknown field 'a'; this request takes no fields")
      << extra.body;
}

}  // namespace
}  // namespace durin::testing
