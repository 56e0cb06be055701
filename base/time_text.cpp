#include "base/time_text.hpp"

#include <cctype>
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

std::optional<std::int64_t> parse_rfc3339_ms(std::string_view view) {
  const std::string text(view);
  std::tm parts{};
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &year, &month,
                  &day, &hour, &minute, &second, &consumed) != 6) {
    return std::nullopt;
  }
  parts.tm_year = year - 1900;
  parts.tm_mon = month - 1;
  parts.tm_mday = day;
  parts.tm_hour = hour;
  parts.tm_min = minute;
  parts.tm_sec = second;
  std::int64_t ms = static_cast<std::int64_t>(timegm(&parts)) * 1000;
  std::string_view rest(text.c_str() + consumed);
  if (!rest.empty() && rest.front() == '.') {
    rest.remove_prefix(1);
    std::int64_t fraction = 0;
    int digits = 0;
    while (!rest.empty() && std::isdigit(static_cast<unsigned char>(rest[0]))) {
      if (digits < 3) {
        fraction = fraction * 10 + (rest[0] - '0');
        ++digits;
      }
      rest.remove_prefix(1);
    }
    while (digits < 3) {
      fraction *= 10;
      ++digits;
    }
    ms += fraction;
  }
  if (rest == "Z" || rest == "z") {
    return ms;
  }
  int offset_hours = 0, offset_minutes = 0;
  if (rest.size() == 6 && (rest[0] == '+' || rest[0] == '-') &&
      std::sscanf(std::string(rest.substr(1)).c_str(), "%2d:%2d", &offset_hours,
                  &offset_minutes) == 2) {
    std::int64_t offset = (offset_hours * 60 + offset_minutes) * 60'000LL;
    return rest[0] == '+' ? ms - offset : ms + offset;
  }
  return std::nullopt;
}

}  // namespace durin::time_text
