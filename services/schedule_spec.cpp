// Schedule specs: the cron parser is durin's, the time-zone rules are the
// tz database's (date/tz.h). The DST rule is in schedule_spec.hpp.
#include "services/schedule_spec.hpp"

#include <date/tz.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <sstream>
#include <vector>

#include "base/json_text.hpp"
#include "base/time_text.hpp"

namespace durin::services {

namespace {

namespace chrono = std::chrono;

constexpr std::int64_t interval_ms_min = 1000;
constexpr std::int64_t duration_ms_max = 366LL * 24 * 3600 * 1000;
// How far ahead a cron is searched (a "Feb 29 on a Monday" recurs within
// 28 years).
constexpr int cron_search_days = 30 * 366;

error bad(const std::string& message) {
  return make_error(errc::invalid_argument, message);
}

// One name table per field that takes names; indexes are the values.
constexpr std::array<const char*, 13> month_names = {
    "",    "jan", "feb", "mar", "apr", "may", "jun",
    "jul", "aug", "sep", "oct", "nov", "dec"};
constexpr std::array<const char*, 8> weekday_names = {
    "sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun"};

struct field_range {
  const char* name;
  int min;
  int max;
};

std::optional<int> parse_value(std::string text, const field_range& range) {
  if (text.empty() || text.size() > 3) {
    return std::nullopt;
  }
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  auto named = [&](const auto& names) -> std::optional<int> {
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (text == names[i] && *names[i] != '\0') {
        return static_cast<int>(i);
      }
    }
    return std::nullopt;
  };
  if (range.max == 12) {
    if (auto value = named(month_names)) {
      return value;
    }
  }
  if (range.max == 7) {
    if (auto value = named(weekday_names)) {
      return value;
    }
  }
  int value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    value = value * 10 + (c - '0');
  }
  return value;
}

// One field ("1-5/2,10"): the allowed values, or invalid-argument.
result<std::vector<bool>> parse_field(const std::string& text,
                                      const field_range& range) {
  std::vector<bool> allowed(static_cast<std::size_t>(range.max + 1), false);
  std::stringstream parts(text);
  std::string part;
  auto wrong = [&](const std::string& why) {
    return bad(std::string("cron field '") + range.name + "' ('" + text +
               "'): " + why);
  };
  bool any = false;
  while (std::getline(parts, part, ',')) {
    any = true;
    int step = 1;
    const bool stepped = part.find('/') != std::string::npos;
    if (auto slash = part.find('/'); slash != std::string::npos) {
      auto step_value = parse_value(part.substr(slash + 1), {"", 1, 999});
      if (!step_value || *step_value < 1) {
        return wrong("a step is a number of at least 1");
      }
      step = *step_value;
      part = part.substr(0, slash);
    }
    int low = range.min;
    int high = range.max;
    if (part != "*") {
      auto dash = part.find('-');
      auto first = parse_value(part.substr(0, dash), range);
      if (!first) {
        return wrong("'" + part + "' is not a value");
      }
      low = *first;
      // `a/n` runs from a to the field's end, as in Vixie cron.
      high = stepped && dash == std::string::npos ? range.max : low;
      if (dash != std::string::npos) {
        auto last = parse_value(part.substr(dash + 1), range);
        if (!last) {
          return wrong("'" + part + "' is not a range");
        }
        high = *last;
      }
    }
    if (low < range.min || high > range.max || low > high) {
      return wrong("values are " + std::to_string(range.min) + " to " +
                   std::to_string(range.max));
    }
    for (int value = low; value <= high; value += step) {
      allowed[static_cast<std::size_t>(value)] = true;
    }
  }
  if (!any) {
    return wrong("empty");
  }
  return allowed;
}

template <std::size_t n>
void copy_into(std::bitset<n>& out, const std::vector<bool>& values,
               int offset = 0) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i]) {
      out.set((i + static_cast<std::size_t>(offset)) % n);
    }
  }
}

