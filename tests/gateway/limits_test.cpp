// Goal: the HTTP side of issue 12's limits, against a real `durin serve`:
// the reproductions of items 8 and 10 fail their runs clearly instead of
// arming a timer in the past or retrying for ever; worker durations beyond
// their maximum are refused; GET /v1/tasks counts the caller's tenant only
// (an admin key also sees the node's); a heartbeat's answer carries the
// renewed expiry; a page of runs with huge inputs stops at its byte cap.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "durin/limits.hpp"
#include "tests/support/serve_process.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin {
namespace {

using testing::api_client;
using testing::serve_process;
using testing::start_run;
using testing::wait_run;

constexpr auto wait_max = std::chrono::seconds(30);

TEST(LimitsProcessTest, DurationsBeyondTheMaximumAreRefused) {
  testing::temp_dir dir;
  serve_process node(dir.path());
  api_client client(node.address(), node.admin_key());
  // Item 8's reproduction: the sleep is refused, no timer is armed.
  auto sleep = start_run(client, "acme.sleep", {{"ms", INT64_MAX}});
  auto id = sleep["id"].get<std::string>();
  auto slept = wait_run(client, id);
  EXPECT_EQ(slept["status"], "failed") << slept.dump();
  EXPECT_EQ(slept["error"]["code"], "invalid-argument");
  EXPECT_NE(slept["error"]["message"].get<std::string>().find(
                "beyond the maximum of 3153600000000 ms"),
            std::string::npos)
      << slept.dump();
  auto history = client.get("/v1/runs/" + id + "/history").value;
  for (const auto& event : history["events"]) {
    EXPECT_NE(event["kind"], "timer-armed");
  }
  // A start hook's retention beyond its cap (30 days), however large.
  for (const json& retention : {json(1e300), json("99999999999999999 days")}) {
    auto kept = client.post(
        "/v1/runs",
        {{"flow", "acme.sleep"},
         {"input", {{"ms", 0}}},
         {"hook", {{"token", "kept-for-ever"}, {"minRetention", retention}}}});
    EXPECT_EQ(kept.status, 400u) << kept.body;
    EXPECT_EQ(kept.code(), "invalid-argument");
    EXPECT_NE(kept.body.find("minRetention exceeds the cap of 30 days"),
              std::string::npos)
        << kept.body;
  }
  // Worker-side durations: retryAfterMs is 0..limits::duration_ms_max, waitMs
  // 0..60000.
  auto late_retry = client.post(
      "/v1/tasks/att_x/fail", {{"workerId", "w"},
                               {"message", "x"},
                               {"retryAfterMs", limits::duration_ms_max + 1}});
  EXPECT_EQ(late_retry.status, 400u);
  EXPECT_NE(late_retry.body.find("retryAfterMs"), std::string::npos);
  auto long_wait = client.post("/v1/task-queues/workers/poll",
                               {{"workerId", "w"}, {"waitMs", 60'001}});
  EXPECT_EQ(long_wait.status, 400u);
}

// Item 10's reproduction: a billion failures asked for a billion attempts.
TEST(LimitsProcessTest, TheDefaultRetryPolicyStopsRetrying) {
  testing::temp_dir dir;
  serve_process node(dir.path());
  api_client client(node.address(), node.admin_key());
  auto run = start_run(client, "acme.flaky", {{"failures", 1e9}});
  auto done = wait_run(client, run["id"].get<std::string>());
  EXPECT_EQ(done["status"], "failed") << done.dump();
  EXPECT_EQ(done["error"]["code"], "invalid-argument");
  EXPECT_NE(done["error"]["message"].get<std::string>().find("max_attempts"),
            std::string::npos);
  // Within the cap it retries and succeeds as before.
  auto fine = start_run(client, "acme.flaky", {{"failures", 2}});
  auto completed = wait_run(client, fine["id"].get<std::string>());
  EXPECT_EQ(completed["status"], "completed") << completed.dump();
  EXPECT_EQ(completed["output"]["attempts"], 3);
}

TEST(LimitsProcessTest, TaskCountsAreScopedToTheCallersTenant) {
  testing::temp_dir dir;
  serve_process node(dir.path());
  api_client admin(node.address(), node.admin_key());
  auto tenant = admin.post("/v1/tenants", {{"name", "quiet"}});
  ASSERT_EQ(tenant.status, 201u) << tenant.body;
  api_client quiet(node.address(),
                   tenant.value["apiKey"]["secret"].get<std::string>());
  // The admin's tenant has a task in hand and one completed outcome.
  auto first = start_run(admin, "acme.remote-echo", {{"value", 1}});
  auto poll = admin.post("/v1/task-queues/workers/poll", {{"workerId", "w"}});
  ASSERT_TRUE(poll.value["task"].is_object()) << poll.body;
  auto done = admin.post(
      "/v1/tasks/" + poll.value["task"]["attemptId"].get<std::string>() +
          "/complete",
      {{"workerId", "w"}, {"result", 1}});
  ASSERT_EQ(done.value["recorded"], true) << done.body;
  start_run(admin, "acme.remote-echo", {{"value", 2}});
  ASSERT_TRUE(admin.post("/v1/task-queues/workers/poll", {{"workerId", "w"}})
                  .value["task"]
                  .is_object());
  auto mine = admin.get("/v1/tasks").value;
  EXPECT_EQ(mine["stats"]["running"], 1) << mine.dump();
  EXPECT_EQ(mine["stats"]["completed"], 1);
  ASSERT_TRUE(mine.contains("nodeStats"));
  EXPECT_EQ(mine["nodeStats"]["running"], 1);
  // Another tenant learns nothing of it.
  auto theirs = quiet.get("/v1/tasks");
  ASSERT_EQ(theirs.status, 200u) << theirs.body;
  EXPECT_EQ(theirs.value["tasks"].size(), 0u);
  for (auto name : {"queued", "running", "stuckLeases", "queuedUnpolled",
                    "completed", "redeliveries", "refusedReports"}) {
    EXPECT_EQ(theirs.value["stats"][name], 0) << name;
  }
  EXPECT_FALSE(theirs.value.contains("nodeStats")) << theirs.body;
  EXPECT_EQ(wait_run(admin, first["id"].get<std::string>())["status"],
            "completed");
}

// The expiry moves with each heartbeat (the several-lease-lengths proof on
// a manual clock is tests/services/task_test.cpp).
TEST(LimitsProcessTest, AHeartbeatAnswerCarriesTheRenewedExpiry) {
  testing::temp_dir dir;
  serve_process node(dir.path());
  api_client client(node.address(), node.admin_key());
  auto run = start_run(client, "acme.remote-echo", {{"value", "x"}});
  auto poll = client.post("/v1/task-queues/workers/poll", {{"workerId", "w"}});
  ASSERT_TRUE(poll.value["task"].is_object()) << poll.body;
  auto attempt = poll.value["task"]["attemptId"].get<std::string>();
  auto claimed = poll.value["task"]["leaseExpiresAtMs"].get<std::int64_t>();
  std::int64_t previous = claimed;
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    auto beat =
        client.post("/v1/tasks/" + attempt + "/heartbeat", {{"workerId", "w"}});
    ASSERT_EQ(beat.value["continue"], true) << beat.body;
    auto expiry = beat.value["leaseExpiresAtMs"].get<std::int64_t>();
    EXPECT_GE(expiry, previous + 100) << "heartbeat " << i;
    previous = expiry;
  }
  EXPECT_GE(previous, claimed + 400);
  auto listed = client.get("/v1/tasks").value;
  ASSERT_EQ(listed["tasks"].size(), 1u);
  EXPECT_EQ(listed["tasks"][0]["leaseExpiresAtMs"], previous);
  auto done = client.post("/v1/tasks/" + attempt + "/complete",
                          {{"workerId", "w"}, {"result", "X"}});
  EXPECT_EQ(done.value["recorded"], true);
  EXPECT_EQ(wait_run(client, run["id"].get<std::string>())["status"],
            "completed");
}

// Item 7: a page of runs with 800 KB inputs stops at 4 MiB and continues.
TEST(LimitsProcessTest, APageOfRunsStopsAtItsByteCapAndGivesACursor) {
  testing::temp_dir dir;
  serve_process node(dir.path());
  api_client client(node.address(), node.admin_key());
  std::set<std::string> started;
  for (int i = 0; i < 12; ++i) {
    auto run = start_run(client, "acme.sleep",
                         {{"ms", 0}, {"pad", std::string(800'000, 'p')}});
    started.insert(run["id"].get<std::string>());
  }
  std::set<std::string> listed;
  std::string cursor;
  int pages = 0;
  do {
    auto page = client.get("/v1/runs?limit=1000" +
                           (cursor.empty() ? "" : "&cursor=" + cursor));
    ASSERT_EQ(page.status, 200u) << page.error;
    ++pages;
    EXPECT_LE(page.value["runs"].size(), 6u);
    EXPECT_LE(page.body.size(), 6'000'000u);
    for (const auto& run : page.value["runs"]) {
      EXPECT_TRUE(listed.insert(run["id"].get<std::string>()).second);
    }
    cursor = page.value["nextCursor"].is_string()
                 ? page.value["nextCursor"].get<std::string>()
                 : "";
  } while (!cursor.empty() && pages < 20);
  EXPECT_EQ(listed, started);
  EXPECT_GE(pages, 2);
}

}  // namespace
}  // namespace durin
