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

}  // namespace durin
