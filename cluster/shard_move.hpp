// Moves of a shard between nodes (`durin cluster move SHARD --to NODE`,
// `durin cluster drain NODE`).
//
// With replication (--replicas 2 or 3) and a live owner a move is online:
// the operator sets `target: B` on the active config, adding B to the
// copies if it is none; B follows and catches up like any backup (cluster/
// replication.hpp); once B is in the in-sync set the owner hands over (its
// fence closes at its epoch, its lease key goes, cluster/membership.cpp)
// and B, the only copy allowed to, takes the shard at epoch + 1. The old
// owner stays a backup, unless B was added beyond the cluster's replicas:
// then its copy is dropped. The shard is unavailable only between the
// hand-over and B's promotion (writes in flight there are indefinite: a
// keyed retry answers them).
//
// Without replication, or with its owner gone, a move is offline, a config
// change in etcd and a copy:
//
//   1. the operator sets the shard's config {epoch, owner: A, state:
//      moving, target: B} (a CAS on its revision);
//   2. A sees it and lets the shard go: its fence closes (requests for the
//      shard answer 503 from then on) and its lease key goes;
//   3. B sees it and asks A, over CAF, for the shard's files: A closes the
//      shard's database and exports its files (SSTs hard-linked, the rest
//      copied: a closed database's files are a consistent copy); B pulls
//      them in chunks into a directory beside the shard's, syncs them, and
//      swaps them in for its own (closed, fenced) copy;
//   4. B sets the config {owner: B, active} only if it is still the one it
//      copied for (a move cancelled meanwhile, by moving the shard back to
//      A, refuses it), then acquires the shard as any owner does, at epoch
//      + 1.
//
// An offline move whose owner is not live waits for it (the data is only
// there). Moving a moving shard back to its owner cancels either kind.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cluster/etcd.hpp"
#include "cluster/layout.hpp"
#include "cluster/membership.hpp"
#include "cluster/peer_messages.hpp"
#include "durin/error.hpp"
#include "persistence/store.hpp"

namespace caf {
class actor_system;
}  // namespace caf

namespace durin::cluster {

// Both sides of a move on one node.
class shard_mover {
 public:
  using store_of = std::function<persistence::store*(std::uint32_t shard)>;

  // REQUIRES: everything outlives the mover. `data_dir` holds the exports
  // (moves/NNNN-eE).
  shard_mover(membership& members, store_of stores, std::string data_dir,
              caf::actor_system& system);
  ~shard_mover();  // stop()
  // Waits for a copy in progress to end; observes nothing more.
  void stop();

  // From the acquirer (membership::on_move): starts this node's copy when
  // it is the move's target. Never blocks.
  void observe(std::uint32_t shard, const shard_config& config);

  // The owner's side, asked by the target: the shard's files, exported
  // once per epoch; refused while this node still serves the shard.
  result<move_manifest> manifest(std::uint32_t shard, std::uint64_t epoch);
  // A primary's side of a backup's re-copy (cluster/replication.hpp): a
  // checkpoint of the shard's open copy, a new one each time (the last
  // one of the shard is removed).
  result<move_manifest> checkpoint(std::uint32_t shard);
  // `length` bytes of a file of export `export_name` from `offset` (fewer
  // at its end).
  result<std::string> chunk(const std::string& export_name,
                            const std::string& name, std::uint64_t offset,
                            std::uint64_t length);
  // A backup's side: pulls a checkpoint of `shard` from the primary at
  // `peer` into `into`, a new directory, synced.
  status pull_checkpoint(std::uint32_t shard, const std::string& peer,
                         const std::string& into);

 private:
  void copy(std::uint32_t shard, shard_config config);
  // Asks `peer` for a manifest with `ask`, then pulls its files into
  // `into`.
  template <class... Ts>
  status fetch(const std::string& peer, const std::string& into, Ts&&... ask);
  std::string export_dir(const std::string& export_name) const;
  result<move_manifest> list_export(const std::string& export_name);

  membership& members_;
  store_of stores_;
  std::string data_dir_;
  caf::actor_system& system_;
  std::mutex mutex_;
  std::set<std::uint32_t> copying_;  // shards with a copy job running
  std::map<std::uint32_t, std::chrono::steady_clock::time_point> not_before_;
  std::set<std::string> exported_;  // export names made by this process
  std::map<std::uint32_t, std::string> checkpoints_;  // the last, by shard
  std::uint64_t next_checkpoint_ = 0;
  std::vector<std::thread> jobs_;
  bool stopping_ = false;
};

// The operator's side (the CLI). Sets the move in etcd: invalid-argument
// naming the problem (no such shard or node, a node not live, a move of
// the shard to another node in progress); moving a moving shard back to its
// owner cancels the move. Answers the config written.
result<shard_config> request_move(etcd_client& etcd, const std::string& cluster,
                                  std::uint32_t shard, const std::string& to);
// `durin cluster accept-loss SHARD [--to NODE]`: a shard no node serves
// may be taken at the config's epoch + 1 (a config written with
// acceptLossAt, and acceptLossBy when `by` is a backup) with what one copy
// holds: by its owner (`by` empty), which refuses to take it because its
// copy lost the shard's history (cluster/copy_marks.hpp), or by a live
// backup `by` whose copy is not in step (it lacks the writes after it
// left the in-sync set). invalid-argument when the shard is served now
// (nothing is lost), was never served, is moving, or `by` keeps no copy
// or is not live. Answers the config written.
result<shard_config> accept_loss(etcd_client& etcd, const std::string& cluster,
                                 std::uint32_t shard,
                                 const std::string& by = {});
// Until the shard is active on `to` with its lease held there; the epoch it
// serves at, or timeout.
result<std::uint64_t> wait_for_move(etcd_client& etcd,
                                    const std::string& cluster,
                                    std::uint32_t shard, const std::string& to,
                                    std::chrono::milliseconds limit);
// The shards placed on `node`, each with the live node (other than it) it
// goes to: a copy in step if it has one, else one by rendezvous hashing.
// `node` stays a backup of the shards it hands over (a rolling restart
// brings it back as one).
result<std::vector<std::pair<std::uint32_t, std::string>>> drain_plan(
    etcd_client& etcd, const std::string& cluster, const std::string& node);

// `durin cluster drain NODE --remove`, once `node` owns no shard: the
// shards it keeps a backup copy of, each with the live node (one without a
// copy of it, by rendezvous hashing) to keep that copy instead;
// invalid-argument when a shard has no such node.
result<std::vector<std::pair<std::uint32_t, std::string>>> copies_plan(
    etcd_client& etcd, const std::string& cluster, const std::string& node);
// Moves `node`'s backup copy of `shard` to `to` online: `to` is added to
// the copies, catches up like any backup, and only once it is in step is
// `node` taken out of the copies and the in-sync set (so the shard never
// has fewer copies in step than before). timeout when `to` does not catch
// up within `limit` (`node` keeps its copy).
status replace_copy(etcd_client& etcd, const std::string& cluster,
                    std::uint32_t shard, const std::string& node,
                    const std::string& to, std::chrono::milliseconds limit);

}  // namespace durin::cluster
