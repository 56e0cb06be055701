// Where a request's shard is served, for a node in a cluster (cluster/
// implements it; a node outside a cluster has none and serves every shard
// itself). The api asks it once per request, after the caller is known and
// the body parsed: a shard served here goes on through the pipeline, one
// owned by another node is forwarded there with the caller it was
// authenticated as, one with no live owner is answered 503
// shard-unavailable at once. Nothing here reads etcd: the answers come from
// the node's routing table, kept by a watch. For what every node keeps of
// its own (API keys and tenants, gateway/key_sync.hpp) it also names the
// live nodes and calls every one of them.
//
// Thread-safety: every method may be called from any thread, many at once;
// none blocks but the two that ask other nodes (never from an actor or an
// io thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client/http_message.hpp"
#include "gateway/auth.hpp"
#include "gateway/http_server.hpp"
#include "services/remote_runs.hpp"

namespace durin::gateway {

class placement {
 public:
  virtual ~placement() = default;

  enum class where : std::uint8_t {
    here,     // this node holds the shard's lease now
    there,    // another node does: forward
    nowhere,  // no node does (dead, paused, moving): 503 at once
  };
  virtual where locate(std::uint32_t shard) const = 0;

  // A shard this node serves, for a start that may go anywhere; false when
  // it serves none (the start is forwarded to `any_shard()`'s owner).
  virtual bool local_shard(std::uint32_t& shard) const = 0;
  // A shard some node serves; false when none is.
  virtual bool any_shard(std::uint32_t& shard) const = 0;

  // Sends the request to the owner of `shard`, which answers it as if it
  // had arrived there from `caller`. `reply` is called exactly once, from
  // any thread: the owner's answer, or 503 shard-unavailable when no owner
  // took it after the retries, or 503 naming an indefinite outcome when
  // the owner did not answer in time (a keyed retry is safe).
  virtual void forward(std::uint32_t shard, wire::http_request request,
                       const principal& caller, reply_fn reply) = 0;

  // The same request forwarded to every other node that serves a shard
  // (a list: each answers for the shards it serves), their answers in any
  // order; blocks until all answered or timed out (a timeout is a 503).
  virtual std::vector<wire::http_response> ask_every_other_node(
      const wire::http_request& request, const principal& caller) = 0;

  // Each other node that serves a shard, by its id, with one shard it
  // serves: a forward to that shard reaches that node. What a caller that
  // must not wait asks every node through (a poll, the tasks view).
  struct node_shard {
    std::string node;
    std::uint32_t shard = 0;
  };
  virtual std::vector<node_shard> other_nodes() const = 0;
  // This node's id in the cluster.
  virtual std::string node_id() const = 0;

  // Whether this node's lease is live (its deadline not passed).
  virtual bool live() const = 0;

  // Nodes rather than shards: for what every node keeps of its own (API
  // keys and tenants, gateway/key_sync.cpp).
  //
  // This node's registration: the id of the etcd lease its node key is
  // tied to, 0 while it holds none. Another id means a new registration (a
  // restart, a lease etcd let expire): the node was absent from the other
  // nodes' tables meanwhile and missed what they sent to every node.
  virtual std::int64_t registration() const = 0;
  struct node_ref {
    std::string id;
    std::int64_t registration = 0;
  };
  // Every node the routing table names live (its node key, tied to its
  // lease, is in etcd), this one included once the table has seen it
  // register.
  virtual std::vector<node_ref> live_nodes() const = 0;
  struct node_answer {
    std::string node;
    wire::http_response response;
  };
  // `request` sent at once to every other node the routing table names
  // live, whether or not it serves a shard, and answered there by
  // api::dispatch_forwarded as if from `caller`. Blocks until every one
  // answered or `timeout` passed; a node that did not answer in time (or
  // cannot be reached) answers 503 node-not-answered: the request may or
  // may not have taken effect there. One answer per node asked.
  virtual std::vector<node_answer> ask_every_live_node(
      const wire::http_request& request, const principal& caller,
      std::chrono::milliseconds timeout) = 0;

  // Shards no node serves now (a list names them: its page lacks their
  // runs).
  virtual std::vector<std::uint32_t> unserved() const = 0;
  // Shards the cluster's config gives this node that it does not serve
  // yet (/readyz answers 503 until there are none).
  virtual std::vector<std::uint32_t> awaited() const = 0;
  // Of those, the shards this node refuses to take because its copy lost
  // their history (cluster/copy_marks.hpp).
  virtual std::vector<std::uint32_t> copies_lost() const = 0;

  // Prometheus lines of the node's cluster counters.
  virtual std::string metrics_text() const = 0;

  // GET /v1/cluster: the cluster's nodes and shards, read from etcd.
  virtual wire::http_response describe() = 0;

  // Seconds a client waits before retrying a shard with no owner.
  virtual std::int64_t retry_after_s() const = 0;
};

// 503 shard-unavailable with Retry-After: no node serves `shard` now.
wire::http_response shard_unavailable(std::uint32_t shard,
                                      std::int64_t retry_after_s);

// The answer of a node asked, in a forward, for a shard it does not serve
// (its lease is gone, or it moved): the forwarder re-reads its routing and
// tries again. Never sent to a client.
inline constexpr unsigned not_owner_status = 421;

// POST /v1/internal/hook-mail's headers: the mail's kind, and its actor
// (a token, or a run id) by which it is placed.
inline constexpr std::string_view hook_mail_kind_header = "x-durin-hook-kind";
inline constexpr std::string_view hook_mail_to_header = "x-durin-hook-to";
// The mail those headers name, of `tenant` (its bytes not read), or none
// when they do not name a kind and an actor.
std::optional<services::hook_mail> hook_mail_of(const wire::http_request& http,
                                                std::string tenant);

}  // namespace durin::gateway
