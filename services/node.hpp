// The services of one durin node, shared by its run actors, and its shards.
// Owned by the runtime; every member outlives every actor (the runtime
// closes the directories, which wait for all actors, before tearing down
// the rest).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/run_actor.hpp"
#include "actors/token_actor.hpp"
#include "durin/clock.hpp"
#include "durin/registry.hpp"
#include "durin/runtime.hpp"
#include "persistence/committer.hpp"
#include "persistence/store.hpp"
#include "services/directory.hpp"
#include "services/held_tokens.hpp"
#include "services/linger_list.hpp"
#include "services/remote_runs.hpp"
#include "services/reply_relay.hpp"
#include "services/run_events.hpp"
#include "services/schedule_service.hpp"
#include "services/search_types.hpp"
#include "services/shard_map.hpp"
#include "services/step_executor.hpp"
#include "services/task_service.hpp"
#include "services/timer_service.hpp"

namespace durin::services {

struct node;

// One shard of a node: the unit the cluster will move. It owns its store
// (one RocksDB, in the data directory for a node of one shard, else in
// `shards/NNN/`), the committer that writes it, its timers, and the
// directories of the actors of its runs and tokens. Every member outlives
// every actor of the shard.
struct shard {
  node* owner = nullptr;
  std::uint32_t index = 0;
  std::unique_ptr<persistence::store> store;
  std::unique_ptr<persistence::committer> committer;
  std::unique_ptr<timer_service> timers;
  std::unique_ptr<directory<actors::run_actor>> runs;
  // key: keys::token(tenant, token)
  std::unique_ptr<directory<actors::token_actor>> tokens;
};

struct node {
  runtime_options options;
  registry flows;
  std::shared_ptr<durin::clock> clock;
  std::unique_ptr<step_executor> executor;
  // Every step attempt and its lease, for all shards (memory only: a shard
  // that moves re-dispatches its attempts when its runs activate).
  std::unique_ptr<task_service> tasks;
  std::vector<std::unique_ptr<shard>> shards;  // one, unless --shards N
  shard_map map;
  // Answers to callers that are not actors, for all shards (made before
  // the shards' directories, stopped after they closed).
  std::unique_ptr<reply_relay> relay;
  run_events events;  // runs settling and ending, after durability
  std::atomic<bool> closing{false};  // set first when the runtime closes
  held_tokens held;  // written by token actors, read by starts (all shards)
  // Each tenant's search attribute types (all shards): claimed by starts
  // and upserts, read by list queries.
  search_types search;
  std::unique_ptr<linger_list> lingering;  // idle token actors
  // The schedules of the shards this node serves (made last, stopped first).
  std::unique_ptr<schedule_service> schedules;
  // In a cluster, the runs of shards other nodes serve (set by the gateway
  // before it serves; it outlives the shards' actors). Null: every shard is
  // served here.
  std::atomic<remote_runs*> remote{nullptr};

  shard& shard_of_run(std::string_view run_id) {
    return *shards[map.of_run(run_id)];
  }
  const shard& shard_of_run(std::string_view run_id) const {
    return *shards[map.of_run(run_id)];
  }
  // `address` is keys::token(tenant, token).
  shard& shard_of_token(std::string_view address) {
    return *shards[map.of_token(address)];
  }
  const shard& shard_of_token(std::string_view address) const {
    return *shards[map.of_token(address)];
  }
  shard& shard_of_key(const persistence::request_address& key) {
    return *shards[map.of_key(key)];
  }
  directory<actors::run_actor>& runs_of(std::string_view run_id) {
    return *shard_of_run(run_id).runs;
  }
  directory<actors::token_actor>& tokens_of(std::string_view address) {
    return *shard_of_token(address).tokens;
  }
  // The node's storage health: ready while every shard's store takes
  // writes; the first fault found, counters summed.
  persistence::storage_health health() const;
  // Runs stored on the node by status, summed over the shards.
  result<persistence::store::status_counts> runs_by_status() const;
  // Calls `done` once every write already submitted to a replicated shard
  // here is answered, i.e. durable on it and its in-sync backups (at once
  // without replication: there a write is visible only once synced). A
  // read calls it after reading, before it answers: it may have seen a
  // write that landed unsynced and was shipped, and must not tell of it
  // before it is durable. With storage-error when such a write failed.
  void after_replicated_writes(std::function<void(const status&)> done);

  // Node-wide records (API keys, tenants) live in the first shard.
  shard& first() { return *shards.front(); }
  const shard& first() const { return *shards.front(); }

  // "run_" + 10 characters of milliseconds + 14 of randomness + 2 naming
  // `shard` (Crockford base32), so ids sort by creation time and carry their
  // shard. Drawn before a start when its caller subscribes to the run's
  // events first.
  std::string new_run_id(std::uint32_t shard);
  // A plain start's run goes to any shard (spread evenly); in a cluster,
  // any that this node serves.
  std::uint32_t any_shard();
  // In a cluster: this node does not hold the shard's lease now.
  static bool serves_no_more(const shard& one);
  // The port to `run_id`'s node when another node serves its shard (or
  // none does); null when it is served here.
  remote_runs* remote_for(std::string_view run_id) const;
  // The same for a token's actor (`address`: keys::token(tenant, token)),
  // and for a shard.
  remote_runs* remote_for_token(std::string_view address) const;
  remote_runs* remote_for_shard(std::uint32_t shard) const;

 private:
  std::mutex ids_mutex_;
  std::mt19937_64 ids_{std::random_device{}()};
};

}  // namespace durin::services
