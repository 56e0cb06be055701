// What a cluster keeps in etcd, and nothing more: its configuration, one
// key per live node (tied to the node's lease), and per shard a persistent
// config {epoch, owner, state} and a lease key tied to its owner's node
// lease. Never a run, a payload or a request key. Values are JSON.
//
//   /durin/<cluster>/config               {"shards", "hashVersion",
//                                          "replicas", "adminKey"}
//   /durin/<cluster>/nodes/<node>         {"id", "http", "peer", "lease"}
//   /durin/<cluster>/shards/<NNNN>/config {"epoch", "owner", "state",
//                                          "target", "backups",
//                                          "inSync": [{"node", "lease"}]}
//   /durin/<cluster>/shards/<NNNN>/lease  {"node", "epoch"}
//
// The epoch of a shard rises by one with every acquisition of its lease
// (a node's first, its re-acquisition after a lost lease, a move), so two
// tenures never share an epoch, and every write of the shard carries the
// epoch of its tenure (persistence/fence.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "durin/error.hpp"

namespace durin::cluster {

inline constexpr std::uint32_t shards_default = 64;

struct cluster_config {
  std::uint32_t shards = shards_default;
  std::uint32_t hash_version = 1;
  // Copies of each shard: its primary and replicas - 1 backups on other
  // nodes (1 to 3; cluster/replication.hpp).
  std::uint32_t replicas = 1;
  // The admin key of tenant `default`, which every node bootstraps with:
  // it works on every node. etcd is trusted with the cluster's control, and
  // this is part of it.
  std::string admin_key;
};

struct node_entry {
  std::string id;
  std::string http;  // host:port of its HTTP API
  std::string peer;  // host:port of its CAF peer endpoint
  std::int64_t lease = 0;
  // Its data directory's identity (copy_marks.hpp); empty from builds
  // before it.
  std::string data;
};

enum class shard_state : std::uint8_t { active, moving };

// A backup the primary waits for: the node and the lease (its incarnation)
// it was in step at. A node that restarts has another lease, so it is in
// step again only once it caught up (its data may be gone).
struct in_sync_entry {
  std::string node;
  std::int64_t lease = 0;
  bool operator==(const in_sync_entry&) const = default;
};

struct shard_config {
  std::uint64_t epoch = 0;
  std::string owner;  // node id; empty while the shard is not placed
  shard_state state = shard_state::active;
  // While moving: the node the shard goes to (`durin cluster move`). The
  // owner lets the shard go; the target copies it, then becomes its owner.
  std::string target;
  // The nodes that keep a copy beside the owner's, and those of them whose
  // copy has every write the owner acknowledged (cluster/replication.hpp).
  std::vector<std::string> backups;
  std::vector<in_sync_entry> in_sync;
  // `durin cluster accept-loss`: when this is the config's epoch and no
  // lease holds the shard, `accept_loss_by` (the owner when empty) may take
  // it at epoch + 1 with whatever its copy holds: the owner although its
  // copy lost the shard's history (cluster/copy_marks.hpp), a backup
  // although its copy is not in step. 0: never.
  std::uint64_t accept_loss_at = 0;
  std::string accept_loss_by;
  std::int64_t mod_revision = 0;  // of the key: the compare of every change

  bool is_backup(std::string_view node) const;
  bool in_step(std::string_view node, std::int64_t lease) const;
  // The node the operator let take the shard with a loss (accept_loss_at),
  // or empty when it did not at this epoch.
  std::string_view loss_accepted_by() const;
};

struct shard_lease {
  std::string node;
  std::uint64_t epoch = 0;
  std::int64_t lease = 0;            // the node lease it is tied to
  std::int64_t create_revision = 0;  // 0: absent
};

class layout {
 public:
  explicit layout(std::string cluster) : prefix_("/durin/" + cluster + "/") {}

  const std::string& prefix() const { return prefix_; }
  std::string config() const { return prefix_ + "config"; }
  std::string nodes() const { return prefix_ + "nodes/"; }
  std::string node(std::string_view id) const {
    return nodes() + std::string(id);
  }
  std::string shards() const { return prefix_ + "shards/"; }
  std::string shard_config(std::uint32_t shard) const;
  std::string shard_lease(std::uint32_t shard) const;
  // The shard a key under shards() names and whether it is its lease key;
  // nullopt for any other key.
  std::optional<std::pair<std::uint32_t, bool>> shard_of_key(
      std::string_view key) const;

 private:
  std::string prefix_;
};

// A cluster name or node id: 1 to 64 of [A-Za-z0-9._-].
bool valid_name(std::string_view name);

std::string encode(const cluster_config& config);
result<cluster_config> decode_config(std::string_view text);
std::string encode(const node_entry& node);
result<node_entry> decode_node(std::string_view text);
std::string encode(const shard_config& shard);
result<shard_config> decode_shard(std::string_view text);
std::string encode(const shard_lease& lease);
result<shard_lease> decode_lease(std::string_view text);
std::string_view to_string(shard_state state);

// Rendezvous (highest random weight) hashing: the node among `nodes` that
// shard `shard` goes to. Stable: removing a node moves only its shards.
std::string rendezvous(std::uint32_t shard,
                       const std::vector<std::string>& nodes);
// The `count` first nodes of `nodes` by the same weights (fewer when there
// are fewer nodes): the owner, then its backups.
std::vector<std::string> rendezvous_ranked(
    std::uint32_t shard, const std::vector<std::string>& nodes,
    std::size_t count);

}  // namespace durin::cluster