std::string expand_shorthand(const std::string& text) {
  if (text == "@yearly" || text == "@annually") {
    return "0 0 1 1 *";
  }
  if (text == "@monthly") {
    return "0 0 1 * *";
  }
  if (text == "@weekly") {
    return "0 0 * * 0";
  }
  if (text == "@daily" || text == "@midnight") {
    return "0 0 * * *";
  }
  if (text == "@hourly") {
    return "0 * * * *";
  }
  return text;
}

// A duration field: "1s", "5 minutes" or a number of milliseconds.
result<std::int64_t> duration_of(const json& spec, const char* field,
                                 std::int64_t min) {
  const auto& value = spec[field];
  std::optional<double> ms;
  if (value.is_number()) {
    ms = value.get<double>();
  } else if (value.is_string()) {
    ms = time_text::parse_duration_ms(value.get<std::string>());
  }
  if (!ms || !std::isfinite(*ms) || *ms < static_cast<double>(min) ||
      *ms > static_cast<double>(duration_ms_max)) {
    return make_error(errc::invalid_argument,
                      std::string("spec.") + field +
                          " must be a duration (\"30s\", \"5m\", or "
                          "milliseconds) from " +
                          std::to_string(min) + " ms to 366 days");
  }
  return static_cast<std::int64_t>(std::llround(*ms));
}

result<std::int64_t> time_of(const json& spec, const char* field) {
  const auto& value = spec[field];
  std::optional<std::int64_t> ms;
  if (value.is_string()) {
    ms = time_text::parse_rfc3339_ms(value.get<std::string>());
  }
  if (!ms || *ms <= 0) {
    return make_error(errc::invalid_argument,
                      std::string("spec.") + field +
                          " must be an RFC 3339 time after 1970, e.g. "
                          "\"2026-12-01T09:00:00Z\"");
  }
  return *ms;
}

// A wall time of `zone` as the instant it names, by the rule of the
// header: a skipped time is the instant the clocks jumped, a repeated one
// its first instant.
std::int64_t instant_of(const date::time_zone& zone,
                        date::local_time<chrono::minutes> wall) {
  auto info = zone.get_info(wall);
  chrono::sys_time<chrono::milliseconds> at;
  switch (info.result) {
    case date::local_info::unique:
    case date::local_info::ambiguous:
      at = chrono::sys_time<chrono::milliseconds>(wall.time_since_epoch() -
                                                  info.first.offset);
      break;
    case date::local_info::nonexistent:
      at = info.first.end;
      break;
  }
  return at.time_since_epoch().count();
}

}  // namespace

