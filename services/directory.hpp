// The directory maps ids (run ids; token addresses) to the actors running
// them, keeping each actor's typed handle. Its actors are virtual: a message
// for an id without an actor spawns one, which activates from storage before
// it reads the message. An actor leaves the directory (passivates) only when
// its mailbox is empty, checked under the same lock every sender takes, so
// no message is ever lost to a stopping actor.
//
// `Handle` is the actors' typed interface (actors::run_actor,
// actors::token_actor); each must accept activate_atom. Instantiated for
// those two in directory.cpp.
//
// Thread-safety: all methods may be called from any thread; `send` functions
// run under a lock and must only send (never block or call the directory).
#pragma once

#include <array>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include <caf/actor_addr.hpp>
#include <caf/send.hpp>

#include "actors/messages.hpp"

namespace durin::services {

template <class Handle>
class directory {
 public:
  // Spawns the actor of an id; its first message comes from the directory.
  using spawn_function = std::function<Handle(const std::string& id)>;

  explicit directory(spawn_function spawn);

  // Sends (xs...) to the id's actor, spawning and activating it from
  // storage when it has none. False once the directory is closing.
  template <class... Ts>
  bool deliver(const std::string& id, Ts&&... xs) {
    return with_actor(id, [&](const Handle& handle) {
      caf::anon_send(handle, std::forward<Ts>(xs)...);
    });
  }

  // Calls `send(handle)` with the id's actor (spawned and activated from
  // storage when it has none) under the lock that passivation takes, so what
  // `send` sends is never lost: for an actor that sends a request to the id's
  // actor. False (and `send` not called) once the directory is closing.
  template <class Send>
  bool with_actor(const std::string& id, Send&& send) {
    auto& target = shard_of(id);
    std::lock_guard<std::mutex> lock(target.mutex);
    auto handle = find_or_spawn(target, id, true);
    if (!handle) {
      return false;
    }
    send(handle);
    return true;
  }

  // Like with_actor, for an id admitted just now: `send` sends a new actor
  // its first message instead of the activation from storage.
  template <class Send>
  bool with_new_actor(const std::string& id, Send&& send) {
    auto& target = shard_of(id);
    std::lock_guard<std::mutex> lock(target.mutex);
    auto handle = find_or_spawn(target, id, false);
    if (!handle) {
      return false;
    }
    send(handle);
    return true;
  }

  // Makes sure the id has an actor (which activates from storage).
  bool activate(const std::string& id);

  // Removes the id's actor if `idle()` holds under the lock (its mailbox is
  // empty). The actor must quit when this returns true.
  bool try_passivate(const std::string& id, const caf::actor_addr& actor,
                     const std::function<bool()>& idle);

  // The id's actor ended (finished, or failed to activate).
  void remove(const std::string& id, const caf::actor_addr& actor);

  // Blocked runs, as reported by their actors, for runtime::get.
  void set_blocked(const std::string& id, std::string reason);
  void clear_blocked(const std::string& id);
  std::optional<std::string> blocked(const std::string& id) const;

  std::size_t active() const;

  // Refuses new spawns, stops every actor and waits until all are gone.
  void close();

 private:
  struct shard {
    std::mutex mutex;
    std::unordered_map<std::string, Handle> actors;
  };
  static constexpr std::size_t shard_count = 32;

  shard& shard_of(const std::string& id);
  // The id's actor, spawned when it has none (and then sent activate_atom
  // when `activate_from_storage`); null once closing. REQUIRES:
  // target.mutex held.
  Handle find_or_spawn(shard& target, const std::string& id,
                       bool activate_from_storage);
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
