// A node's place in a cluster: its lease in etcd, kept alive; the shards
// placed on it, acquired at a new epoch each time and guarded by one fence
// each (persistence/fence.hpp); and a routing table of every shard's owner,
// kept by a watch of the cluster's prefix, so that nothing on the request
// path reads etcd.
//
// The local deadline: a keepalive sent at t that etcd answered keeps the
// node's shards until t + TTL - margin, which ends before etcd can expire
// the lease (etcd counts from when it received the keepalive, after t). A
// node that loses etcd, or is paused past that (SIGSTOP), stops at the
// deadline by the fences alone, before any node could take over; when a
// keepalive of the same lease is answered again its shards resume at the
// same epoch (no other node can have held them: their lease keys were
// never gone); when etcd says the lease is gone it grants a new one and
// acquires its shards again, each at epoch + 1.
//
// Placement changes only by command (`durin cluster move`, `drain`), never
// because nodes come and go; shards not placed yet (a cluster initialised
// without --nodes) are placed by rendezvous hashing over the nodes live
// once a node has been up for a settle period.
//
// Thread-safety: every const method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/etcd.hpp"
#include "cluster/etcd_watch.hpp"
#include "cluster/layout.hpp"
#include "durin/error.hpp"
#include "persistence/fence.hpp"

namespace durin::cluster {

struct membership_options {
  std::string etcd;  // endpoints, comma-separated
  std::string cluster;
  std::string node_id;
  std::string http;  // host:port this node's HTTP API is reached at
  std::string peer;  // host:port of its CAF peer endpoint
  std::int64_t lease_ttl_s = 5;
  // Its data directory's identity (copy_marks.hpp): a node registered
  // under this id with another one is another process, not an earlier
  // run of this one. Empty: none (every earlier registration is ours).
  std::string data_identity;
  // How long before etcd could expire the lease the node stops: covers the
  // keepalive's trip and clock-rate drift. 0: a fifth of the TTL, at least
  // 250 ms.
  std::int64_t margin_ms = 0;
  // Shards not placed yet wait this long after the node's join for the
  // other nodes to register.
  std::int64_t settle_ms = 2000;
};

// Where a shard is served, as the routing table says now.
struct route {
  enum class where : std::uint8_t { here, there, nowhere };
  where at = where::nowhere;
  std::string node;  // the owner's id (there)
  std::string peer;  // its peer endpoint (there)
  std::uint64_t epoch = 0;
};

class membership {
 public:
  // Reads the cluster's config from etcd: invalid-argument naming the
  // cluster when it was never initialised; an unreachable etcd is
  // shutting-down (nothing to join yet).
  static result<std::unique_ptr<membership>> open(membership_options options);
  ~membership();  // stop()

  const cluster_config& config() const { return config_; }
  const membership_options& options() const { return options_; }
  // One fence per shard, for the runtime's stores. Closed until acquired.
  const std::vector<std::shared_ptr<persistence::fence>>& fences() const {
    return fences_;
  }

  // Registers the node and starts keeping its lease, watching the routing
  // and acquiring its shards. Returns once the node is registered (or the
  // first attempt failed: it keeps trying). invalid-argument, and nothing
  // started, when another live process holds the node id with another
  // data directory (its lease still renewed once it should have lapsed).
  status start();
  // Revokes the node's lease (its shard lease keys go with it, so a
  // restart takes them again at once) and closes every fence. Idempotent.
  void stop();

