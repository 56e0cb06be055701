// The one text form of JSON on the wire and in kept answers: compact, and
// invalid UTF-8 replaced rather than thrown, so an answer kept in a run's
// admission batch is byte for byte the answer the gateway sends.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "durin/json.hpp"

namespace durin {

inline std::string json_text(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// What a JSON library error says about the text, without the library's own
// tag ("[json.exception.parse_error.101] "): callers see their input named,
// not our parser.
inline std::string json_problem(const json::exception& e) {
  std::string text = e.what();
  if (text.rfind("[json.exception.", 0) == 0) {
    if (auto end = text.find("] "); end != std::string::npos) {
      text.erase(0, end + 2);
    }
  }
  return text;
}

// The complaint about the first field of `object` that `allowed` does not
// name, or nothing: one wording for every request body and nested object.
// `where` is the object's path with its dot ("action."), or empty.
inline std::optional<std::string> unknown_field(
    const json& object, std::initializer_list<std::string_view> allowed,
    std::string_view where = {}) {
  for (const auto& [key, value] : object.items()) {
    (void)value;
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) {
      continue;
    }
    std::string problem = "unknown field '" + std::string(where) + key + "'";
    if (allowed.size() == 0) {
      return problem + "; this request takes no fields";
    }
    problem += "; allowed: ";
    for (auto name = allowed.begin(); name != allowed.end(); ++name) {
      problem += (name == allowed.begin() ? "" : ", ") + std::string(*name);
    }
    return problem;
  }
  return std::nullopt;
}

}  // namespace durin
