// What nodes send each other over CAF (cluster/peers.hpp): a request
// forwarded to the node that serves its shard (forward_atom), or sent to a
// node itself whatever it serves (call_atom, cluster/peer_calls.hpp), with
// the caller the sending node authenticated, and the answer. Plain data
// with inspect overloads, in a type-id block of its own after the node's
// blocks; the block's ids are the cluster protocol: append, never reorder.
#pragma once

#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/type_id.hpp>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "actors/type_ids.hpp"

namespace durin::cluster {

// A forward (ticket, request) and its answer (ticket, response): plain
// messages, not a request (cluster/detail/overdue.hpp).
using forward_atom = caf::atom_constant<caf::atom("forward")>;
using forwarded_atom = caf::atom_constant<caf::atom("forwarded")>;
using answered_atom = caf::atom_constant<caf::atom("answered")>;
using go_atom = caf::atom_constant<caf::atom("go")>;
using call_atom = caf::atom_constant<caf::atom("call")>;

struct forwarded_request {
  std::uint32_t shard = 0;  // a forward's; unused by a call
  // The epoch the forwarder's routing named: an owner at a lower one is
  // stale and refuses (not-owner).
  std::uint64_t epoch_seen = 0;
  std::string method;
  std::string target;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string tenant;
  std::string key_id;
  std::uint8_t role = 0;
};

struct forwarded_response {
  unsigned status = 200;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

// A shard's exported files (cluster/shard_move.hpp), by name and size.
// `export_name` names the export that chunks are asked of.
struct move_manifest {
  std::string export_name;
  std::vector<std::string> names;
  std::vector<std::uint64_t> sizes;
};

using move_files_atom = caf::atom_constant<caf::atom("mvfiles")>;
using move_chunk_atom = caf::atom_constant<caf::atom("mvchunk")>;
// Replication (cluster/replication.hpp): a primary's write to a backup,
// a backup joining its primary, a checkpoint of the primary's copy.
using replicate_atom = caf::atom_constant<caf::atom("replicate")>;
// A backup's answer to one replicate message (shard, the backup's node as
// the primary named it, the position sent, replica_code, position held).
using replicated_atom = caf::atom_constant<caf::atom("replicated")>;
using join_atom = caf::atom_constant<caf::atom("rjoin")>;
using checkpoint_atom = caf::atom_constant<caf::atom("rckpt")>;
// A node's copies and their log positions (replicator::local_view), as
// JSON text.
using replicas_atom = caf::atom_constant<caf::atom("rreplicas")>;

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, move_manifest& x) {
  return f(caf::meta::type_name("durin::cluster::move_manifest"), x.export_name,
           x.names, x.sizes);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, forwarded_request& x) {
  return f(caf::meta::type_name("durin::cluster::forwarded_request"), x.shard,
           x.epoch_seen, x.method, x.target, x.headers, x.body, x.tenant,
           x.key_id, x.role);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, forwarded_response& x) {
  return f(caf::meta::type_name("durin::cluster::forwarded_response"), x.status,
           x.content_type, x.headers, x.body);
}

}  // namespace durin::cluster

CAF_BEGIN_TYPE_ID_BLOCK(durin_cluster, caf::id_block::durin_node::end)
CAF_ADD_TYPE_ID(durin_cluster, (durin::cluster::forwarded_request))
CAF_ADD_TYPE_ID(durin_cluster, (durin::cluster::forwarded_response))
CAF_ADD_TYPE_ID(durin_cluster, (durin::cluster::move_manifest))
CAF_END_TYPE_ID_BLOCK(durin_cluster)
