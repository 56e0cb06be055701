#include "base/time_text.hpp"

#include <cctype>
#include <cstddef>
#include <cstdio>
#include <ctime>
#include <string>

namespace durin::time_text {

std::string format_rfc3339_ms(std::int64_t ms) {
  std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm parts{};
  gmtime_r(&seconds, &parts);
  char text[64];
  std::snprintf(text, sizeof(text), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
                parts.tm_hour, parts.tm_min, parts.tm_sec,
                static_cast<int>(ms % 1000));
  return text;
}

std::optional<double> parse_duration_ms(std::string_view text) {
  std::size_t i = 0;
  while (
      i < text.size() &&
      (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  if (i == 0) {
    return std::nullopt;
  }
  double amount = 0;
  try {
    amount = std::stod(std::string(text.substr(0, i)));
  } catch (const std::exception&) {
    return std::nullopt;
  }
  auto unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ') {
    unit.remove_prefix(1);
  }
  struct named {
    const char* name;
    double ms;
  };
  static constexpr named units[] = {{"ms", 1},
                                    {"millisecond", 1},
                                    {"milliseconds", 1},
                                    {"s", 1000},
                                    {"sec", 1000},
                                    {"second", 1000},
                                    {"seconds", 1000},
                                    {"m", 60'000},
                                    {"min", 60'000},
                                    {"minute", 60'000},
                                    {"minutes", 60'000},
                                    {"h", 3'600'000},
                                    {"hour", 3'600'000},
                                    {"hours", 3'600'000},
                                    {"d", 86'400'000},
                                    {"day", 86'400'000},
                                    {"days", 86'400'000},
                                    {"w", 604'800'000},
                                    {"week", 604'800'000},
                                    {"weeks", 604'800'000}};
  for (const auto& candidate : units) {
    if (unit == candidate.name) {
      return amount * candidate.ms;
    }
  }
  return std::nullopt;
}

namespace {

// The number written by the digits text[at, at + n), or -1 when one of them
// is not a digit.
int digits_at(std::string_view text, std::size_t at, std::size_t n) {
  int value = 0;
  for (std::size_t i = at; i < at + n; ++i) {
    if (i >= text.size() || text[i] < '0' || text[i] > '9') {
      return -1;
    }
    value = value * 10 + (text[i] - '0');
  }
  return value;
}

int days_in_month(int year, int month) {
  static constexpr int days[] = {31, 28, 31, 30, 31, 30,
                                 31, 31, 30, 31, 30, 31};
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  return month == 2 && leap ? 29 : days[month - 1];
}

}  // namespace

std::optional<std::int64_t> parse_rfc3339_ms(std::string_view text) {
  // YYYY-MM-DDTHH:MM:SS, every field its exact digits and in its range
  // (a second of 60 is a leap second); no sign, space or rollover.
  const int year = digits_at(text, 0, 4);
  const int month = digits_at(text, 5, 2);
  const int day = digits_at(text, 8, 2);
  const int hour = digits_at(text, 11, 2);
  const int minute = digits_at(text, 14, 2);
  const int second = digits_at(text, 17, 2);
  if (text.size() < 20 || text[4] != '-' || text[7] != '-' ||
      (text[10] != 'T' && text[10] != 't') || text[13] != ':' ||
      text[16] != ':' || year < 0 || month < 1 || month > 12 || day < 1 ||
      day > days_in_month(year, month) || hour < 0 || hour > 23 || minute < 0 ||
      minute > 59 || second < 0 || second > 60) {
    return std::nullopt;
  }
  std::tm parts{};
  parts.tm_year = year - 1900;
  parts.tm_mon = month - 1;
  parts.tm_mday = day;
  parts.tm_hour = hour;
  parts.tm_min = minute;
  parts.tm_sec = second;
  std::int64_t ms = static_cast<std::int64_t>(timegm(&parts)) * 1000;
  std::string_view rest = text.substr(19);
  if (!rest.empty() && rest.front() == '.') {
    rest.remove_prefix(1);
    std::int64_t fraction = 0;
    int digits = 0;
    while (!rest.empty() && rest[0] >= '0' && rest[0] <= '9') {
      if (digits < 3) {
        fraction = fraction * 10 + (rest[0] - '0');
      }
      ++digits;
      rest.remove_prefix(1);
    }
    if (digits == 0) {
      return std::nullopt;  // a dot needs at least one digit
    }
    for (; digits < 3; ++digits) {
      fraction *= 10;
    }
    ms += fraction;
  }
  if (rest == "Z" || rest == "z") {
    return ms;
  }
  const int offset_hours = digits_at(rest, 1, 2);
  const int offset_minutes = digits_at(rest, 4, 2);
  if (rest.size() != 6 || (rest[0] != '+' && rest[0] != '-') ||
      rest[3] != ':' || offset_hours < 0 || offset_hours > 23 ||
      offset_minutes < 0 || offset_minutes > 59) {
    return std::nullopt;
  }
  const std::int64_t offset = (offset_hours * 60 + offset_minutes) * 60'000LL;
  return rest[0] == '+' ? ms - offset : ms + offset;
}

}  // namespace durin::time_text
