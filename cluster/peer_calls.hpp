// Requests sent to named nodes rather than to a shard's owner (gateway/
// placement.hpp, ask_every_live_node): one forwarded_request to the router
// of every node named, all at once, over CAF's middleman (its connections
// are shared with the forwards: one per peer). The router answers a call
// through api::dispatch_forwarded whatever shards it serves. Every answer
// is in by one deadline: a node that cannot be reached, or does not answer
// in time, answers 503 node-not-answered (the request may or may not have
// taken effect there).
//
// Thread-safety: call from any thread but an actor of `system`; blocks
// until every node answered or the deadline passed.
#pragma once

#include <caf/actor_system.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "cluster/peer_messages.hpp"
#include "gateway/placement.hpp"

namespace durin::cluster {

struct call_target {
  std::string node;  // its id, named in its answer
  std::string peer;  // host:port of its router
};

// One answer per target, in the targets' order.
std::vector<gateway::placement::node_answer> call_nodes(
    caf::actor_system& system, const std::vector<call_target>& targets,
    const forwarded_request& message, std::chrono::milliseconds timeout);

// The answer of a node that did not answer a call in time.
wire::http_response node_not_answered(const std::string& node,
                                      std::string_view why);

}  // namespace durin::cluster
