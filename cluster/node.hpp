// A `durin serve` node in a cluster: its membership (lease, shards,
// routing), its peers (forwarding over CAF) and its API keys and tenants
// kept in step with every other node's (gateway/key_sync.hpp), as the
// gateway's cluster_member. Made by `durin serve --etcd`.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "cluster/membership.hpp"
#include "cluster/peers.hpp"
#include "cluster/replication.hpp"
#include "cluster/shard_move.hpp"
#include "gateway/key_sync.hpp"
#include "gateway/server.hpp"
#include "services/search_types.hpp"

namespace durin::cluster {

struct node_options {
  membership_options members;
  peer_options peers;
  replication_options replication;
  std::string data_dir;  // where a shard's exports for moves go
  // How long join waits for the first exchange of key tables with every
  // live node before it returns anyway (authenticated requests answer 503
  // keys-not-synced until the exchange is done).
  std::chrono::milliseconds keys_wait{10'000};
};

class cluster_node final : public gateway::cluster_member {
 public:
  // Reads the cluster's config from etcd (membership::open's errors).
  static result<std::shared_ptr<cluster_node>> open(node_options options);
  ~cluster_node() override;

  std::uint32_t shards() const override { return members_->config().shards; }
  std::vector<std::shared_ptr<persistence::fence>> fences() const override {
    return members_->fences();
  }
  std::string admin_key() const override {
    return members_->config().admin_key;
  }
  gateway::placement& attach(gateway::api& routes) override;
  // Listens for peers, registers, starts acquiring its shards, and returns
  // once its key table is in step with every live node's (or keys_wait
  // passed).
  status join(const std::string& http_address) override;
  void leave() override;

 private:
  cluster_node(node_options options, std::unique_ptr<membership> members)
      : options_(std::move(options)), members_(std::move(members)) {}

  node_options options_;
  std::unique_ptr<membership> members_;
  gateway::api* routes_ = nullptr;
  std::unique_ptr<peers> peers_;
  std::unique_ptr<shard_mover> mover_;
  std::unique_ptr<replicator> replication_;
  std::unique_ptr<gateway::key_sync> keys_;
  services::search_types* search_types_ = nullptr;  // agreed through etcd
};

}  // namespace durin::cluster
