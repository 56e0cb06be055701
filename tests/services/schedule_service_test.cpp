// The schedule service (services/schedule_service.hpp) on a real runtime:
// real RocksDB in a temp dir, real actors, a manual clock moved by hand.
// Each test states one rule of the header and checks it through the runs
// a schedule started (GET /v1/runs?scheduleId= is runtime::list with a
// schedule filter) and the counts the schedule shows. A crash between a
// firing's two writes is made by editing the record on disk between two
// opens, as the crash would leave it (the process-level kill -9 test is in
// tests/process/schedule_kill_test.cpp).
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <thread>

#include "base/time_text.hpp"
#include "persistence/schedules.hpp"
#include "persistence/store.hpp"
#include "services/node.hpp"
#include "services/runtime_access.hpp"
#include "services/schedule_service.hpp"
#include "tests/support/runtime_fixture.hpp"

namespace durin::testing {
namespace {

using namespace std::chrono_literals;

services::schedule_service& schedules_of(runtime& rt) {
  return *runtime_access::services(rt).schedules;
}

constexpr std::int64_t minute_ms = 60'000;
// The fixture's clock starts at 1'800'000'000'000 ms (a whole minute).

class ScheduleServiceTest : public runtime_fixture {
 protected:
  void SetUp() override {
    flows_.flow("quick",
                [](context&, json input) -> flow<json> { co_return input; });
    // Runs until cancelled: what overlaps.
    flows_.flow("long", [](context& ctx, json) -> flow<json> {
      co_await ctx.sleep(std::chrono::hours(24 * 365));
      co_return json();
    });
  }

  static json body(const std::string& id, json spec,
                   const std::string& flow = "quick",
                   const std::string& overlap = "skip") {
    return {{"scheduleId", id},
            {"spec", std::move(spec)},
            {"action", {{"flow", flow}, {"input", {{"from", id}}}}},
            {"overlap", overlap}};
  }

  static std::vector<run_info> runs_of(runtime& rt, const std::string& id) {
    run_filter filter;
    filter.schedule_id = id;
    filter.limit = 1000;
    auto page = rt.list(filter);
    EXPECT_TRUE(page.ok());
    return page ? page->runs : std::vector<run_info>{};
  }

