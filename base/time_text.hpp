// Time as text, in one place: RFC 3339 times (formatted in UTC with
// milliseconds, parsed with any offset) and durations written for people
// ("30 days", "2h", "500ms", "1.5 hours"). Pure functions; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace durin::time_text {

// `ms` since the epoch as 2026-11-29T20:17:00.123Z.
std::string format_rfc3339_ms(std::int64_t ms);

// "2026-12-01T10:00:00Z" or "...T10:00:00.250+02:00" -> ms since the
// epoch; nullopt for anything else, also for a field out of its range
// (month 13, February 30, hour 24, an offset of +24:00), never rolled over.
std::optional<std::int64_t> parse_rfc3339_ms(std::string_view text);

// "30 days", "2h", "500ms", "1.5 hours" -> milliseconds; nullopt for
// anything else (units: ms, s, m, h, d, w and their names).
std::optional<double> parse_duration_ms(std::string_view text);

}  // namespace durin::time_text
