#include "cluster/node.hpp"

namespace durin::cluster {

result<std::shared_ptr<cluster_node>> cluster_node::open(node_options options) {
  auto members = membership::open(options.members);
  if (!members) {
    return members.error();
  }
  return std::shared_ptr<cluster_node>(
      new cluster_node(std::move(options), std::move(*members)));
}

cluster_node::~cluster_node() {
  leave();
}

gateway::placement& cluster_node::attach(gateway::api& routes) {
  peers_ = std::make_unique<peers>(*members_, routes, options_.peers);
  return *peers_;
}

status cluster_node::join(const std::string& http_address) {
  auto listening = peers_->listen();
  if (!listening) {
    return listening.error();
  }
  members_->set_addresses(http_address, *listening);
  members_->start();
  return {};
}

void cluster_node::leave() {
  // Forwards in flight are answered first, then the lease goes (its shards
  // are free for this node's restart at once).
  if (peers_) {
    peers_->stop();
  }
  if (members_) {
    members_->stop();
  }
}

}  // namespace durin::cluster