  // Waits (real time) until the schedule has started `count` runs.
  static std::vector<run_info> wait_runs(runtime& rt, const std::string& id,
                                         std::size_t count) {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    std::vector<run_info> runs;
    while (std::chrono::steady_clock::now() < deadline) {
      runs = runs_of(rt, id);
      if (runs.size() >= count) {
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    return runs;
  }

  // Waits until `check` holds on the schedule's view.
  static json wait_view(runtime& rt, const std::string& id,
                        const std::function<bool(const json&)>& check) {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    json view;
    while (std::chrono::steady_clock::now() < deadline) {
      auto got = schedules_of(rt).get("default", id);
      if (got) {
        view = *got;
        if (check(view)) {
          break;
        }
      }
      std::this_thread::sleep_for(10ms);
    }
    return view;
  }

  // A newer occurrence stops the running run (`policy` cancel_other or
  // terminate_other: it ends `ended`); the new run starts without waiting.
  void overlap_stops_running(const char* policy, run_status ended) {
    auto rt = open();
    ASSERT_TRUE(schedules_of(*rt)
                    .create("default", body("newest", {{"interval", "1m"}},
                                            "long", policy))
                    .ok());
    clock_->advance_ms(minute_ms);
    auto runs = wait_runs(*rt, "newest", 1);
    ASSERT_EQ(runs.size(), 1u);
    const auto first = runs[0].id;
    settle();
    clock_->advance_ms(minute_ms);
    runs = wait_runs(*rt, "newest", 2);
    ASSERT_EQ(runs.size(), 2u);
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!status_is(*rt, first, ended) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    EXPECT_TRUE(status_is(*rt, first, ended));
  }

  // Lets the loop see the time (it wakes at most 100 ms apart).
  static void settle() { std::this_thread::sleep_for(300ms); }

  static std::set<std::int64_t> occurrences(const std::vector<run_info>& runs) {
    std::set<std::int64_t> out;
    for (const auto& run : runs) {
      out.insert(run.occurrence_ms);
    }
    return out;
  }
};

TEST_F(ScheduleServiceTest, EachOccurrenceStartsOneRunNamingScheduleAndTime) {
  auto rt = open();
  const auto start = clock_->now_ms();
  auto made = schedules_of(*rt).create(
      "default", body("every-minute", {{"interval", "1m"}}));
  ASSERT_TRUE(made.ok()) << made.error().to_string();
  EXPECT_TRUE((*made)["created"].get<bool>());
  for (int i = 1; i <= 3; ++i) {
    clock_->advance_ms(minute_ms);
    ASSERT_EQ(wait_runs(*rt, "every-minute", i).size(), std::size_t(i));
  }
  settle();
  auto runs = runs_of(*rt, "every-minute");
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(occurrences(runs),
            (std::set<std::int64_t>{start + minute_ms, start + 2 * minute_ms,
                                    start + 3 * minute_ms}));
  for (const auto& run : runs) {
    EXPECT_EQ(run.schedule_id, "every-minute");
    EXPECT_EQ(run.flow, "quick");
    auto json_view = run.to_json();
    EXPECT_EQ(json_view["scheduleId"], "every-minute");
    EXPECT_EQ(json_view["occurrence"],
              time_text::format_rfc3339_ms(run.occurrence_ms));
  }
  auto view = schedules_of(*rt).get("default", "every-minute");
  ASSERT_TRUE(view.ok());
  EXPECT_EQ((*view)["info"]["fired"], 3);
}

// The action's memo and search attributes are given to every run it
// starts, across a reopen (they are part of the record); a bad one is
// refused at create, naming the field, and creates nothing.
TEST_F(ScheduleServiceTest, EachRunGetsTheActionsMemoAndSearchAttributes) {
  auto tagged = body("tagged", {{"interval", "1m"}});
  tagged["action"]["memo"] = {{"team", "billing"}};
  tagged["action"]["searchAttributes"] = {
      {"region", "eu"}, {"tier", {{"type", "int"}, {"value", 2}}}};
  {
    auto rt = open();
    auto made = schedules_of(*rt).create("default", tagged);
    ASSERT_TRUE(made.ok()) << made.error().to_string();
    EXPECT_EQ((*made)["action"]["memo"], tagged["action"]["memo"]);
    EXPECT_EQ((*made)["action"]["searchAttributes"]["tier"],
              (json{{"type", "int"}, {"value", 2}}));
    EXPECT_EQ((*made)["action"]["searchAttributes"]["region"],
              (json{{"type", "keyword"}, {"value", "eu"}}));
    clock_->advance_ms(minute_ms);
    ASSERT_EQ(wait_runs(*rt, "tagged", 1).size(), 1u);
  }
  auto rt = open();
  clock_->advance_ms(minute_ms);
  auto runs = wait_runs(*rt, "tagged", 2);
  ASSERT_EQ(runs.size(), 2u);
  for (const auto& run : runs) {
    EXPECT_EQ(run.memo, (json{{"team", "billing"}}));
    EXPECT_EQ(run.search_attributes.at("region"), search_value::keyword("eu"));
    EXPECT_EQ(run.search_attributes.at("tier"), search_value::of_int(2));
  }
  run_filter filter;
  filter.query = "region = 'eu' AND scheduleId = 'tagged'";
  auto found = rt->list(filter);
  ASSERT_TRUE(found.ok()) << found.error().to_string();
  EXPECT_EQ(found->runs.size(), 2u);
  auto bad = body("bad-tags", {{"interval", "1m"}});
  bad["action"]["searchAttributes"] = {{"tier", {{"type", "int"}}}};
  auto refused = schedules_of(*rt).create("default", bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::invalid_argument);
  EXPECT_NE(refused.error().message.find("action.searchAttributes"),
            std::string::npos)
      << refused.error().message;
  EXPECT_FALSE(schedules_of(*rt).get("default", "bad-tags").ok());
}

// An action's search attribute of another type than the tenant's is
// refused at create, as a start's would be, not at every firing; another
// tenant has types of its own.
TEST_F(ScheduleServiceTest, AnActionsAttributeOfAnotherTypeIsRefusedAtCreate) {
  auto rt = open();
  start_options options;
  options.search = {{"tier", search_value::of_int(1)}};
  ASSERT_TRUE(rt->start("quick", json::object(), options).ok());
  auto retyped = body("retyped", {{"interval", "1m"}});
  retyped["action"]["searchAttributes"] = {{"tier", "gold"}};
  auto refused = schedules_of(*rt).create("default", retyped);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::invalid_argument);
  EXPECT_NE(refused.error().message.find(
                "action.searchAttributes: search attribute 'tier' is int"),
            std::string::npos)
      << refused.error().message;
  EXPECT_FALSE(schedules_of(*rt).get("default", "retyped").ok());
  EXPECT_TRUE(schedules_of(*rt).create("acme", retyped).ok());
}

// The action's memo is measured as a start measures it (encoded), so that
// no firing refuses what its create took, nor a create what a start takes.
TEST_F(ScheduleServiceTest, AnActionsMemoIsMeasuredAsAStartMeasuresIt) {
  auto rt = open();
  // 40,000 ones: 80,001 bytes as JSON text, 40,005 encoded.
  auto fits = json::array();
  for (int i = 0; i < 40'000; ++i) {
    fits.push_back(1);
  }
  ASSERT_GT(fits.dump().size(), limits::memo_bytes_max);
  auto fitting = body("fits", {{"interval", "1m"}});
  fitting["action"]["memo"] = fits;
  auto made = schedules_of(*rt).create("default", fitting);
  ASSERT_TRUE(made.ok()) << made.error().to_string();
  clock_->advance_ms(minute_ms);
  auto runs = wait_runs(*rt, "fits", 1);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].memo, fits);
  auto over = json::array();
  for (int i = 0; i < 70'000; ++i) {
    over.push_back(1);
  }
  start_options options;
  options.memo = over;
  auto started = rt->start("quick", json(), options);
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.error().message,
            "memo is 70005 bytes encoded; the limit is 65536");
  auto too_big = body("over", {{"interval", "1m"}});
  too_big["action"]["memo"] = over;
  auto refused = schedules_of(*rt).create("default", too_big);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::invalid_argument);
  EXPECT_NE(refused.error().message.find(
                "action.memo is 70005 bytes encoded; the limit is 65536"),
            std::string::npos)
      << refused.error().message;
  EXPECT_FALSE(schedules_of(*rt).get("default", "over").ok());
}

