// The cluster-wide agreement of search attribute types
// (services/search_types.hpp): one etcd key per (tenant, name), created by
// the first node to use the name, holding its type. A create-if-absent txn
// decides between nodes that claim one new name at once; the loser reads
// the winner's type in the same txn. Asked only for a name its node does
// not know yet, so etcd sees one round trip per (tenant, name, node).
//
// Keys: <prefix>search-types/<tenant length>:<tenant>/<name>, so that no
// tenant's names can be read as another tenant's. Values: the type's wire
// name ("keyword", "int", ...). Never deleted: a name's type is fixed for
// the cluster's life, as a stored run's attributes keep theirs.
#pragma once

#include <memory>
#include <string>

#include "cluster/layout.hpp"
#include "services/search_types.hpp"

namespace durin::cluster {

// An agreement over its own etcd connection (the calls block; they are
// kept apart from membership's keepalives). Errors are unavailable, naming
// etcd's answer.
result<services::search_types::agreement> search_agreement(
    const std::string& endpoints, const layout& keys,
    std::int64_t timeout_ms = 2000);

}  // namespace durin::cluster
