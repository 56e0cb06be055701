// End-to-end tests of long polls against `durin serve` (issue 12, items 5
// and 6): a poll that waits holds no thread, so another tenant's requests
// never queue behind it; a tenant's open polls are limited; SIGTERM answers
// every waiting poll at once. The same for the long poll of a run's end
// (GET /v1/runs/{id}?waitMs=, what a run on another node of a cluster
// awaits a child with).
//
// Method: each test starts its own `durin serve` (port 0) and opens its
// polls over raw sockets (tests/support/raw_connection.hpp) that it leaves
// waiting, then times what it asks next. The bounds are generous (behaviour,
// not benchmarks): a request that waited behind 64 polls of 20 s took ~19 s.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/raw_connection.hpp"
#include "tests/support/serve_process.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin::testing {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

// A poll request as bytes.
std::string poll_bytes(const std::string& secret, const std::string& queue,
                       const json& body) {
  auto text = body.dump();
  return "POST /v1/task-queues/" + queue +
         "/poll HTTP/1.1\r\nHost: durin\r\nAuthorization: Bearer " + secret +
         "\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(text.size()) + "\r\n\r\n" + text;
}

class LongPollTest : public ::testing::Test {
 protected:
  void start(serve_setup setup = {}) {
    server_.reset();
    server_ = std::make_unique<serve_process>(dir_.path(), std::move(setup));
  }
  api_client admin() { return {server_->address(), server_->admin_key()}; }

  // A new tenant's API key secret.
  std::string tenant(const std::string& name) {
    auto created = admin().post("/v1/tenants", {{"name", name}});
    EXPECT_EQ(created.status, 201u) << created.body;
    return created.value["apiKey"].value("secret", "");
  }

  // `count` polls of `secret` left waiting, each on its own connection.
  std::vector<raw_connection> open_polls(const std::string& secret, int count,
                                         std::int64_t wait_ms,
                                         const std::string& queue = "idle") {
    std::vector<raw_connection> polls;
    for (int i = 0; i < count; ++i) {
      polls.emplace_back(server_->port());
      json body = {{"workerId", "w-" + std::to_string(i)}, {"waitMs", wait_ms}};
      if (i % 2 == 1) {
        body["maxTasks"] = 4;
      }
      EXPECT_TRUE(polls.back().send(poll_bytes(secret, queue, body)));
    }
    return polls;
  }

  temp_dir dir_;
  std::unique_ptr<serve_process> server_;
};