TEST_F(ScheduleServiceTest, ARepeatedCreateIsAReplayAndAnotherBodyAConflict) {
  auto rt = open();
  auto first = body("nightly", {{"cron", "0 2 * * *"}});
  ASSERT_TRUE(schedules_of(*rt).create("default", first).ok());
  auto again = schedules_of(*rt).create("default", first);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE((*again)["created"].get<bool>());
  auto other = body("nightly", {{"cron", "0 3 * * *"}});
  auto conflict = schedules_of(*rt).create("default", other);
  ASSERT_FALSE(conflict.ok());
  EXPECT_EQ(conflict.error().code, errc::schedule_exists);
  EXPECT_NE(conflict.error().message.find("'nightly'"), std::string::npos);
  // Another tenant has ids of its own.
  EXPECT_TRUE(schedules_of(*rt).create("acme", other).ok());
}

// A create compares what it asks for, not its spelling: defaults sent
// explicitly and a duration as text or milliseconds are the same schedule.
TEST_F(ScheduleServiceTest, ARepeatedCreateComparesMeaningNotSpelling) {
  auto rt = open();
  auto first = body("hourly", {{"interval", "1h"}});
  ASSERT_TRUE(schedules_of(*rt).create("default", first).ok());
  auto spelled = body("hourly", {{"interval", 3'600'000}});
  spelled["overlap"] = "skip";
  spelled["catchupWindow"] = "1m";
  spelled["paused"] = false;
  spelled["note"] = "";
  spelled["action"]["searchAttributes"] = json::object();
  auto again = schedules_of(*rt).create("default", spelled);
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_FALSE((*again)["created"].get<bool>());
  spelled["overlap"] = "allow_all";
  auto other = schedules_of(*rt).create("default", spelled);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.error().code, errc::schedule_exists);
  // After a reopen the stored definition is compared the same way.
  rt.reset();
  rt = open();
  auto reopened = schedules_of(*rt).create("default", first);
  ASSERT_TRUE(reopened.ok()) << reopened.error().message;
  EXPECT_FALSE((*reopened)["created"].get<bool>());
}

