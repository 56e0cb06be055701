#include "services/node.hpp"

#include <algorithm>
#include <vector>

#include "base/status_join.hpp"
#include "persistence/fence.hpp"

namespace durin::services {

persistence::storage_health node::health() const {
  persistence::storage_health out;
  for (const auto& shard : shards) {
    auto one = shard->store->health();
    if (one.fenced) {
      continue;  // another node's shard now (a cluster): no fault here
    }
    if (!one.ready && out.ready) {
      out.ready = false;
      out.fault = shards.size() == 1 ? one.fault
                                     : "shard " + std::to_string(shard->index) +
                                           ": " + one.fault;
    }
    out.faults += one.faults;
    out.reopens += one.reopens;
    out.not_ready_ms = std::max(out.not_ready_ms, one.not_ready_ms);
  }
  return out;
}

result<persistence::store::status_counts> node::runs_by_status() const {
  persistence::store::status_counts total{};
  for (const auto& shard : shards) {
    if (serves_no_more(*shard)) {
      continue;  // counted by the node that serves it
    }
    auto counts = shard->store->runs_by_status();
    if (!counts) {
      return counts.error();
    }
    for (std::size_t i = 0; i < total.size(); ++i) {
      total[i] += (*counts)[i];
    }
  }
  return total;
}

void node::after_replicated_writes(std::function<void(const status&)> done) {
  std::vector<persistence::committer*> replicated;
  for (const auto& shard : shards) {
    const auto& fence = shard->store->guard();
    if (fence && fence->replication() != nullptr && shard->committer) {
      replicated.push_back(shard->committer.get());
    }
  }
  if (replicated.empty()) {
    done({});
    return;
  }
  // The last committer to answer calls `done`, with the first failure.
  auto answered = join_status(replicated.size(), std::move(done));
  for (auto* one : replicated) {
    one->after_submitted(answered);
  }
}

std::uint32_t node::any_shard() {
  if (shards.size() == 1) {
    return 0;
  }
  std::uint64_t drawn = 0;
  {
    std::lock_guard<std::mutex> lock(ids_mutex_);
    drawn = ids_();
  }
  if (!shards.front()->store->guard()) {
    return static_cast<std::uint32_t>(drawn % shards.size());
  }
  // In a cluster: one of the shards this node serves now, from a random
  // start; any when it serves none (the start is refused as unavailable).
  const auto count = shards.size();
  for (std::size_t step = 0; step < count; ++step) {
    const auto index = (drawn + step) % count;
    if (shards[index]->store->guard()->serving()) {
      return static_cast<std::uint32_t>(index);
    }
  }
  return static_cast<std::uint32_t>(drawn % count);
}

bool node::serves_no_more(const shard& one) {
  const auto& fence = one.store->guard();
  return fence && !fence->open();
}

remote_runs* node::remote_for_shard(std::uint32_t shard) const {
  auto* port = remote.load(std::memory_order_acquire);
  return port != nullptr && port->elsewhere(shard) ? port : nullptr;
}

remote_runs* node::remote_for(std::string_view run_id) const {
  return remote_for_shard(map.of_run(run_id));
}

remote_runs* node::remote_for_token(std::string_view address) const {
  return remote_for_shard(map.of_token(address));
}

std::string node::new_run_id(std::uint32_t shard) {
  static constexpr char digits[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
  auto ms = static_cast<std::uint64_t>(clock->now_ms());
  std::uint64_t high;
  std::uint64_t low;
  {
    std::lock_guard<std::mutex> lock(ids_mutex_);
    high = ids_();
    low = ids_();
  }
  std::string id = "run_";
  for (int i = 9; i >= 0; --i) {
    id += digits[(ms >> (i * 5)) & 31];
  }
  for (int i = 0; i < 12; ++i) {
    id += digits[(high >> (i * 5)) & 31];
  }
  for (int i = 0; i < 2; ++i) {
    id += digits[(low >> (i * 5)) & 31];
  }
  return id + shard_map::run_id_suffix(shard);
}

}  // namespace durin::services