// 64 polls of tenant B wait 20 s each (as many as the gateway has worker
// threads); tenant A's cancel, hook start, instance and command-id starts,
// key creation and revocation and tenant creation all answer at once.
TEST_F(LongPollTest, LongPollsDoNotDelayOtherTenants) {
  start();
  auto polls = open_polls(tenant("b"), 64, 20'000);
  std::this_thread::sleep_for(500ms);  // all 64 are waiting
  auto client = admin();
  auto timed = [&](const char* what, auto request, unsigned status) {
    auto began = clock_type::now();
    api_client::answer answer = request();
    auto took = clock_type::now() - began;
    EXPECT_EQ(answer.status, status) << what << ": " << answer.body;
    EXPECT_LT(took, 2s) << what << " waited behind the polls";
    return answer;
  };
  auto waiting = timed(
      "start of a run that waits",
      [&] {
        return client.post("/v1/runs",
                           {{"flow", "acme.order-notes"},
                            {"input", {{"orderId", "LP-1"}, {"note", "n"}}}});
      },
      200);
  std::string run_id = waiting.value.value("id", "");
  timed(
      "cancel",
      [&] {
        return client.post("/v1/runs/" + run_id + "/cancel",
                           {{"reason", "test"}});
      },
      200);
  const std::pair<const char*, json> starts[] = {
      {"start with a hook",
       {{"flow", "acme.review-order"},
        {"input", {{"orderId", "LP-4"}}},
        {"hook", {{"token", "review:LP-4"}}}}},
      {"start with an instance id",
       {{"flow", "acme.review-order"},
        {"input", {{"orderId", "LP-2"}}},
        {"instanceId", "order-LP-2"}}},
      {"start with a command id",
       {{"flow", "acme.review-order"},
        {"input", {{"orderId", "LP-3"}}},
        {"commandId", "cmd-LP-3"}}},
  };
  for (const auto& [what, body] : starts) {
    timed(
        what, [&] { return client.post("/v1/runs", body); }, 200);
  }
  auto key = timed(
      "key creation",
      [&] {
        return client.post("/v1/api-keys", {{"name", "temp"}});
      },
      201);
  timed(
      "key revocation",
      [&] {
        return client.send("DELETE",
                           "/v1/api-keys/" + key.value.value("id", ""));
      },
      200);
  timed(
      "tenant creation",
      [&] {
        return client.post("/v1/tenants", {{"name", "c"}});
      },
      201);
  // The polls still wait: none was answered early.
  for (auto& poll : polls) {
    EXPECT_EQ(poll.read_answer(0ms).status, 0u);
  }
}

// --max-polls-per-tenant 4: a fifth waiting poll of the tenant is 429
// too-many-polls with Retry-After; another tenant still polls; once the
// tenant's polls are answered it may poll again.
TEST_F(LongPollTest, PerTenantOpenPollsAreLimited) {
  start({.flags = {"--max-polls-per-tenant", "4"}});
  const auto b = tenant("b");
  auto polls = open_polls(b, 4, 1500);
  std::this_thread::sleep_for(300ms);
  raw_connection fifth(server_->port());
  ASSERT_TRUE(fifth.send(
      poll_bytes(b, "idle", {{"workerId", "w-5"}, {"waitMs", 1500}})));
  auto refused = fifth.read_answer(5s);
  EXPECT_EQ(refused.status, 429u) << refused.head << refused.body;
  EXPECT_NE(refused.body.find("\"code\":\"too-many-polls\""), std::string::npos)
      << refused.body;
  EXPECT_TRUE(refused.has_header("Retry-After: 1")) << refused.head;
  // A poll that need not wait is not counted.
  ASSERT_TRUE(
      fifth.send(poll_bytes(b, "idle", {{"workerId", "w-5"}, {"waitMs", 0}})));
  EXPECT_EQ(fifth.read_answer(5s).status, 200u);
  // Another tenant is not limited by this one.
  raw_connection other(server_->port());
  ASSERT_TRUE(other.send(poll_bytes(server_->admin_key(), "idle",
                                    {{"workerId", "a-1"}, {"waitMs", 200}})));
  auto answered = other.read_answer(5s);
  EXPECT_EQ(answered.status, 200u) << answered.body;
  EXPECT_NE(answered.body.find("\"task\":null"), std::string::npos);
  for (auto& poll : polls) {
    EXPECT_EQ(poll.read_answer(5s).status, 200u);
  }
  raw_connection again(server_->port());
  ASSERT_TRUE(again.send(
      poll_bytes(b, "idle", {{"workerId", "w-5"}, {"waitMs", 100}})));
  EXPECT_EQ(again.read_answer(5s).status, 200u);
}

// SIGTERM with polls waiting 20 s: each is answered empty at once and the
// process exits within a couple of seconds (the drain timeout is 30 s).
TEST_F(LongPollTest, ShutdownEndsLongPollsAtOnce) {
  start();
  auto polls = open_polls(server_->admin_key(), 8, 20'000);
  std::this_thread::sleep_for(500ms);
  auto began = clock_type::now();
  ASSERT_EQ(::kill(server_->pid(), SIGTERM), 0);
  for (std::size_t i = 0; i < polls.size(); ++i) {
    auto answer = polls[i].read_answer(5s);
    EXPECT_EQ(answer.status, 200u) << i;
    EXPECT_NE(answer.body.find(i % 2 == 1 ? "\"tasks\":[]" : "\"task\":null"),
              std::string::npos)
        << answer.body;
    EXPECT_TRUE(answer.has_header("Connection: close")) << answer.head;
  }
  EXPECT_EQ(server_->terminate(), 0);
  EXPECT_LT(clock_type::now() - began, 3s);
}

// GET /v1/runs/{id}?waitMs= answers once the run ended, or at waitMs with
// the run as it is; a bad waitMs is refused, naming the range.
TEST_F(LongPollTest, ARunWaitAnswersAtTheRunsEndOrAtItsDeadline) {
  start();
  auto client = admin();
  const std::string id = start_run(client, "acme.sleep", {{"ms", 700}})["id"];
  auto ended = client.get("/v1/runs/" + id + "?waitMs=20000");
  ASSERT_EQ(ended.status, 200u) << ended.body;
  EXPECT_EQ(ended.value["status"], "completed") << ended.body;
  EXPECT_EQ(ended.value["output"], json({{"sleptMs", 700}}));

  const std::string sleeper =
      start_run(client, "acme.sleep", {{"ms", 600000}})["id"];
  auto going_on = client.get("/v1/runs/" + sleeper + "?waitMs=300");
  ASSERT_EQ(going_on.status, 200u) << going_on.body;
  EXPECT_NE(going_on.value["status"], "completed") << going_on.body;
  EXPECT_EQ(going_on.value["id"], sleeper);

  // Both waits answered: none is counted as waiting.
  EXPECT_NE(client.get("/metrics").body.find("\ndurin_run_waits 0\n"),
            std::string::npos);

  auto missing = client.get("/v1/runs/run_nothing?waitMs=300");
  EXPECT_EQ(missing.status, 404u) << missing.body;
  for (const char* bad : {"abc", "-1", "25001", "1e3"}) {
    auto refused = client.get("/v1/runs/" + sleeper + "?waitMs=" + bad);
    EXPECT_EQ(refused.status, 400u) << bad << ": " << refused.body;
    EXPECT_NE(refused.body.find("waitMs"), std::string::npos) << refused.body;
  }
  auto unknown = client.get("/v1/runs/" + sleeper + "?wait=1");
  EXPECT_EQ(unknown.status, 400u) << unknown.body;
}

// Run waits hold no thread (64 of them do not delay a start) and SIGTERM
// answers them at once, not at their deadline.
TEST_F(LongPollTest, RunWaitsHoldNoThreadAndEndAtShutdown) {
  start();
  auto client = admin();
  const std::string sleeper =
      start_run(client, "acme.sleep", {{"ms", 600000}})["id"];
  const std::string request = "GET /v1/runs/" + sleeper +
                              "?waitMs=20000 HTTP/1.1\r\nHost: durin\r\n"
                              "Authorization: Bearer " +
                              server_->admin_key() + "\r\n\r\n";
  std::vector<raw_connection> waits;
  for (int i = 0; i < 64; ++i) {
    waits.emplace_back(server_->port());
    ASSERT_TRUE(waits.back().send(request));
  }
  // Every wait is parked (the gauge counts them) before the start.
  ASSERT_TRUE(eventually([&] {
    return client.get("/metrics").body.find("\ndurin_run_waits 64\n") !=
           std::string::npos;
  }));
  auto began = clock_type::now();
  auto other = client.post(
      "/v1/runs",
      {{"flow", "acme.sleep"}, {"input", {{"ms", 1}}}, {"wait", false}});
  EXPECT_EQ(other.status, 202u) << other.body;
  EXPECT_LT(clock_type::now() - began, 5s);
  began = clock_type::now();
  ASSERT_EQ(::kill(server_->pid(), SIGTERM), 0);
  for (std::size_t i = 0; i < waits.size(); ++i) {
    auto answer = waits[i].read_answer(5s);
    EXPECT_EQ(answer.status, 200u) << i << ": " << answer.body;
    EXPECT_NE(answer.body.find("\"status\":\"waiting\""), std::string::npos)
        << answer.body;
  }
  EXPECT_EQ(server_->terminate(), 0);
  EXPECT_LT(clock_type::now() - began, 4s);
}

}  // namespace
}  // namespace durin::testing