result<cron_fields> cron_fields::parse(const std::string& text) {
  std::stringstream words(expand_shorthand(text));
  std::vector<std::string> fields;
  for (std::string word; words >> word;) {
    fields.push_back(word);
  }
  if (fields.size() != 5) {
    return bad(
        "spec.cron must have 5 fields (minute hour day-of-month "
        "month day-of-week); '" +
        text + "' has " + std::to_string(fields.size()));
  }
  static const std::array<field_range, 5> ranges = {
      field_range{"minute", 0, 59}, field_range{"hour", 0, 23},
      field_range{"day-of-month", 1, 31}, field_range{"month", 1, 12},
      field_range{"day-of-week", 0, 7}};
  cron_fields out;
  std::array<std::vector<bool>, 5> values;
  for (std::size_t i = 0; i < 5; ++i) {
    auto parsed = parse_field(fields[i], ranges[i]);
    if (!parsed) {
      return parsed.error();
    }
    values[i] = std::move(*parsed);
  }
  copy_into(out.minutes, values[0]);
  copy_into(out.hours, values[1]);
  copy_into(out.days_of_month, values[2]);
  copy_into(out.months, values[3]);
  copy_into(out.days_of_week, values[4]);  // 7 lands on 0: Sunday
  out.any_day_of_month = fields[2] == "*";
  out.any_day_of_week = fields[4] == "*";
  // Only the day of the month picks days (no weekday may match instead):
  // it must name a day one of the months has, or the schedule would never
  // fire ("0 0 30 2 *": February 30).
  if (out.any_day_of_week) {
    static constexpr std::array<unsigned, 13> days_in = {
        0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool meets = false;
    for (unsigned month = 1; month <= 12 && !meets; ++month) {
      for (unsigned day = 1; day <= days_in[month] && out.months[month];
           ++day) {
        if (out.days_of_month[day]) {
          meets = true;
          break;
        }
      }
    }
    if (!meets) {
      return bad("spec.cron '" + text +
                 "' never fires: none of its months has the day of the "
                 "month it names");
    }
  }
  return out;
}

// Exactly one of "cron" (with its "timezone") and "interval".
status schedule_spec::parse_cadence(const json& spec) {
  const bool has_cron = spec.contains("cron") && !spec["cron"].is_null();
  const bool has_interval =
      spec.contains("interval") && !spec["interval"].is_null();
  if (has_cron == has_interval) {
    return bad("spec needs exactly one of 'cron' and 'interval'");
  }
  if (has_cron) {
    if (!spec["cron"].is_string() ||
        spec["cron"].get<std::string>().size() > 256) {
      return bad("spec.cron must be a string of at most 256 bytes");
    }
    cron = spec["cron"].get<std::string>();
    auto fields = cron_fields::parse(cron);
    if (!fields) {
      return fields.error();
    }
    fields_ = *fields;
    if (spec.contains("timezone") && !spec["timezone"].is_null()) {
      if (!spec["timezone"].is_string()) {
        return bad("spec.timezone must be an IANA time zone name");
      }
      timezone = spec["timezone"].get<std::string>();
    }
    try {
      zone_ = date::locate_zone(timezone);
    } catch (const std::exception&) {
      return bad("spec.timezone: unknown time zone '" + timezone +
                 "' (an IANA name such as \"America/New_York\" or \"UTC\")");
    }
  } else {
    if (spec.contains("timezone") && !spec["timezone"].is_null()) {
      return bad("spec.timezone applies to a cron only");
    }
    auto every = duration_of(spec, "interval", interval_ms_min);
    if (!every) {
      return every.error();
    }
    interval_ms = *every;
  }
  return {};
}

result<schedule_spec> schedule_spec::from_json(const json& spec) {
  if (!spec.is_object()) {
    return bad("spec must be an object");
  }
  if (auto problem = unknown_field(
          spec, {"cron", "timezone", "interval", "jitter", "startAt", "endAt"},
          "spec.")) {
    return bad(*problem);
  }
  schedule_spec out;
  if (auto cadence = out.parse_cadence(spec); !cadence) {
    return cadence.error();
  }
  if (spec.contains("jitter") && !spec["jitter"].is_null()) {
    auto jitter = duration_of(spec, "jitter", 0);
    if (!jitter) {
      return jitter.error();
    }
    out.jitter_ms = *jitter;
  }
  for (auto [field, into] : {std::pair{"startAt", &out.start_at_ms},
                             std::pair{"endAt", &out.end_at_ms}}) {
    if (spec.contains(field) && !spec[field].is_null()) {
      auto at = time_of(spec, field);
      if (!at) {
        return at.error();
      }
      *into = *at;
    }
  }
  if (out.end_at_ms != 0 && out.end_at_ms < out.start_at_ms) {
    return bad("spec.endAt is before spec.startAt");
  }
  return out;
}

json schedule_spec::to_json() const {
  json out = json::object();
  if (!cron.empty()) {
    out["cron"] = cron;
    out["timezone"] = timezone;
  } else {
    out["interval"] = interval_ms;
  }
  out["jitter"] = jitter_ms;
  out["startAt"] = start_at_ms == 0
                       ? json(nullptr)
                       : json(time_text::format_rfc3339_ms(start_at_ms));
  out["endAt"] = end_at_ms == 0 ? json(nullptr)
                                : json(time_text::format_rfc3339_ms(end_at_ms));
  return out;
}

std::optional<std::int64_t> schedule_spec::next_after(
    std::int64_t after_ms) const {
  after_ms = std::max(after_ms, start_at_ms - 1);
  std::optional<std::int64_t> next;
  if (interval_ms > 0) {
    // Multiples of the interval from the anchor: floor division, so a time
    // before the anchor (or a negative one) works too.
    const std::int64_t anchor = start_at_ms;
    const std::int64_t since = after_ms - anchor;
    std::int64_t k = since / interval_ms;
    if (since % interval_ms != 0 && since < 0) {
      --k;
    }
    next = anchor + (k + 1) * interval_ms;
  } else {
    next = next_cron_after(after_ms);
  }
  if (next && end_at_ms != 0 && *next > end_at_ms) {
    return std::nullopt;
  }
  return next;
}

std::optional<std::int64_t> schedule_spec::next_cron_after(
    std::int64_t after_ms) const {
  if (zone_ == nullptr) {
    return std::nullopt;
  }
  const chrono::sys_time<chrono::milliseconds> after{
      chrono::milliseconds(after_ms)};
  // Start a day early: the instant `after` may be in the repeated hour,
  // whose wall times also belong to the first pass.
  auto wall = zone_->to_local(after);
  auto day = date::floor<date::days>(wall) - date::days(1);
  for (int i = 0; i < cron_search_days; ++i, day += date::days(1)) {
    const date::year_month_day ymd(day);
    if (!fields_.months.test(static_cast<unsigned>(ymd.month()))) {
      continue;
    }
    const bool dom =
        fields_.days_of_month.test(static_cast<unsigned>(ymd.day()));
    const bool dow = fields_.days_of_week.test(date::weekday(day).c_encoding());
    // Vixie cron: with both day fields restricted, either matches.
    const bool day_matches = fields_.any_day_of_month || fields_.any_day_of_week
                                 ? dom && dow
                                 : dom || dow;
    if (!day_matches) {
      continue;
    }
    // Within one day instants do not decrease with the wall time (a
    // skipped time maps to the jump, a repeated one to its first pass), so
    // the first that is later than `after` is the next occurrence.
    for (unsigned hour = 0; hour < 24; ++hour) {
      if (!fields_.hours.test(hour)) {
        continue;
      }
      for (unsigned minute = 0; minute < 60; ++minute) {
        if (!fields_.minutes.test(minute)) {
          continue;
        }
        auto at = instant_of(
            *zone_, date::local_time<chrono::minutes>(day.time_since_epoch() +
                                                      chrono::hours(hour) +
                                                      chrono::minutes(minute)));
        if (at > after_ms) {
          return at;
        }
      }
    }
  }
  return std::nullopt;
}

std::int64_t schedule_spec::jitter_of(const std::string& tenant,
                                      const std::string& schedule_id,
                                      std::int64_t occurrence_ms) const {
  if (jitter_ms <= 0) {
    return 0;
  }
  // FNV-1a 64 over the three, with separators: no randomness, so every
  // node and every restart picks the same delay for the same firing.
  std::uint64_t hash = 14695981039346656037ULL;
  auto mix = [&hash](std::string_view bytes) {
    for (unsigned char c : bytes) {
      hash ^= c;
      hash *= 1099511628211ULL;
    }
    hash ^= 0xff;
    hash *= 1099511628211ULL;
  };
  mix(tenant);
  mix(schedule_id);
  mix(std::to_string(occurrence_ms));
  return static_cast<std::int64_t>(hash %
                                   static_cast<std::uint64_t>(jitter_ms + 1));
}

}  // namespace durin::services
