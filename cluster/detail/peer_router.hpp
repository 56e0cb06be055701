// The router actor of another node (cluster/peers.hpp), reached through
// CAF's middleman, which keeps one connection per node and reuses it. For
// blocking callers only (a scoped_actor's request, a control thread): never
// from an actor's handler, where remote_actor would block a worker.
#pragma once

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <string>

#include "cluster/detail/peer_wire.hpp"
#include "durin/error.hpp"

namespace durin::cluster::detail {

// invalid-argument for a malformed "host:port", shutting-down when the node
// cannot be reached (the caller's retry finds it once it is back).
inline result<caf::actor> peer_router(caf::actor_system& system,
                                      const std::string& peer) {
  std::string host;
  std::uint16_t port = 0;
  if (!split_address(peer, host, port)) {
    return make_error(errc::invalid_argument,
                      "a malformed peer endpoint '" + peer + "'");
  }
  auto router = system.middleman().remote_actor(host, port);
  if (!router) {
    return make_error(errc::shutting_down, "cannot reach the node at " + peer +
                                               ": " +
                                               system.render(router.error()));
  }
  return std::move(*router);
}

}  // namespace durin::cluster::detail
