// The services of one durin node, shared by its run actors. Owned by the
// runtime; every member outlives every run actor (the runtime closes the
// directory, which waits for all run actors, before tearing down the rest).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "durin/clock.hpp"
#include "durin/registry.hpp"
#include "durin/runtime.hpp"
#include "persistence/committer.hpp"
#include "persistence/store.hpp"
#include "services/directory.hpp"
#include "services/held_tokens.hpp"
#include "services/linger_list.hpp"
#include "services/step_executor.hpp"
#include "services/task_service.hpp"
#include "services/timer_service.hpp"

namespace durin::services {

// Who is waiting for which run to end. A run actor calls notify() once the
// run's end is durable.
class finish_listeners {
 public:
  using listener = std::function<void(const run_info&)>;

  std::uint64_t add(const std::string& run_id, listener fn);
  void remove(const std::string& run_id, std::uint64_t token);
  void notify(const run_info& info);
  // Tells every listener the node is closing (an info with no status change
  // is not sent: listeners get nothing more and their waits time out).
  void clear();

 private:
  std::mutex mutex_;
  std::uint64_t next_token_ = 1;
  std::unordered_map<std::string,
                     std::vector<std::pair<std::uint64_t, listener>>>
      listeners_;
};

struct node {
  runtime_options options;
  registry flows;
  std::shared_ptr<durin::clock> clock;
  std::unique_ptr<persistence::store> store;
  std::unique_ptr<persistence::committer> committer;
  std::unique_ptr<step_executor> executor;
  std::unique_ptr<task_service> tasks;  // every step attempt and its lease
  std::unique_ptr<timer_service> timers;
  std::unique_ptr<directory> runs;
  std::unique_ptr<directory> tokens;  // key: keys::token(tenant, token)
  finish_listeners finished;
  held_tokens held;  // written by token actors, read by starts
  std::unique_ptr<linger_list> lingering;  // idle token actors
  // Who waits for a run to end or to wait for something: told by the
  // store's run listener once such a status is durable (runtime.cpp installs
  // it with the first wait_settled). The info carries only id and status.
  finish_listeners settled;
};

}  // namespace durin::services
