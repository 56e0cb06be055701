#include "cluster/node.hpp"

#include <cstdio>

#include "cluster/copy_marks.hpp"
#include "cluster/search_agreement.hpp"
#include "services/node.hpp"
#include "services/runtime_access.hpp"

namespace durin::cluster {

result<std::shared_ptr<cluster_node>> cluster_node::open(node_options options) {
  if (options.members.data_identity.empty() && !options.data_dir.empty()) {
    auto identity = data_dir_identity(options.data_dir);
    if (!identity) {
      return identity.error();
    }
    options.members.data_identity = std::move(*identity);
  }
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
  routes_ = &routes;
  peers_ = std::make_unique<peers>(*members_, routes, options_.peers);
  auto& node = runtime_access::services(routes.node());
  mover_ = std::make_unique<shard_mover>(
      *members_,
      [&node](std::uint32_t shard) -> persistence::store* {
        return shard < node.shards.size() ? node.shards[shard]->store.get()
                                          : nullptr;
      },
      options_.data_dir, peers_->system());
  peers_->set_mover(mover_.get());
  if (members_->config().replicas > 1) {
    replication_ = std::make_unique<replicator>(
        *members_,
        [&node](std::uint32_t shard) -> persistence::store* {
          return shard < node.shards.size() ? node.shards[shard]->store.get()
                                            : nullptr;
        },
        *mover_, peers_->system(), options_.replication);
    for (std::uint32_t shard = 0; shard < members_->config().shards; ++shard) {
      members_->fences()[shard]->set_replication(replication_->shipping(shard));
    }
    peers_->set_replicator(replication_.get());
  }
  members_->set_copy_dirs([&node](std::uint32_t shard) {
    return shard < node.shards.size() ? node.shards[shard]->store->dir()
                                      : std::string();
  });
  members_->on_move([this](std::uint32_t shard, const shard_config& config) {
    mover_->observe(shard, config);
  });
  // make() does no I/O and the endpoints were checked by membership::open.
  if (auto agree = search_agreement(options_.members.etcd,
                                    layout(options_.members.cluster))) {
    node.search.set_agreement(std::move(*agree));
  }
  search_types_ = &node.search;
  return *peers_;
}

status cluster_node::join(const std::string& http_address) {
  auto listening = peers_->listen();
  if (!listening) {
    return listening.error();
  }
  members_->set_addresses(http_address, *listening);
  if (auto started = members_->start(); !started) {
    return started.error();
  }
  if (replication_) {
    replication_->start();
  }
  // Shards may be acquired meanwhile: a forwarded request was
  // authenticated by its sender. Only this node's own callers wait.
  keys_ = std::make_unique<gateway::key_sync>(*routes_, *peers_);
  if (!keys_->wait_in_step(options_.keys_wait)) {
    std::fprintf(stderr,
                 "durin: node %s serves before its API keys are in step with "
                 "every live node; authenticated requests answer 503 "
                 "keys-not-synced until they are\n",
                 options_.members.node_id.c_str());
  }
  return {};
}

void cluster_node::leave() {
  // No more exchanges of key tables first (they use the peers and the
  // routing). Then the lease goes (no more moves are observed, and its
  // shards are free for this node's restart at once), then copies in
  // progress end, then the peers (the mover's actor with them), then the
  // mover.
  if (keys_) {
    keys_->stop();
  }
  if (search_types_ != nullptr) {
    search_types_->set_agreement(nullptr);
    // The destructor leaves again, after `durin serve` destroyed the
    // runtime these belong to: the second call must not touch them.
    search_types_ = nullptr;
  }
  if (members_) {
    members_->stop();
  }
  if (replication_) {
    replication_->stop();  // its waiting writes answered, its actors gone
  }
  if (mover_) {
    mover_->stop();
  }
  if (peers_) {
    peers_->stop();
  }
  replication_.reset();
  mover_.reset();
}

}  // namespace durin::cluster
