// When a schedule fires: its spec (a 5-field cron in a time zone, or a fixed
// interval), bounded by startAt/endAt, with a jitter. A pure value: parsed
// and checked once (from_json names the field that is wrong), then asked for
// the occurrence after a time. Thread-safe to share once built.
//
// Cron: "minute hour day-of-month month day-of-week", each field `*`, a
// number, a range `a-b`, a step `*/n` or `a-b/n` or `a/n`, or a list of
// those (`1,15,30-40/5`); months and weekdays also by name (`jan`, `mon`);
// weekday 0 and 7 are Sunday; `@yearly`, `@monthly`, `@weekly`, `@daily`,
// `@hourly` are shorthands. As in Vixie cron, when both day fields are
// restricted a day matches either. Each field is matched against the wall
// clock of `timezone` (an IANA name, "UTC" by default), whose rules come from
// the tz database (Howard Hinnant's date/tz over the system's zoneinfo).
//
// Daylight-saving transitions (the documented rule):
//   - a wall time that does not exist (the hour skipped when clocks spring
//     forward: 02:30 on 2026-03-08 in America/New_York) fires once, at the
//     instant the clocks jumped (03:00 EDT); several such times fire once;
//   - a wall time that exists twice (the hour repeated in autumn) fires
//     once, at its first instant (the earlier offset).
// So every matching wall time of a day fires exactly once, and occurrences
// strictly increase.
//
// Interval: every `interval` from `startAt` (from the Unix epoch without
// one), so "1s" fires on whole seconds; time zones do not apply.
#pragma once

#include <bitset>
#include <cstdint>
#include <optional>
#include <string>

#include "durin/error.hpp"
#include "durin/json.hpp"

namespace date {
class time_zone;
}

namespace durin::services {

// The fields of a parsed cron expression, as sets of allowed values.
struct cron_fields {
  std::bitset<60> minutes;
  std::bitset<24> hours;
  std::bitset<32> days_of_month;  // 1..31
  std::bitset<13> months;         // 1..12
  std::bitset<7> days_of_week;    // 0 = Sunday
  bool any_day_of_month = true;   // the field was `*`
  bool any_day_of_week = true;

  // `text` is the whole expression; invalid-argument names the bad field.
  static result<cron_fields> parse(const std::string& text);
};

struct schedule_spec {
  std::string cron;              // empty with an interval
  std::string timezone = "UTC";  // for cron only
  std::int64_t interval_ms = 0;  // 0 with a cron
  std::int64_t jitter_ms = 0;    // each firing is delayed 0..jitter_ms
  std::int64_t start_at_ms = 0;  // 0: no bound
  std::int64_t end_at_ms = 0;    // 0: no bound

  // {"cron", "timezone", "interval", "jitter", "startAt", "endAt"}:
  // exactly one of cron and interval; durations as strings ("1s", "5m")
  // or milliseconds; times in RFC 3339. invalid-argument names the field.
  static result<schedule_spec> from_json(const json& spec);
  json to_json() const;  // the same fields, durations in ms

  // The first occurrence strictly after `after_ms` and within
  // [start_at_ms, end_at_ms]; nullopt when there is none (the schedule has
  // ended, or the cron matches no date in the next 30 years).
  std::optional<std::int64_t> next_after(std::int64_t after_ms) const;

  // The delay of the firing of `occurrence_ms`: 0..jitter_ms, the same
  // for the same (tenant, schedule, occurrence) on every node and restart.
  std::int64_t jitter_of(const std::string& tenant,
                         const std::string& schedule_id,
                         std::int64_t occurrence_ms) const;

 private:
  status parse_cadence(const json& spec);  // from_json's cron or interval
  std::optional<std::int64_t> next_cron_after(std::int64_t after_ms) const;
  cron_fields fields_;
  const date::time_zone* zone_ = nullptr;
};

}  // namespace durin::services