TEST_F(ScheduleServiceTest, BadDefinitionsAreRefusedAndChangeNothing) {
  auto rt = open();
  auto unknown_flow = body("x", {{"interval", "1m"}}, "no-such-flow");
  auto refused = schedules_of(*rt).create("default", unknown_flow);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::flow_not_found);
  auto bad_overlap = body("x", {{"interval", "1m"}}, "quick", "sometimes");
  refused = schedules_of(*rt).create("default", bad_overlap);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::invalid_argument);
  EXPECT_NE(refused.error().message.find("overlap"), std::string::npos);
  auto missing = schedules_of(*rt).get("default", "x");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, errc::schedule_not_found);
}

// A crash after the record named the occurrence's run and before the run
// was admitted: the next open starts that very run id, once.
TEST_F(ScheduleServiceTest, ReopenStartsTheRunTheRecordNamedAndNoOther) {
  std::string run_id;
  std::int64_t occurrence = 0;
  {
    // One shard, in the data directory itself (also in the suite's
    // 8-shard pass), so that the test can rewrite the record by hand.
    auto made = persistence::store::open(dir_.path());
    ASSERT_TRUE(made.ok());
  }
  {
    auto rt = open();
    ASSERT_TRUE(schedules_of(*rt)
                    .create("default", body("crashy", {{"interval", "1h"}}))
                    .ok());
  }
  {
    // As the crash left it: `last` names a run that does not exist.
    auto store = persistence::store::open(dir_.path());
    ASSERT_TRUE(store.ok());
    auto record = persistence::get_schedule(**store, "default", "crashy");
    ASSERT_TRUE(record.ok() && record->has_value());
    auto value = **record;
    occurrence = value["state"]["nextMs"].get<std::int64_t>() - 3'600'000;
    run_id = "run_0000000000CRASHEDRUN0000";
    value["state"]["last"] = {{"occurrenceMs", occurrence}, {"runId", run_id}};
    value["state"]["running"] = json::array({run_id});
    value["state"]["fired"] = 1;
    auto batch = (*store)->batch();
    persistence::put_schedule(batch, "default", "crashy", value);
    ASSERT_TRUE((*store)->write(batch).ok());
  }
  auto rt = open();
  auto runs = wait_runs(*rt, "crashy", 1);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].id, run_id);
  EXPECT_EQ(runs[0].occurrence_ms, occurrence);
  settle();
  EXPECT_EQ(runs_of(*rt, "crashy").size(), 1u);
  // And a second open finds the run there: nothing more.
  rt.reset();
  rt = open();
  settle();
  EXPECT_EQ(runs_of(*rt, "crashy").size(), 1u);
}

TEST_F(ScheduleServiceTest,
       MissedOccurrencesInTheWindowFireOnceOlderAreCounted) {
  const auto start = clock_->now_ms();
  {
    auto rt = open();
    auto definition =
        body("catchup", {{"interval", "1m"}}, "quick", "allow_all");
    definition["catchupWindow"] = "5m";
    ASSERT_TRUE(schedules_of(*rt).create("default", definition).ok());
  }
  // Down for 20 minutes: occurrences 1..20 were missed.
  clock_->advance_ms(20 * minute_ms);
  auto rt = open();
  auto runs = wait_runs(*rt, "catchup", 6);
  settle();
  runs = runs_of(*rt, "catchup");
  std::set<std::int64_t> expected;
  for (int k = 15; k <= 20; ++k) {  // now - 5m .. now
    expected.insert(start + k * minute_ms);
  }
  EXPECT_EQ(occurrences(runs), expected);
  EXPECT_EQ(runs.size(), expected.size());
  auto view = schedules_of(*rt).get("default", "catchup");
  ASSERT_TRUE(view.ok());
  EXPECT_EQ((*view)["info"]["missedCatchup"], 14);
  EXPECT_EQ((*view)["info"]["fired"], 6);
}

