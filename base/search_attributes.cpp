// Search attribute values and their JSON form (include/durin/search.hpp).
#include <cmath>

#include "base/time_text.hpp"
#include "durin/limits.hpp"
#include "durin/search.hpp"

namespace durin {

std::string_view to_string(search_attribute_type type) noexcept {
  switch (type) {
    case search_attribute_type::keyword:
      return "keyword";
    case search_attribute_type::integer:
      return "int";
    case search_attribute_type::number:
      return "double";
    case search_attribute_type::boolean:
      return "bool";
    case search_attribute_type::time:
      return "time";
  }
  return "unknown";
}

std::optional<search_attribute_type> parse_search_attribute_type(
    std::string_view text) noexcept {
  for (std::uint8_t i = 1; i <= search_attribute_type_max; ++i) {
    auto type = static_cast<search_attribute_type>(i);
    if (to_string(type) == text) {
      return type;
    }
  }
  return std::nullopt;
}

search_value search_value::keyword(std::string value) {
  search_value out;
  out.type = search_attribute_type::keyword;
  out.text = std::move(value);
  return out;
}

search_value search_value::of_int(std::int64_t value) {
  search_value out;
  out.type = search_attribute_type::integer;
  out.integer = value;
  return out;
}

search_value search_value::of_double(double value) {
  search_value out;
  out.type = search_attribute_type::number;
  out.number = value;
  return out;
}

search_value search_value::of_bool(bool value) {
  search_value out;
  out.type = search_attribute_type::boolean;
  out.boolean = value;
  return out;
}

search_value search_value::time_ms(std::int64_t ms_since_epoch) {
  search_value out;
  out.type = search_attribute_type::time;
  out.integer = ms_since_epoch;
  return out;
}

namespace {

constexpr std::string_view built_in_fields[] = {
    "status", "flow", "scheduleId", "createdAt", "startedAt", "completedAt"};

json value_json(const search_value& value) {
  switch (value.type) {
    case search_attribute_type::keyword:
      return value.text;
    case search_attribute_type::integer:
      return value.integer;
    case search_attribute_type::number:
      return value.number;
    case search_attribute_type::boolean:
      return value.boolean;
    case search_attribute_type::time:
      return time_text::format_rfc3339_ms(value.integer);
  }
  return nullptr;
}

std::string name_problem(std::string_view name) {
  if (name.empty() || name.size() > limits::search_attribute_name_bytes_max) {
    return "a search attribute's name is 1 to " +
           std::to_string(limits::search_attribute_name_bytes_max) +
           " bytes; got " + std::to_string(name.size());
  }
  auto letter = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  };
  if (!letter(name[0])) {
    return "search attribute '" + std::string(name) +
           "': a name starts with a letter";
  }
  for (char c : name) {
    if (!letter(c) && !(c >= '0' && c <= '9') && c != '_') {
      return "search attribute '" + std::string(name) +
             "': a name holds only letters, digits and '_'";
    }
  }
  for (auto built_in : built_in_fields) {
    if (name == built_in) {
      return "search attribute '" + std::string(name) +
             "': the name is a built-in field of the query language";
    }
  }
  return {};
}

std::string value_problem(const std::string& name, const search_value& value) {
  if (value.type == search_attribute_type::keyword &&
      value.text.size() > limits::search_keyword_bytes_max) {
    return "search attribute '" + name + "': a keyword is at most " +
           std::to_string(limits::search_keyword_bytes_max) + " bytes; got " +
           std::to_string(value.text.size());
  }
  if (value.type == search_attribute_type::number &&
      !std::isfinite(value.number)) {
    return "search attribute '" + name + "': a double must be finite";
  }
  if (value.type == search_attribute_type::time &&
      (value.integer < 0 || value.integer > limits::time_ms_max)) {
    return "search attribute '" + name +
           "': a time is between 1970-01-01T00:00:00Z and "
           "9999-12-31T23:59:59.999Z";
  }
  return {};
}

// A typed {"type", "value"} or a plain JSON value; "" into `problem` when it
// reads.
search_value read_value(const std::string& name, const json& given,
                        std::string& problem) {
  auto refuse = [&](std::string why) {
    problem = "search attribute '" + name + "': " + std::move(why);
    return search_value{};
  };
  if (given.is_object()) {
    if (!given.contains("type") || !given["type"].is_string() ||
        !given.contains("value") || given.size() != 2) {
      return refuse(
          "a typed value is {\"type\": keyword|int|double|bool|time, "
          "\"value\": ...}");
    }
    auto type = parse_search_attribute_type(given["type"].get<std::string>());
    if (!type) {
      return refuse("unknown type '" + given["type"].get<std::string>() +
                    "'; one of keyword, int, double, bool, time");
    }
    const auto& value = given["value"];
    switch (*type) {
      case search_attribute_type::keyword:
        if (value.is_string()) {
          return search_value::keyword(value.get<std::string>());
        }
        break;
      case search_attribute_type::integer:
        if (value.is_number_integer() &&
            (value.is_number_unsigned()
                 ? value.get<std::uint64_t>() <= INT64_MAX
                 : true)) {
          return search_value::of_int(value.get<std::int64_t>());
        }
        break;
      case search_attribute_type::number:
        if (value.is_number()) {
          return search_value::of_double(value.get<double>());
        }
        break;
      case search_attribute_type::boolean:
        if (value.is_boolean()) {
          return search_value::of_bool(value.get<bool>());
        }
        break;
      case search_attribute_type::time:
        if (value.is_string()) {
          if (auto ms = time_text::parse_rfc3339_ms(value.get<std::string>())) {
            return search_value::time_ms(*ms);
          }
          return refuse("'" + value.get<std::string>() +
                        "' is not an RFC 3339 time");
        }
        break;
    }
    return refuse("the value does not fit type " +
                  std::string(to_string(*type)));
  }
  if (given.is_string()) {
    return search_value::keyword(given.get<std::string>());
  }
  if (given.is_boolean()) {
    return search_value::of_bool(given.get<bool>());
  }
  if (given.is_number_unsigned() && given.get<std::uint64_t>() > INT64_MAX) {
    return refuse("an int is at most 2^63 - 1");
  }
  if (given.is_number_integer()) {
    return search_value::of_int(given.get<std::int64_t>());
  }
  if (given.is_number_float()) {
    return search_value::of_double(given.get<double>());
  }
  return refuse(
      "a value is a string, a number, a bool, or {\"type\", \"value\"}");
}

}  // namespace

