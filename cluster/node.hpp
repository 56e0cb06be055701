// A `durin serve` node in a cluster: its membership (lease, shards,
// routing) and its peers (forwarding over CAF), as the gateway's
// cluster_member. Made by `durin serve --etcd`.
#pragma once

#include <memory>
#include <string>

#include "cluster/membership.hpp"
#include "cluster/peers.hpp"
#include "cluster/shard_move.hpp"
#include "gateway/server.hpp"

namespace durin::cluster {

struct node_options {
  membership_options members;
  peer_options peers;
  std::string data_dir;  // where a shard's exports for moves go
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
  status join(const std::string& http_address) override;
  void leave() override;

 private:
  cluster_node(node_options options, std::unique_ptr<membership> members)
      : options_(std::move(options)), members_(std::move(members)) {}

  node_options options_;
  std::unique_ptr<membership> members_;
  std::unique_ptr<peers> peers_;
  std::unique_ptr<shard_mover> mover_;
};

}  // namespace durin::cluster
