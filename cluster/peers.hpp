// Node-to-node requests over CAF's middleman: every node publishes one
// router actor on its peer endpoint, and forwards a request for a shard it
// does not serve to the router of the shard's owner (gateway/placement.hpp
// is the seam the api sees), or calls every live node at once
// (cluster/peer_calls.hpp). Forwards are pipelined: each is one CAF
// request with a deadline, any number in flight per peer; the owner
// answers a shard it no longer serves 421 not-owner, and the forwarder
// looks again at its routing (kept by the watch) and tries at most twice
// more. A forward that gets no answer in time is an indefinite outcome
// (503 forward-timeout: a keyed retry is safe).
//
// The peers run in an actor system of their own, with the middleman
// loaded, heartbeats on (a frozen peer is dropped after the connection
// timeout) and the application id "durin-<cluster>", so that nodes of
// another cluster, or another program, are refused. The runtime's actors
// stay node-local.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cluster/membership.hpp"
#include "durin/error.hpp"
#include "gateway/api.hpp"
#include "gateway/placement.hpp"

namespace caf {
class actor_system;
}  // namespace caf

namespace durin::cluster {

class shard_mover;
class replicator;

struct peer_options {
  std::string listen = "127.0.0.1:0";  // host:port of the router
  // host:port the other nodes reach the router at, registered in etcd,
  // when that is not the address bound (a proxy or a NAT between the
  // nodes). Empty (the default): listen's host and the port bound.
  std::string advertise;
  // A forward's deadline: above the api's longest wait (a waited start
  // answers within 25 s), so that only a lost owner times out.
  std::chrono::milliseconds forward_timeout{30'000};
  std::chrono::milliseconds not_owner_pause{50};  // before a retry
  std::size_t workers = 4;  // threads for forwarded jobs that may block
};

class peers final : public gateway::placement {
 public:
  // REQUIRES: `members` and `routes` outlive the peers.
  peers(membership& members, gateway::api& routes, peer_options options);
  ~peers() override;  // stop()

  // The owner's side of shard moves, answered by the router (set before
  // listen()).
  void set_mover(shard_mover* mover);
  // The replication of this node's shards, answered by the router (set
  // before listen(); null: none).
  void set_replicator(replicator* replication);
  caf::actor_system& system();

  // Publishes the router: the host:port the other nodes reach it at
  // (`advertise`, else the one it listens on), or the error.
  result<std::string> listen();
  // Unpublishes, answers what is in flight, stops the actor system.
  void stop();

  where locate(std::uint32_t shard) const override;
  bool local_shard(std::uint32_t& shard) const override;
  bool any_shard(std::uint32_t& shard) const override;
  void forward(std::uint32_t shard, wire::http_request request,
               const gateway::principal& caller,
               gateway::reply_fn reply) override;
  std::vector<wire::http_response> ask_every_other_node(
      const wire::http_request& request,
      const gateway::principal& caller) override;
  std::vector<node_shard> other_nodes() const override;
  std::string node_id() const override;
  std::vector<node_answer> ask_every_live_node(
      const wire::http_request& request, const gateway::principal& caller,
      std::chrono::milliseconds timeout) override;
  std::int64_t registration() const override;
  std::vector<node_ref> live_nodes() const override;
  bool live() const override;
  std::vector<std::uint32_t> unserved() const override;
  std::vector<std::uint32_t> awaited() const override;
  std::vector<std::uint32_t> copies_lost() const override;
  std::string metrics_text() const override;
  wire::http_response describe() override;
  std::int64_t retry_after_s() const override;

  struct counters {
    std::uint64_t forwarded = 0;    // requests sent to another node
    std::uint64_t served = 0;       // forwarded requests answered here
    std::uint64_t not_owner = 0;    // 421s received, each retried
    std::uint64_t timed_out = 0;    // forwards with no answer in time
    std::uint64_t unavailable = 0;  // shards with no owner, answered 503
  };
  counters statistics() const;

  struct impl;  // cluster/peers.cpp only

 private:
  // GET /v1/cluster's "replicas" of every shard: each copy's node, role,
  // epoch, log position and lag behind its primary.
  void add_replicas(nlohmann::json& view);

  std::unique_ptr<impl> impl_;
};

}  // namespace durin::cluster
