// The type of every search attribute name, per tenant, as this node knows
// it: fixed by the name's first use (a start's attributes, a flow's upsert)
// and seeded at open, and after a shard is recovered, from the stored runs
// (store::search_attribute_types). Starts and upserts claim their types
// here before anything is written; queries ask it to type their literals.
//
// Thread-safety: every method may be called from any thread (one mutex;
// run actors call claim, held for a map lookup only).
//
// Not durable by itself: the run records are. A type claimed by a start
// that is then refused, or by an upsert whose write fails, stays fixed
// until the node restarts. Each node of a cluster keeps its own view; two
// nodes whose first uses of a name differ keep different types (a query
// then matches, on each node, only the runs of that node's type).
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "durin/search.hpp"

namespace durin::services {

class search_types {
 public:
  // Fixes the type of each of `attributes` for `tenant` where it is new;
  // "" when every type agrees with the one fixed, else a message naming
  // the first attribute that does not (nothing is fixed then), or the
  // limit search_attribute_names_per_tenant_max.
  std::string claim(std::string_view tenant,
                    const search_attributes& attributes);

  // As claim, from stored runs: never refuses (the store holds it anyway);
  // a name already fixed keeps its type.
  void learn(std::string_view tenant, std::string_view name,
             search_attribute_type type);

  std::optional<search_attribute_type> type_of(std::string_view tenant,
                                               std::string_view name) const;

 private:
  using names = std::map<std::string, search_attribute_type, std::less<>>;
  mutable std::mutex mutex_;
  std::map<std::string, names, std::less<>> tenants_;
};

}  // namespace durin::services
