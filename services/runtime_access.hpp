// Ways into a runtime that embedders do not get: its node's services (the
// gateway, the cluster and tests use its shards, task service, schedules and
// run-event hub), and opening one whose store is opened with chosen options
// (tests inject storage faults through a fault-injecting file system and
// shorten the reopen backoff). Internal; not installed.
#pragma once

#include <memory>
#include <vector>

#include "durin/runtime.hpp"
#include "persistence/store.hpp"

namespace durin {

namespace services {
struct node;
}  // namespace services

class runtime_access {
 public:
  // The node behind `rt`, alive as long as `rt` is.
  static services::node& services(runtime& rt);

  // runtime::open, with the store opened with `store`; in a cluster, shard
  // i guarded by `fences[i]` (one per shard, or none).
  static result<std::unique_ptr<runtime>> open(
      runtime_options options, registry flows, persistence::store_options store,
      std::vector<std::shared_ptr<persistence::fence>> fences = {});
  static result<std::unique_ptr<runtime>> open(
      runtime_options options, registry flows, caf::actor_system& system,
      persistence::store_options store,
      std::vector<std::shared_ptr<persistence::fence>> fences = {});
};

}  // namespace durin
