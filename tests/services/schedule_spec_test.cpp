// Schedule specs (services/schedule_spec.hpp): the cron grammar, intervals,
// bounds, jitter, and the daylight-saving rule, checked against the real tz
// database on the 2026 transitions of America/New_York (spring forward on
// 8 March at 02:00 EST, fall back on 1 November at 02:00 EDT) and
// Europe/Berlin (29 March, 25 October). Pure functions: no store.
#include <gtest/gtest.h>

#include <vector>

#include "base/time_text.hpp"
#include "services/schedule_spec.hpp"

namespace durin::services {
namespace {

std::int64_t at(const char* rfc3339) {
  auto ms = time_text::parse_rfc3339_ms(rfc3339);
  EXPECT_TRUE(ms.has_value()) << rfc3339;
  return ms.value_or(0);
}

std::string text(std::int64_t ms) {
  return time_text::format_rfc3339_ms(ms);
}

schedule_spec spec_of(const json& body) {
  auto spec = schedule_spec::from_json(body);
  EXPECT_TRUE(spec.ok()) << (spec ? "" : spec.error().to_string());
  return spec ? *spec : schedule_spec{};
}

// The occurrences after `from`, `count` of them.
std::vector<std::string> occurrences(const schedule_spec& spec,
                                     std::int64_t from, int count) {
  std::vector<std::string> out;
  auto next = spec.next_after(from);
  while (next && static_cast<int>(out.size()) < count) {
    out.push_back(text(*next));
    next = spec.next_after(*next);
  }
  return out;
}

TEST(ScheduleSpecTest, CronInUtcFiresAtTheMatchingMinutes) {
  auto spec = spec_of({{"cron", "*/15 9-10 * * mon-fri"}});
  // 2026-12-04 is a Friday; the next weekday is Monday the 7th.
  EXPECT_EQ(occurrences(spec, at("2026-12-04T10:40:00Z"), 3),
            (std::vector<std::string>{"2026-12-04T10:45:00.000Z",
                                      "2026-12-07T09:00:00.000Z",
                                      "2026-12-07T09:15:00.000Z"}));
}

TEST(ScheduleSpecTest, CronTakesListsRangesStepsAndNames) {
  auto spec = spec_of({{"cron", "0,30 8 1-7/3 JAN,jul *"}});
  EXPECT_EQ(occurrences(spec, at("2026-12-31T00:00:00Z"), 5),
            (std::vector<std::string>{
                "2027-01-01T08:00:00.000Z", "2027-01-01T08:30:00.000Z",
                "2027-01-04T08:00:00.000Z", "2027-01-04T08:30:00.000Z",
                "2027-01-07T08:00:00.000Z"}));
}

TEST(ScheduleSpecTest, CronWithBothDayFieldsMatchesEither) {
  // The 13th, or any Friday (Vixie cron).
  auto spec = spec_of({{"cron", "0 0 13 * fri"}});
  EXPECT_EQ(occurrences(spec, at("2026-11-01T00:00:00Z"), 3),
            (std::vector<std::string>{"2026-11-06T00:00:00.000Z",
                                      "2026-11-13T00:00:00.000Z",
                                      "2026-11-20T00:00:00.000Z"}));
}

TEST(ScheduleSpecTest, WeekdaySevenIsSundayAndShorthandsExpand) {
  auto sunday = spec_of({{"cron", "0 12 * * 7"}});
  EXPECT_EQ(occurrences(sunday, at("2026-12-01T00:00:00Z"), 1),
            (std::vector<std::string>{"2026-12-06T12:00:00.000Z"}));
  auto hourly = spec_of({{"cron", "@hourly"}});
  EXPECT_EQ(occurrences(hourly, at("2026-12-01T10:20:00Z"), 1),
            (std::vector<std::string>{"2026-12-01T11:00:00.000Z"}));
}

TEST(ScheduleSpecTest, CronFollowsTheTimeZonesOffset) {
  auto spec = spec_of({{"cron", "0 9 * * *"}, {"timezone", "Asia/Tokyo"}});
  EXPECT_EQ(occurrences(spec, at("2026-12-01T00:00:00Z"), 1),
            (std::vector<std::string>{"2026-12-02T00:00:00.000Z"}));
}

// A skipped hour: 02:30 does not exist in New York on 8 March 2026; the job
// fires once, at the instant the clocks jumped (03:00 EDT = 07:00Z), and
// the days around it at 02:30 of their own offset.
TEST(ScheduleSpecTest, SpringForwardFiresASkippedTimeOnceAtTheJump) {
  auto spec =
      spec_of({{"cron", "30 2 * * *"}, {"timezone", "America/New_York"}});
  EXPECT_EQ(occurrences(spec, at("2026-03-06T12:00:00Z"), 3),
            (std::vector<std::string>{"2026-03-07T07:30:00.000Z",
                                      "2026-03-08T07:00:00.000Z",
                                      "2026-03-09T06:30:00.000Z"}));
}

// Several skipped times and one after the gap land on one instant: it
// fires once there, then goes on.
TEST(ScheduleSpecTest, SpringForwardFiresTheGapOnceForEveryMinuteInIt) {
  auto spec =
      spec_of({{"cron", "*/30 1-3 8 3 *"}, {"timezone", "America/New_York"}});
  EXPECT_EQ(occurrences(spec, at("2026-03-08T00:00:00Z"), 6),
            (std::vector<std::string>{
                "2026-03-08T06:00:00.000Z",  // 01:00 EST
                "2026-03-08T06:30:00.000Z",  // 01:30 EST
                "2026-03-08T07:00:00.000Z",  // 02:00, 02:30 skipped; 03:00 EDT
                "2026-03-08T07:30:00.000Z",  // 03:30 EDT
                "2027-03-08T06:00:00.000Z", "2027-03-08T06:30:00.000Z"}));
}

// A repeated hour: 01:30 happens twice in New York on 1 November 2026
// (EDT, then EST); the job fires once, at the first.
TEST(ScheduleSpecTest, FallBackFiresARepeatedTimeOnceAtItsFirstInstant) {
  auto spec =
      spec_of({{"cron", "30 1 * * *"}, {"timezone", "America/New_York"}});
  EXPECT_EQ(occurrences(spec, at("2026-10-31T12:00:00Z"), 3),
            (std::vector<std::string>{"2026-11-01T05:30:00.000Z",
                                      "2026-11-02T06:30:00.000Z",
                                      "2026-11-03T06:30:00.000Z"}));
  // Asked from inside the second pass of the hour, it does not go back.
  EXPECT_EQ(occurrences(spec, at("2026-11-01T06:15:00Z"), 1),
            (std::vector<std::string>{"2026-11-02T06:30:00.000Z"}));
}

TEST(ScheduleSpecTest, FallBackHourlyJobFiresOncePerWallTime) {
  auto spec = spec_of({{"cron", "0 * 25 10 *"}, {"timezone", "Europe/Berlin"}});
  // 25 October 2026: 03:00 CEST becomes 02:00 CET; 02:00 fires once.
  auto got = occurrences(spec, at("2026-10-24T22:30:00Z"), 4);
  EXPECT_EQ(got, (std::vector<std::string>{
                     "2026-10-24T23:00:00.000Z",  // 01:00 CEST
                     "2026-10-25T00:00:00.000Z",  // 02:00 CEST (first)
                     "2026-10-25T02:00:00.000Z",  // 03:00 CET
                     "2026-10-25T03:00:00.000Z"}));
}

TEST(ScheduleSpecTest, IntervalFiresOnMultiplesFromStartAt) {
  auto plain = spec_of({{"interval", "1s"}});
  EXPECT_EQ(plain.next_after(1'500), 2'000);
  EXPECT_EQ(plain.next_after(2'000), 3'000);
  auto anchored = spec_of({{"interval", "10m"},
                           {"startAt", "2026-12-01T09:05:00Z"},
                           {"endAt", "2026-12-01T09:30:00Z"}});
  EXPECT_EQ(occurrences(anchored, at("2026-11-01T00:00:00Z"), 10),
            (std::vector<std::string>{"2026-12-01T09:05:00.000Z",
                                      "2026-12-01T09:15:00.000Z",
                                      "2026-12-01T09:25:00.000Z"}));
}

TEST(ScheduleSpecTest, JitterIsTheSameForTheSameOccurrenceAndBounded) {
  auto spec = spec_of({{"interval", "1m"}, {"jitter", "30s"}});
  bool differs = false;
  const auto first = spec.jitter_of("t", "nightly", 60'000);
  for (std::int64_t k = 1; k <= 50; ++k) {
    const auto delay = spec.jitter_of("t", "nightly", k * 60'000);
    EXPECT_EQ(delay, spec.jitter_of("t", "nightly", k * 60'000));
    EXPECT_GE(delay, 0);
    EXPECT_LE(delay, 30'000);
    differs = differs || delay != first;
  }
  EXPECT_TRUE(differs);
  EXPECT_EQ(spec_of({{"interval", "1m"}}).jitter_of("t", "n", 60'000), 0);
}

TEST(ScheduleSpecTest, BadSpecsNameTheFieldThatIsWrong) {
  struct bad_case {
    json spec;
    std::string says;
  };
  const std::vector<bad_case> cases = {
      {json::object(), "exactly one of 'cron' and 'interval'"},
      {{{"cron", "* * * *"}}, "5 fields"},
      {{{"cron", "61 * * * *"}}, "cron field 'minute'"},
      {{{"cron", "* * * foo *"}}, "cron field 'month'"},
      {{{"cron", "*/0 * * * *"}}, "a step"},
      {{{"cron", "0 0 * * *"}, {"timezone", "Mars/Olympus"}},
       "unknown time zone 'Mars/Olympus'"},
      {{{"interval", "10ms"}}, "spec.interval"},
      {{{"interval", "1m"}, {"timezone", "UTC"}}, "cron only"},
      {{{"interval", "1m"}, {"startAt", "yesterday"}}, "spec.startAt"},
      {{{"interval", "1m"}, {"colour", "red"}}, "unknown field 'spec.colour'"},
      {{{"cron", "0 0 30 2 *"}}, "never fires"},
      {{{"cron", "0 0 31 4,6,9,11 *"}}, "never fires"},
  };
  for (const auto& one : cases) {
    auto parsed = schedule_spec::from_json(one.spec);
    ASSERT_FALSE(parsed.ok()) << one.spec.dump();
    EXPECT_EQ(parsed.error().code, errc::invalid_argument);
    EXPECT_NE(parsed.error().message.find(one.says), std::string::npos)
        << parsed.error().message;
  }
}

// A day of the month that only some months lack is not refused: February
// 29 fires in leap years, the 31st in the months that have one, and with a
// weekday restricted too (either may match) "February 30" still fires on
// February's Mondays.
TEST(ScheduleSpecTest, ADayOfTheMonthSomeMonthHasIsKept) {
  const auto from = at("2026-12-06T00:00:00Z");
  EXPECT_EQ(occurrences(spec_of({{"cron", "0 0 29 2 *"}}), from, 1),
            std::vector<std::string>{"2028-02-29T00:00:00.000Z"});
  EXPECT_EQ(occurrences(spec_of({{"cron", "0 0 31 2,3 *"}}), from, 1),
            std::vector<std::string>{"2027-03-31T00:00:00.000Z"});
  EXPECT_EQ(occurrences(spec_of({{"cron", "0 0 30 2 mon"}}), from, 1),
            std::vector<std::string>{"2027-02-01T00:00:00.000Z"});
}

}  // namespace
}  // namespace durin::services
