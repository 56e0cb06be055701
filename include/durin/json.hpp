// durin speaks JSON at its edges: flow inputs and outputs, step arguments and
// results are nlohmann::json values or any type with a JSON conversion
// (to_json / from_json). Inside the engine they are stored as MessagePack.
#pragma once

#include <nlohmann/json.hpp>

namespace durin {
using json = nlohmann::json;
}  // namespace durin