// A schedule's info.running names the runs it started that have not
// ended, in a view and in a list, also before its next firing (which is
// when it forgets the ended ones).
TEST_F(ScheduleServiceTest, InfoRunningNamesOnlyRunsThatHaveNotEnded) {
  auto rt = open();
  auto& schedules = schedules_of(*rt);
  ASSERT_TRUE(
      schedules.create("default", body("brief", {{"interval", "1m"}})).ok());
  ASSERT_TRUE(
      schedules.create("default", body("lasting", {{"interval", "1m"}}, "long"))
          .ok());
  clock_->advance_ms(minute_ms);
  const auto brief = wait_runs(*rt, "brief", 1);
  const auto lasting = wait_runs(*rt, "lasting", 1);
  ASSERT_EQ(brief.size(), 1u);
  ASSERT_EQ(lasting.size(), 1u);
  ASSERT_TRUE(eventually(
      [&] { return status_is(*rt, brief[0].id, run_status::completed); }));
  auto view = schedules.get("default", "brief");
  ASSERT_TRUE(view.ok());
  EXPECT_EQ((*view)["info"]["running"], json::array()) << view->dump();
  EXPECT_EQ((*view)["info"]["fired"], 1);
  view = schedules.get("default", "lasting");
  ASSERT_TRUE(view.ok());
  EXPECT_EQ((*view)["info"]["running"], json::array({lasting[0].id}));
  auto listed = schedules.list("default", "", 10);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ((*listed)["schedules"].size(), 2u) << listed->dump();
  EXPECT_EQ((*listed)["schedules"][0]["info"]["running"], json::array());
  EXPECT_EQ((*listed)["schedules"][1]["info"]["running"],
            json::array({lasting[0].id}));
}

TEST_F(ScheduleServiceTest, OverlapSkipCountsTheOccurrencesItSkips) {
  auto rt = open();
  ASSERT_TRUE(schedules_of(*rt)
                  .create("default", body("skip", {{"interval", "1m"}}, "long"))
                  .ok());
  clock_->advance_ms(minute_ms);
  ASSERT_EQ(wait_runs(*rt, "skip", 1).size(), 1u);
  settle();
  clock_->advance_ms(minute_ms);
  wait_view(*rt, "skip",
            [](const json& v) { return v["info"]["skippedOverlap"] == 1; });
  clock_->advance_ms(minute_ms);
  auto view = wait_view(*rt, "skip", [](const json& v) {
    return v["info"]["skippedOverlap"] == 2;
  });
  EXPECT_EQ(view["info"]["skippedOverlap"], 2);
  EXPECT_EQ(runs_of(*rt, "skip").size(), 1u);
}

TEST_F(ScheduleServiceTest, OverlapBufferOneStartsOneBufferedRunAfterTheFirst) {
  auto rt = open();
  ASSERT_TRUE(schedules_of(*rt)
                  .create("default", body("buffer", {{"interval", "1m"}},
                                          "long", "buffer_one"))
                  .ok());
  const auto start = clock_->now_ms();
  clock_->advance_ms(minute_ms);
  auto runs = wait_runs(*rt, "buffer", 1);
  ASSERT_EQ(runs.size(), 1u);
  settle();
  clock_->advance_ms(minute_ms);  // buffered
  wait_view(*rt, "buffer",
            [](const json& v) { return v["info"]["buffered"] == 1; });
  clock_->advance_ms(minute_ms);  // no room: skipped
  auto view = wait_view(*rt, "buffer", [](const json& v) {
    return v["info"]["skippedOverlap"] == 1;
  });
  EXPECT_EQ(view["info"]["buffered"], 1);
  EXPECT_EQ(runs_of(*rt, "buffer").size(), 1u);
  ASSERT_TRUE(rt->cancel(runs[0].id, "done").ok());
  runs = wait_runs(*rt, "buffer", 2);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(occurrences(runs),
            (std::set<std::int64_t>{start + minute_ms, start + 2 * minute_ms}));
}

TEST_F(ScheduleServiceTest, OverlapCancelOtherCancelsTheRunningRun) {
  overlap_stops_running("cancel_other", run_status::cancelled);
}

TEST_F(ScheduleServiceTest, OverlapTerminateOtherTerminatesTheRunningRun) {
  overlap_stops_running("terminate_other", run_status::terminated);
}