json to_json(const search_attributes& attributes) {
  json out = json::object();
  for (const auto& [name, value] : attributes) {
    out[name] = {{"type", std::string(to_string(value.type))},
                 {"value", value_json(value)}};
  }
  return out;
}

namespace {

// The checks both problem functions share: the count, then each item's
// name (`name_of`) and what `value_problem_of` finds in its value.
template <class Range, class Name, class Value>
std::string problem_of(std::string_view what, const Range& range, Name name_of,
                       Value value_problem_of) {
  std::string prefix = what.empty() ? "" : std::string(what) + ": ";
  if (range.size() > limits::search_attributes_max) {
    return prefix + "at most " + std::to_string(limits::search_attributes_max) +
           " search attributes; got " + std::to_string(range.size());
  }
  for (const auto& item : range) {
    if (auto problem = name_problem(name_of(item)); !problem.empty()) {
      return prefix + problem;
    }
    if (auto problem = value_problem_of(item); !problem.empty()) {
      return prefix + problem;
    }
  }
  return {};
}

}  // namespace

std::string search_attributes_problem(std::string_view what,
                                      const search_attributes& attributes) {
  return problem_of(
      what, attributes, [](const auto& item) { return item.first; },
      [](const auto& item) { return value_problem(item.first, item.second); });
}

std::string search_attribute_names_problem(
    std::string_view what, const std::vector<std::string>& names) {
  return problem_of(
      what, names, [](const std::string& name) { return name; },
      [](const std::string&) { return std::string(); });
}

result<search_attributes> search_attributes_from_json(const json& value) {
  if (!value.is_object()) {
    return make_error(errc::invalid_argument,
                      "searchAttributes must be an object of name to value");
  }
  if (value.size() > limits::search_attributes_max) {
    return make_error(
        errc::invalid_argument,
        "at most " + std::to_string(limits::search_attributes_max) +
            " search attributes; got " + std::to_string(value.size()));
  }
  search_attributes out;
  for (const auto& [name, given] : value.items()) {
    if (auto problem = name_problem(name); !problem.empty()) {
      return make_error(errc::invalid_argument, problem);
    }
    std::string problem;
    auto read = read_value(name, given, problem);
    if (problem.empty()) {
      problem = value_problem(name, read);
    }
    if (!problem.empty()) {
      return make_error(errc::invalid_argument, problem);
    }
    out.emplace(name, std::move(read));
  }
  return out;
}

}  // namespace durin