  route locate(std::uint32_t shard) const;
  // One shard of each other node that serves any (to ask every node once).
  std::vector<std::uint32_t> one_shard_per_other_node() const;
  // A shard this node serves now; a shard any node serves.
  bool local_shard(std::uint32_t& shard) const;
  bool any_shard(std::uint32_t& shard) const;
  // Shards no node holds the lease of now.
  std::vector<std::uint32_t> unserved() const;
  // Shards whose config names this node their owner (active, not moving)
  // that it does not serve yet: a node that restarted waits for its old
  // shard leases to expire before it takes them again.
  std::vector<std::uint32_t> awaited() const;
  // This node's lease deadline: milliseconds left (0 when passed).
  std::int64_t lease_left_ms() const;
  // The id of this node's lease in etcd, which its node key is tied to;
  // 0 while it holds none. Another id means a new registration (a restart,
  // a lease etcd let expire).
  std::int64_t lease_id() const {
    return lease_.load(std::memory_order_acquire);
  }
  // Every node the routing table names (its node key, tied to its lease,
  // is in etcd), this one included once the table has seen it register.
  std::vector<node_entry> live_nodes() const;
  std::int64_t ttl_s() const { return options_.lease_ttl_s; }
  // Shards this node holds the lease of now.
  std::size_t shards_served() const;
  // read_status (below) through this node's etcd connection.
  result<nlohmann::json> describe();
  // Told of every shard config in a move (state moving) at each round of
  // the acquirer, on its thread: it must not block. Set before start().
  using move_listener =
      std::function<void(std::uint32_t shard, const shard_config& config)>;
  void on_move(move_listener listener) { move_listener_ = std::move(listener); }
  // Where this node keeps its copy of a shard (its store's directory), for
  // the copy's mark (cluster/copy_marks.hpp). Set before start(); unset, no
  // copy is marked or checked.
  using copy_dir_of = std::function<std::string(std::uint32_t shard)>;
  void set_copy_dirs(copy_dir_of dirs) { copy_dirs_ = std::move(dirs); }
  // Shards whose config names this node their owner that it refuses to
  // take: its copy lost their history (no mark), and no copy in step is
  // live to take them instead.
  std::vector<std::uint32_t> copies_lost() const;
  // The last step of a move to this node, once its copy is in place: the
  // config {epoch, owner: this node, active}, only if it is still
  // `expected` (a move cancelled meanwhile refuses it). True when written.
  bool finish_move(std::uint32_t shard, const shard_config& expected);
  // This node's copy of `shard` may lack a write it shipped at `epoch`
  // (its own fsync failed after its backups had the write): that epoch is
  // never written here again. The fence closes at once and the shard lease
  // key goes, so that an in-sync backup takes the shard, or this node does
  // at epoch + 1, a new tenure whose backups join afresh (a copy with the
  // write this one may lack re-copies). No-op unless held at `epoch`.
  void resign(std::uint32_t shard, std::uint64_t epoch);
  // Shard `shard`'s config as the routing table has it (mod_revision 0:
  // none yet).
  shard_config config_of(std::uint32_t shard) const;
  // The peer endpoint of node `id` as the routing table has it; empty when
  // it is not live.
  std::string peer_of(const std::string& id) const;

  // Where this node is reached, known once its servers listen: set before
  // start().
  void set_addresses(std::string http, std::string peer) {
    options_.http = std::move(http);
    options_.peer = std::move(peer);
  }

 private:
  using clock = std::chrono::steady_clock;
  struct table {
    std::map<std::string, node_entry> nodes;
    std::vector<shard_config> configs;
    std::vector<shard_lease> leases;  // create_revision 0: absent
  };

  membership(membership_options options, cluster_config config,
             etcd_client control, etcd_client keeper);

