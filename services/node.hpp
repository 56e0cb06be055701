// The services of one durin node, shared by its run actors. Owned by the
// runtime; every member outlives every run actor (the runtime closes the
// directory, which waits for all run actors, before tearing down the rest).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
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
#include "services/run_events.hpp"
#include "services/step_executor.hpp"
#include "services/task_service.hpp"
#include "services/timer_service.hpp"

namespace durin::services {

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
  run_events events;  // runs settling and ending, after durability
  std::atomic<bool> closing{false};  // set first when the runtime closes
  held_tokens held;                  // written by token actors, read by starts
  std::unique_ptr<linger_list> lingering;  // idle token actors

  // "run_" + 10 characters of milliseconds + 16 of randomness (Crockford
  // base32), so ids sort by creation time. Drawn before a start when its
  // caller subscribes to the run's events first.
  std::string new_run_id();

 private:
  std::mutex ids_mutex_;
  std::mt19937_64 ids_{std::random_device{}()};
};

}  // namespace durin::services
