// The query language of run lists (GET /v1/runs?query=, run_filter::query):
// its parser and the check of one run record against a parsed query, which
// the store's scan runs on every record of the tenant it lists. Pure
// functions over plain values; any thread.
//
//   query      := or
//   or         := and { OR and }
//   and        := primary { AND primary }
//   primary    := "(" or ")" | comparison
//   comparison := field op value | field IN "(" value { "," value } ")"
//   op         := = | != | < | > | <= | >=
//   value      := 'text' | "text" | number | true | false
//
// Keywords are case-insensitive; AND binds tighter than OR. A field is a
// built-in (status, flow, scheduleId, createdAt, startedAt, completedAt) or
// a search attribute's name. Times (the built-ins *At and time attributes)
// are compared with RFC 3339 strings. A comparison with a field a run does
// not have (an attribute it lacks, a completedAt of a run that has not
// ended) is false, for != too. Limits: durin/limits.hpp (query_*).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "durin/error.hpp"
#include "durin/search.hpp"
#include "persistence/records.hpp"

namespace durin::persistence {

enum class query_field : std::uint8_t {
  attribute,
  status,
  flow,
  schedule_id,
  created_at,
  started_at,
  completed_at,
};

enum class query_op : std::uint8_t { eq, ne, lt, gt, le, ge, in };

// One comparison, its values typed as the field is (a status by its name).
struct query_comparison {
  query_field field = query_field::attribute;
  std::string attribute;  // the search attribute's name, for `attribute`
  query_op op = query_op::eq;
  std::vector<search_value> values;  // one; IN: one or more
};

struct run_query {
  enum class kind : std::uint8_t { comparison, all, any };
  kind what = kind::all;  // an `all` of no children matches every run
  query_comparison comparison;
  std::vector<run_query> children;  // all (AND), any (OR)
};

// The type a tenant's attribute has on this node, if it has one: a literal
// of another type is refused. An attribute without one takes its literal's
// type (a string is a keyword).
using attribute_type_of =
    std::function<std::optional<search_attribute_type>(std::string_view name)>;

// Parses `text`; an empty (or blank) text is the query of every run.
// invalid-argument naming the position (1-based, in bytes) and the token
// where the text is wrong, a type that does not fit, or a limit.
result<run_query> parse_run_query(std::string_view text,
                                  const attribute_type_of& type_of);

// True when `record` satisfies `query`.
bool matches(const run_query& query, const run_record& record);

}  // namespace durin::persistence