TEST_F(ScheduleServiceTest, PausedFiresNothingAndUnpauseGoesOnFromNow) {
  auto rt = open();
  const auto start = clock_->now_ms();
  ASSERT_TRUE(schedules_of(*rt)
                  .create("default", body("paused", {{"interval", "1m"}}))
                  .ok());
  auto paused = schedules_of(*rt).pause("default", "paused", true, "deploy");
  ASSERT_TRUE(paused.ok());
  EXPECT_EQ((*paused)["note"], "deploy");
  EXPECT_TRUE((*paused)["paused"].get<bool>());
  clock_->advance_ms(3 * minute_ms);
  settle();
  EXPECT_TRUE(runs_of(*rt, "paused").empty());
  ASSERT_TRUE(schedules_of(*rt).pause("default", "paused", false, "").ok());
  settle();
  EXPECT_TRUE(runs_of(*rt, "paused").empty());  // nothing caught up
  clock_->advance_ms(minute_ms);
  auto runs = wait_runs(*rt, "paused", 1);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].occurrence_ms, start + 4 * minute_ms);
}

TEST_F(ScheduleServiceTest, TriggerAndBackfillFireTheirOccurrencesOnce) {
  auto rt = open();
  const auto start = clock_->now_ms();
  ASSERT_TRUE(schedules_of(*rt)
                  .create("default", body("manual", {{"interval", "1h"}},
                                          "quick", "allow_all"))
                  .ok());
  auto triggered = schedules_of(*rt).trigger("default", "manual");
  ASSERT_TRUE(triggered.ok());
  ASSERT_EQ(wait_runs(*rt, "manual", 1).size(), 1u);
  auto filled = schedules_of(*rt).backfill("default", "manual",
                                           start - 3 * 3'600'000, start - 1);
  ASSERT_TRUE(filled.ok()) << filled.error().to_string();
  EXPECT_EQ((*filled)["occurrences"].size(), 3u);
  auto runs = wait_runs(*rt, "manual", 4);
  settle();
  runs = runs_of(*rt, "manual");
  EXPECT_EQ(occurrences(runs), (std::set<std::int64_t>{start, start - 3'600'000,
                                                       start - 2 * 3'600'000,
                                                       start - 3 * 3'600'000}));
  EXPECT_EQ(runs.size(), 4u);
}

TEST_F(ScheduleServiceTest, JitterDelaysTheFiringByItsDeterministicAmount) {
  auto rt = open();
  const auto start = clock_->now_ms();
  json spec = {{"interval", "1m"}, {"jitter", "30s"}};
  ASSERT_TRUE(schedules_of(*rt).create("default", body("jittery", spec)).ok());
  auto parsed = services::schedule_spec::from_json(spec);
  ASSERT_TRUE(parsed.ok());
  const auto occurrence = start + minute_ms;
  const auto delay = parsed->jitter_of("default", "jittery", occurrence);
  if (delay > 0) {
    clock_->advance_ms(minute_ms + delay - 1);
    settle();
    EXPECT_TRUE(runs_of(*rt, "jittery").empty());
    clock_->advance_ms(1);
  } else {
    clock_->advance_ms(minute_ms);
  }
  auto runs = wait_runs(*rt, "jittery", 1);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].occurrence_ms, occurrence);  // the nominal time
  EXPECT_GE(runs[0].created_at_ms, occurrence + delay);
}

TEST_F(ScheduleServiceTest, DeleteRemovesTheScheduleAndKeepsItsRuns) {
  auto rt = open();
  ASSERT_TRUE(schedules_of(*rt)
                  .create("default", body("gone", {{"interval", "1m"}}))
                  .ok());
  clock_->advance_ms(minute_ms);
  ASSERT_EQ(wait_runs(*rt, "gone", 1).size(), 1u);
  settle();
  ASSERT_TRUE(schedules_of(*rt).remove("default", "gone").ok());
  auto missing = schedules_of(*rt).get("default", "gone");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, errc::schedule_not_found);
  clock_->advance_ms(minute_ms);
  settle();
  EXPECT_EQ(runs_of(*rt, "gone").size(), 1u);
  rt.reset();
  rt = open();
  EXPECT_FALSE(schedules_of(*rt).get("default", "gone").ok());
}

}  // namespace
}  // namespace durin::testing
