// Replicated shards: each shard's primary (its owner) ships every group
// write to the shard's backups over CAF, and answers the write's callers
// only once every backup of the in-sync set in etcd wrote it durably at
// the same epoch and log position (PacificA's primary/backup scheme; etcd
// is the configuration manager and the only consensus).
//
//   ship     the committer's write (epoch e, position p) landed on the
//            primary; it goes to every backup that follows, pipelined (at
//            most `window` writes in flight per shard, which holds the
//            committer back); a backup applies it only at its view of
//            the shard's epoch and as its next position.
//   drop     a backup of the in-sync set that does not answer within
//            `timeout`, or whose connection closes, is taken out of it
//            by a compare-and-swap on the shard's config, and the primary
//            goes on without it; a failed swap means the config moved on
//            (a promotion): the waiting writes are answered indefinite.
//   join     a backup that is not in step (after a restart, a drop, a new
//            epoch) tells the primary the epoch and position of its last
//            write; the primary streams what follows from its in-memory
//            log when that log holds the very same write, otherwise the
//            backup re-copies a checkpoint (it is behind the log, or holds
//            a tail the primary never had: divergent) and joins again.
//            Once caught up it is added to the in-sync set, by a
//            compare-and-swap, and waited for from before the swap.
//   promote  when the primary's shard lease is gone, a backup of the
//            in-sync set (at the node lease it is listed with) takes the
//            shard at epoch + 1 by a compare-and-swap on the config
//            (cluster/membership.cpp); a swap by the primary (a drop) and
//            a promotion compare the same revision, so one side wins.
//
// Why a stale primary is never answered: it answers only after every
// in-sync backup acknowledged at its epoch; a backup that promoted refuses
// that epoch; and a promotion needs the backup in the in-sync set, which
// the primary can only leave by a swap that the promotion would have
// failed. A primary paused past its lease also stops at its deadline
// (persistence/fence.hpp).
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cluster/membership.hpp"
#include "durin/error.hpp"
#include "persistence/replication.hpp"
#include "persistence/store.hpp"

namespace caf {
class actor;
class actor_system;
}  // namespace caf

namespace durin::cluster {

class shard_mover;

struct replication_options {
  // A backup of the in-sync set that has not answered a write this long
  // is dropped from it. Default 2 s.
  std::chrono::milliseconds timeout{2000};
  // Group writes of one shard shipped and not yet answered, at most.
  std::size_t window = 64;
  // The in-memory log a primary (and a backup, for after its promotion)
  // keeps of recent writes per shard, for backups that catch up. A
  // backup further behind re-copies a checkpoint. Default 16 MiB.
  std::size_t log_bytes_max = 16u << 20;
};

// What a backup answers a shipped write, or the primary a join.
enum class replica_code : std::uint64_t {
  ok = 0,
  retry = 1,   // not yet: the backup's view of the epoch is behind
  stale = 2,   // the epoch is older than the backup's: a newer primary
  gap = 3,     // not the next position; the answer names the backup's
  recopy = 4,  // (join) the primary's log cannot bring it up to date
  not_primary = 5,
};

class replicator {
 public:
  using store_of = std::function<persistence::store*(std::uint32_t shard)>;

  // REQUIRES: everything outlives the replicator.
  replicator(membership& members, store_of stores, shard_mover& mover,
             caf::actor_system& system, replication_options options);
  ~replicator();  // stop()

  // The committer's side of shard `shard`, set on its fence.
  std::shared_ptr<persistence::replication> shipping(std::uint32_t shard);
  // Starts following the routing table (joins, re-copies, unfollows).
  void start();
  // Ends the control thread and the copies; answers every waiting write
  // shutting-down. Before the actor system goes.
  void stop();

  // For the router (cluster/peers.cpp): the actors that take what peers
  // send. Null handles once stopped.
  caf::actor primary() const;
  caf::actor applier(std::uint32_t shard);

  // This node's copies: {"shard", "role": "primary" | "backup", "epoch",
  // "position", "following"} for every shard it serves or keeps.
  nlohmann::json local_view() const;

  struct counters {
    std::uint64_t shipped = 0;   // writes sent to backups (one per backup)
    std::uint64_t applied = 0;   // writes applied here as a backup
    std::uint64_t synced = 0;    // fsyncs that made applied writes durable
    std::uint64_t answered = 0;  // answers `ok` sent as a backup (cumulative)
    std::uint64_t dropped = 0;   // backups dropped from an in-sync set
    std::uint64_t added = 0;     // backups added to an in-sync set
    std::uint64_t recopies = 0;  // checkpoints copied here
  };
  counters statistics() const;
  // Appends the latency histograms to a /metrics text: the round trip of
  // a replicated write, and a backup's fsyncs.
  void render_latencies(std::string& out) const;

  struct impl;  // cluster/replication.cpp only

 private:
  // Shared with the shards' fences, which may outlive the replicator
  // (a write after stop() is answered shutting-down).
  std::shared_ptr<impl> impl_;
};

}  // namespace durin::cluster
