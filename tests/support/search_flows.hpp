// Flows the search tests of several binaries share.
#pragma once

#include <string>

#include "durin/durin.hpp"

namespace durin::testing {

// Upserts {name: value} from its input (a string value as a keyword, else
// an int; the name "priority" unless given) and reports what the upsert
// threw: {"refused": message} or {"refused": null}.
inline flow<json> upsert_one(context& ctx, json input) {
  auto name = input.value("name", std::string("priority"));
  auto value = input["value"].is_string()
                   ? search_value::keyword(input["value"].get<std::string>())
                   : search_value::of_int(input["value"].get<std::int64_t>());
  try {
    ctx.upsert_search_attributes({{name, value}});
  } catch (const invalid_argument_error& e) {
    co_return json{{"refused", e.what()}};
  }
  co_return json{{"refused", nullptr}};
}

}  // namespace durin::testing
