// The runtime's private half (durin::runtime's pimpl), shared by the files
// that implement it: opening (runtime_open.cpp) and the calls
// (runtime.cpp). It owns the node and, when the runtime made it, the actor
// system; close() stops everything in the order the node's invariants need
// (no actor outlives a service it uses).
#pragma once

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "durin/runtime.hpp"
#include "persistence/store.hpp"
#include "services/node.hpp"
#include "services/start.hpp"

namespace durin {

class runtime_impl {
 public:
  services::node services;
  std::unique_ptr<caf::actor_system_config> own_config;
  std::unique_ptr<caf::actor_system> own_system;
  caf::actor_system* system = nullptr;
  std::atomic<bool> closing{false};
  // Activate a shard's runs again after its store reopened (see open()).
  std::vector<std::thread> reactivators;
  // In a cluster: shard i's fence (persistence/fence.hpp); empty otherwise.
  std::vector<std::shared_ptr<persistence::fence>> fences;

  ~runtime_impl() { close(); }

  void close() {
    if (closing.exchange(true)) {
      return;
    }
    services.closing = true;
    if (services.schedules) {
      services.schedules->stop();
    }
    for (auto& shard : services.shards) {
      // Waits for a listener call that may be running.
      shard->store->set_health_listener(nullptr);
    }
    for (auto& thread : reactivators) {
      if (thread.joinable()) {
        thread.join();
      }
    }
    for (auto& shard : services.shards) {
      shard->timers->stop();
    }
    if (services.tasks) {
      services.tasks->stop();
    }
    if (services.lingering) {
      services.lingering->stop();
    }
    for (auto& shard : services.shards) {
      shard->runs->close();
      shard->tokens->close();
    }
    if (services.relay) {
      services.relay->stop();
    }
    if (services.executor) {
      services.executor->stop();
    }
    for (auto& shard : services.shards) {
      shard->committer->stop();
    }
    services.events.clear();
    own_system.reset();
  }

  // A child run (not abandoned) whose parent has ended, or may have: one
  // on another node is asked as the child activates (end_if_orphaned).
  bool orphaned(const persistence::run_record& record) const {
    if (record.parent_run_id.empty() || record.parent_close == 3) {
      return false;
    }
    if (services.remote_for(record.parent_run_id) != nullptr) {
      return true;
    }
    auto parent = services.shard_of_run(record.parent_run_id)
                      .store->get_run(record.parent_run_id);
    return parent && (!*parent || is_terminal((*parent)->status));
  }

  status recover(services::shard& shard) {
    auto active = shard.store->active_runs();
    if (!active) {
      return active.error();
    }
    // Before any run of the shard acts again: an upsert or a start must
    // meet the types its stored runs fixed.
    auto types = shard.store->search_attribute_types();
    if (!types) {
      return types.error();
    }
    for (const auto& entry : *types) {
      services.search.learn(entry.tenant, entry.name, entry.type);
    }
    for (auto& run_id : *active) {
      auto record = shard.store->get_run(run_id);
      // A run waiting on a timer is activated by the timer; the others
      // (and any whose record is unreadable, to report it) start now.
      // A waiting child whose parent ended is started too: it ends itself
      // (parent_close), also when no timer or payload would wake it.
      if (record && *record && (*record)->status == run_status::waiting &&
          !orphaned(**record)) {
        continue;
      }
      shard.runs->activate(run_id);
    }
    return {};
  }

  // Opens every shard's store and makes its committer, timers and
  // directories (runtime_open.cpp).
  status open_shards(caf::actor_system& system,
                     const persistence::store_options& store_options);

  result<run_info> get(std::string_view run_id, std::string_view tenant) const {
    return services::get_run(services, run_id, tenant);
  }
};

}  // namespace durin
