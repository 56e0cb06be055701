// The directory maps run ids to the actors running them. Runs are virtual
// actors: a message for a run without an actor spawns one, which activates
// from storage before it reads the message. A run idle on a far timer leaves
// the directory (passivates) only when its mailbox is empty, checked under
// the same lock every sender takes, so no message is ever lost to a stopping
// actor.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <array>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/send.hpp>

#include "actors/messages.hpp"

namespace durin::services {

using actors::fresh_run;

class directory {
 public:
  // Spawns the actor of a run; it must expect activate_atom first.
  using spawn_function = std::function<caf::actor(const std::string& run_id)>;

  explicit directory(spawn_function spawn);

  // Sends (xs...) to the run's actor, spawning and activating it from
  // storage when it has none. False once the directory is closing.
  template <class... Ts>
  bool deliver(const std::string& run_id, Ts&&... xs) {
    auto& shard = shard_of(run_id);
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto handle = find_or_spawn(shard, run_id, nullptr);
    if (!handle) {
      return false;
    }
    caf::anon_send(handle, std::forward<Ts>(xs)...);
    return true;
  }

  // Makes sure the run has an actor (which activates from storage).
  bool activate(const std::string& run_id);

  // Spawns the actor of a run admitted just now, without reading storage.
  bool activate_fresh(fresh_run run);

  // Removes the run's actor if `idle()` holds under the lock (its mailbox is
  // empty). The actor must quit when this returns true.
  bool try_passivate(const std::string& run_id, const caf::actor_addr& actor,
                     const std::function<bool()>& idle);

  // The run's actor ended (finished, or failed to activate).
  void remove(const std::string& run_id, const caf::actor_addr& actor);

  // Blocked runs, as reported by their actors, for runtime::get.
  void set_blocked(const std::string& run_id, std::string reason);
  void clear_blocked(const std::string& run_id);
  std::optional<std::string> blocked(const std::string& run_id) const;

  std::size_t active() const;

  // Refuses new spawns, stops every run actor and waits until all are gone.
  void close();

 private:
  struct shard {
    std::mutex mutex;
    std::unordered_map<std::string, caf::actor> actors;
  };
  static constexpr std::size_t shard_count = 32;

  shard& shard_of(const std::string& run_id);
  // REQUIRES: shard.mutex held.
  caf::actor find_or_spawn(shard& target, const std::string& run_id,
                           const fresh_run* fresh);
  void actor_gone();

  spawn_function spawn_;
  std::array<shard, shard_count> shards_;
  mutable std::mutex blocked_mutex_;
  std::unordered_map<std::string, std::string> blocked_;
  std::mutex live_mutex_;
  std::condition_variable live_changed_;
  std::size_t live_ = 0;  // spawned actors that have not terminated
  bool closing_ = false;  // guarded by live_mutex_
};

}  // namespace durin::services
