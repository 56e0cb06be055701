// Search attributes: typed key/values on a run that GET /v1/runs?query= and
// runtime::list (run_filter::query) filter on. Set at start
// (start_options::search_attributes) and by the flow
// (context::upsert_search_attributes). Plain values; thread-safe to copy.
//
// Typing: an attribute's type is fixed per (tenant, name) by its first use
// on the node (services/search_types.hpp); a later value of another type
// is refused with invalid-argument naming the attribute, and so is a query
// comparing it with a literal of another type.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "durin/error.hpp"
#include "durin/json.hpp"

namespace durin {

// The wire names are "keyword", "int", "double", "bool", "time".
enum class search_attribute_type : std::uint8_t {
  keyword = 1,  // a string, compared bytewise
  integer = 2,  // a signed 64-bit integer
  number = 3,   // a double
  boolean = 4,
  time = 5,  // milliseconds since the Unix epoch; RFC 3339 on the wire
};
inline constexpr std::uint8_t search_attribute_type_max = 5;

std::string_view to_string(search_attribute_type type) noexcept;
std::optional<search_attribute_type> parse_search_attribute_type(
    std::string_view text) noexcept;

// One typed value. Only the field of its type is meaningful: `text` for a
// keyword, `integer` for int and time (ms), `number`, `boolean`.
struct search_value {
  search_attribute_type type = search_attribute_type::keyword;
  std::string text;
  std::int64_t integer = 0;
  double number = 0;
  bool boolean = false;

  static search_value keyword(std::string value);
  static search_value of_int(std::int64_t value);
  static search_value of_double(double value);
  static search_value of_bool(bool value);
  static search_value time_ms(std::int64_t ms_since_epoch);

  bool operator==(const search_value&) const = default;
};

// By name. A name is 1..search_attribute_name_bytes_max bytes of letters,
// digits and '_', starting with a letter, and not one of the query
// language's built-in fields (status, flow, scheduleId, createdAt,
// startedAt, completedAt).
using search_attributes = std::map<std::string, search_value>;

// {"name": {"type": "int", "value": 3}, "dueAt": {"type": "time", "value":
// "2026-12-02T10:00:00.000Z"}, ...}: the form runs are shown with, which
// search_attributes_from_json reads back.
json to_json(const search_attributes& attributes);

// Reads a JSON object of attributes: each value either typed
// ({"type": "time", "value": "2026-12-02T10:00:00Z"}) or plain (a string is
// a keyword, an integer an int, another number a double, true/false a bool).
// invalid-argument naming the attribute for a bad name, type or value, and
// beyond the limits (durin/limits.hpp).
result<search_attributes> search_attributes_from_json(const json& value);

// "" when `attributes` keep the limits and every name is allowed; else a
// message naming the first that does not, prefixed with `what`.
std::string search_attributes_problem(std::string_view what,
                                      const search_attributes& attributes);
// "" when every name of `names` is allowed (at most
// limits::search_attributes_max of them); else a message naming the first
// that is not, prefixed with `what`.
std::string search_attribute_names_problem(
    std::string_view what, const std::vector<std::string>& names);

}  // namespace durin
