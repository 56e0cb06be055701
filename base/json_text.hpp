// The one text form of JSON on the wire and in kept answers: compact, and
// invalid UTF-8 replaced rather than thrown, so an answer kept in a run's
// admission batch is byte for byte the answer the gateway sends.
#pragma once

#include <string>

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

}  // namespace durin