  void keep_loop();
  void acquire_loop();
  enum class registration : std::uint8_t { done, failed, taken };
  registration register_node();
  // Waits for lease `lease` (another data directory's registration of
  // this node id) to lapse: false when it is renewed instead (a live
  // process holds the id), or the node stops meanwhile.
  bool wait_for_lapse(std::int64_t lease);
  // Reads the whole prefix and (re)starts the watch after it.
  status resync();
  void apply(const kv& now, bool erased);
  void apply_to(table& target, const kv& now, bool erased) const;
  // One pass over every shard, on the table as last seen: each is tended
  // as its owner or as another node (a backup that may promote).
  void acquire_round();
  void tend_owned(std::uint32_t shard, const table& seen, std::int64_t lease);
  void tend_not_owned(std::uint32_t shard, const table& seen,
                      std::int64_t lease);
  void acquire(std::uint32_t shard, const shard_config& config);
  // A backup takes the shard whose primary's lease is gone: one in step,
  // or one the operator named (accept-loss --to); `why` says which, in
  // the log.
  void promote(std::uint32_t shard, const shard_config& config,
               const char* why);
  // Whether a backup other than this node is in the in-sync set at the
  // node lease it is live with (then it, not the owner, takes the shard:
  // the owner's copy may be gone).
  static bool live_backup_in_step(const table& seen, const shard_config& config,
                                  const std::string& except);
  void place_unplaced(const table& seen);
  // Whether this owner's copy may take `shard` (cluster/copy_marks.hpp):
  // it is marked, the shard was never held (epoch 0), or the operator
  // accepted its loss at this epoch. Says so once when it refuses.
  bool copy_holds_history(std::uint32_t shard, const shard_config& config);
  // Marks the copy before a request to etcd that makes this node the
  // shard's owner; false (said) when the mark cannot be written.
  bool mark_before_taking(std::uint32_t shard);
  void hold(std::uint32_t shard, std::uint64_t epoch);
  void release(std::uint32_t shard, const shard_lease& seen);
  // Whether `config` asks this owner to hand its shard over online (a move
  // to a copy, cluster/shard_move.hpp) and the target is in step now.
  bool handing_over(const table& seen, const shard_config& config) const;
  // Whether an online move's target is live and in step (then only it
  // takes the shard once its owner's lease key is gone).
  static bool target_in_step(const table& seen, const shard_config& config);
  // The lease is gone: every shard is let go (fences closed).
  void lose_all();
  void wake();
  clock::time_point deadline() const {
    return clock::time_point(
        clock::duration(deadline_ticks_.load(std::memory_order_acquire)));
  }

  membership_options options_;
  move_listener move_listener_;
  const cluster_config config_;
  const layout keys_;
  etcd_client control_;  // registration, acquisitions, placements
  etcd_client keeper_;   // keepalives only, so that they never queue
  std::vector<std::shared_ptr<persistence::fence>> fences_;
  // The epoch this node holds each shard at (0: none); written by the
  // acquirer and the keeper.
  std::vector<std::atomic<std::uint64_t>> held_;
  // The epoch resign() gave up each shard at (0: none): never granted
  // again, its lease key erased by the acquirer.
  std::vector<std::atomic<std::uint64_t>> resigned_;
  copy_dir_of copy_dirs_;
  // The config epoch at which this node refused each shard (0: none).
  std::vector<std::atomic<std::uint64_t>> lost_;
  // The config epoch at which this backup said its copy of each shard is
  // not in step while no lease held the shard (0: none).
  std::vector<std::atomic<std::uint64_t>> behind_;
  std::atomic<std::int64_t> lease_{0};
  std::atomic<std::int64_t> deadline_ticks_{0};
  clock::time_point joined_{};

  mutable std::shared_mutex table_mutex_;
  table table_;

  std::mutex mutex_;  // guards the flags below and the wait of both loops
  std::condition_variable woken_;
  bool stopping_ = false;
  bool changed_ = false;
  bool resync_needed_ = true;
  std::optional<etcd_watch> watch_;
  std::thread keeper_thread_;
  std::thread acquirer_thread_;
};

// What `durin cluster status` and GET /v1/cluster show, read from etcd:
// {"cluster", "shardCount", "nodes": [{"id", "http", "peer",
// "leaseLeftMs"}], "shards": [{"id", "owner", "epoch", "state",
// "placedOn", "leaseLeftMs"}]} (owner: the node holding the shard's
// lease, null while none does).
result<nlohmann::json> read_status(etcd_client& etcd,
                                   const std::string& cluster);

// `durin cluster init`: writes the config once (a second init of the same
// name is refused with invalid-argument), with every shard's config, placed
// over `nodes` by rendezvous hashing when given (owner and replicas - 1
// backups). `replicas` 0: 2, or 1 when `nodes` names one node. The admin
// key is made here.
result<cluster_config> init_cluster(etcd_client& etcd,
                                    const std::string& cluster,
                                    std::uint32_t shards,
                                    const std::vector<std::string>& nodes,
                                    std::uint32_t replicas = 0);

}  // namespace durin::cluster
