// Schedules over HTTP against real `durin serve` processes on loopback:
// the routes and their errors, and exactly one run per (schedule,
// occurrence) when the node is killed with SIGKILL around a firing, at the
// kill points schedule.after_mark (the record names the run, the run is not
// admitted yet) and schedule.after_start (the run is admitted, the process
// dies before anything else), then restarted on the same data directory.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <thread>

#include "tests/support/serve_process.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin::testing {
namespace {

json every_second(const std::string& id) {
  return {
      {"scheduleId", id},
      {"spec", {{"interval", "1s"}}},
      {"action", {{"flow", "acme.review-order"}, {"input", {{"orderId", id}}}}},
      {"overlap", "allow_all"}};
}

class ScheduleServeTest : public ::testing::Test {
 protected:
  void start(std::vector<std::string> env = {}) {
    server_.reset();
    server_ = std::make_unique<serve_process>(dir_.path(), std::move(env));
  }
  api_client admin() { return {server_->address(), server_->admin_key()}; }

  // The runs the schedule started, by occurrence (a count each).
  std::map<std::string, int> runs_by_occurrence(api_client& client,
                                                const std::string& id) {
    auto page = client.get("/v1/runs?limit=1000&scheduleId=" + id);
    EXPECT_EQ(page.status, 200u) << page.body;
    std::map<std::string, int> out;
    for (auto& run : page.value["runs"]) {
      EXPECT_EQ(run["scheduleId"], id);
      out[run.value("occurrence", "")] += 1;
    }
    return out;
  }

  temp_dir dir_;
  std::unique_ptr<serve_process> server_;
};

TEST_F(ScheduleServeTest, RoutesCreateReadChangeAndDeleteASchedule) {
  start();
  auto client = admin();
  json definition = {
      {"scheduleId", "nightly"},
      {"spec", {{"cron", "30 2 * * *"}, {"timezone", "America/New_York"}}},
      {"action",
       {{"flow", "acme.review-order"}, {"input", {{"orderId", "n"}}}}},
      {"catchupWindow", "10m"}};
  auto made = client.post("/v1/schedules", definition);
  ASSERT_EQ(made.status, 201u) << made.body;
  EXPECT_EQ(made.value["scheduleId"], "nightly");
  EXPECT_EQ(made.value["overlap"], "skip");
  EXPECT_EQ(made.value["catchupWindow"], 600'000);
  EXPECT_TRUE(made.value["nextOccurrence"].is_string());

  // The same body again is a replay; another body a conflict.
  auto replay = client.post("/v1/schedules", definition);
  EXPECT_EQ(replay.status, 200u) << replay.body;
  EXPECT_FALSE(replay.value["created"].get<bool>());
  json other = definition;
  other["spec"]["cron"] = "0 3 * * *";
  auto conflict = client.post("/v1/schedules", other);
  EXPECT_EQ(conflict.status, 409u);
  EXPECT_EQ(conflict.code(), "schedule-exists");
  // A keyed create answers its first answer again, byte for byte.
  auto keyed = client.post("/v1/schedules", every_second("keyed"), "sk-1");
  ASSERT_EQ(keyed.status, 201u) << keyed.body;
  auto keyed_again =
      client.post("/v1/schedules", every_second("keyed"), "sk-1");
  EXPECT_EQ(keyed_again.body, keyed.body);
  EXPECT_EQ(keyed_again.headers["idempotent-replayed"], "true");

  auto got = client.get("/v1/schedules/nightly");
  ASSERT_EQ(got.status, 200u);
  EXPECT_EQ(got.value["spec"]["timezone"], "America/New_York");
  auto list = client.get("/v1/schedules");
  ASSERT_EQ(list.status, 200u);
  ASSERT_EQ(list.value["schedules"].size(), 2u);
  EXPECT_EQ(list.value["schedules"][0]["scheduleId"], "keyed");

  auto paused = client.post("/v1/schedules/nightly/pause", {{"note", "db"}});
  ASSERT_EQ(paused.status, 200u) << paused.body;
  EXPECT_TRUE(paused.value["paused"].get<bool>());
  EXPECT_EQ(paused.value["note"], "db");
  auto unpaused = client.post("/v1/schedules/nightly/unpause", json::object());
  EXPECT_FALSE(unpaused.value["paused"].get<bool>());

  auto triggered = client.post("/v1/schedules/nightly/trigger", json::object());
  ASSERT_EQ(triggered.status, 202u) << triggered.body;
  ASSERT_TRUE(eventually(
      [&] { return runs_by_occurrence(client, "nightly").size() == 1; }));
  auto filled = client.post(
      "/v1/schedules/nightly/backfill",
      {{"startAt", "2026-03-07T00:00:00Z"}, {"endAt", "2026-03-09T23:00:00Z"}});
  ASSERT_EQ(filled.status, 202u) << filled.body;
  // The DST rule: 02:30 on the spring-forward day is 03:00 EDT.
  EXPECT_EQ(filled.value["occurrences"],
            json::array({"2026-03-07T07:30:00.000Z", "2026-03-08T07:00:00.000Z",
                         "2026-03-09T06:30:00.000Z"}));

  auto removed = client.send("DELETE", "/v1/schedules/nightly");
  ASSERT_EQ(removed.status, 200u) << removed.body;
  auto gone = client.get("/v1/schedules/nightly");
  EXPECT_EQ(gone.status, 404u);
  EXPECT_EQ(gone.code(), "schedule-not-found");
  EXPECT_NE(gone.value["message"].get<std::string>().find("'nightly'"),
            std::string::npos);
}

TEST_F(ScheduleServeTest, BadRequestsNameWhatIsWrongAndChangeNothing) {
  start();
  auto client = admin();
  auto bad_zone = every_second("z");
  bad_zone["spec"] = {{"cron", "0 0 * * *"}, {"timezone", "Nowhere/City"}};
  auto refused = client.post("/v1/schedules", bad_zone);
  EXPECT_EQ(refused.status, 400u);
  EXPECT_NE(refused.value["message"].get<std::string>().find("Nowhere/City"),
            std::string::npos);
  auto no_flow = every_second("f");
  no_flow["action"]["flow"] = "no.such.flow";
  refused = client.post("/v1/schedules", no_flow);
  EXPECT_EQ(refused.status, 404u);
  EXPECT_EQ(refused.code(), "flow-not-found");
  refused = client.post("/v1/schedules", {{"spec", {{"interval", "1m"}}}});
  EXPECT_EQ(refused.status, 400u);
  EXPECT_NE(refused.value["message"].get<std::string>().find("scheduleId"),
            std::string::npos);
  refused = client.post("/v1/schedules/absent/backfill",
                        {{"startAt", "2026-03-07T00:00:00Z"}});
  EXPECT_EQ(refused.status, 400u);
  refused = client.post("/v1/schedules/absent/trigger", json::object());
  EXPECT_EQ(refused.status, 404u);
  auto list = client.get("/v1/schedules");
  EXPECT_TRUE(list.value["schedules"].empty());
  EXPECT_TRUE(server_->running());
}

// Killed at each kill point around a firing, then restarted: every
// occurrence the schedule fired has exactly one run, and the occurrence of
// the firing the kill cut short has its run too.
TEST_F(ScheduleServeTest, KilledAroundAFiringEveryOccurrenceHasExactlyOneRun) {
  for (const std::string point :
       {"schedule.after_mark", "schedule.after_start"}) {
    SCOPED_TRACE(point);
    const std::string id = "every-second-" + point;
    start({"DURIN_KILL_AT=" + point + ":1"});
    {
      auto client = admin();
      auto made = client.post("/v1/schedules", every_second(id));
      ASSERT_EQ(made.status, 201u) << made.body;
    }
    ASSERT_TRUE(server_->wait_killed());
    start();
    auto client = admin();
    std::string cut_short;
    ASSERT_TRUE(eventually([&] {
      auto view = client.get("/v1/schedules/" + id);
      return view.status == 200 && view.value["info"]["fired"] >= 3;
    }));
    auto schedule = client.get("/v1/schedules/" + id);
    ASSERT_EQ(schedule.status, 200u);
    // The first firing is the one the kill cut short.
    auto first = schedule.value["info"]["recent"][0];
    ASSERT_TRUE(eventually([&] {
      return client.get("/v1/runs/" + first["runId"].get<std::string>())
                 .status == 200;
    }));
    auto run = client.get("/v1/runs/" + first["runId"].get<std::string>());
    EXPECT_EQ(run.value["occurrence"], first["occurrence"]);
    EXPECT_EQ(run.value["scheduleId"], id);
    ASSERT_EQ(
        client.post("/v1/schedules/" + id + "/pause", json::object()).status,
        200u);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto fired = client.get("/v1/schedules/" + id).value["info"]["fired"];
    auto runs = runs_by_occurrence(client, id);
    for (const auto& [occurrence, count] : runs) {
      EXPECT_EQ(count, 1) << occurrence;
    }
    EXPECT_EQ(runs.count(first["occurrence"].get<std::string>()), 1u);
    EXPECT_EQ(json(runs.size()), fired);
    server_->terminate();
  }
}

}  // namespace
}  // namespace durin::testing
