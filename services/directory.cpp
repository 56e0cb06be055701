#include "services/directory.hpp"

#include <caf/attachable.hpp>
#include <caf/exit_reason.hpp>

#include "actors/run_actor.hpp"
#include "actors/token_actor.hpp"

namespace durin::services {

template <class Handle>
directory<Handle>::directory(spawn_function spawn) : spawn_(std::move(spawn)) {}

template <class Handle>
typename directory<Handle>::shard& directory<Handle>::shard_of(
    const std::string& id) {
  return shards_[std::hash<std::string>{}(id) % shard_count];
}

template <class Handle>
Handle directory<Handle>::find_or_spawn(shard& target, const std::string& id,
                                        bool activate_from_storage) {
  auto it = target.actors.find(id);
  if (it != target.actors.end()) {
    return it->second;
  }
  {
    std::lock_guard<std::mutex> lock(live_mutex_);
    if (closing_) {
      return Handle{};
    }
    ++live_;
  }
  auto handle = spawn_(id);
  handle->attach_functor([this] { actor_gone(); });
  if (activate_from_storage) {
    caf::anon_send(handle, actors::activate_atom::value);
  }
  target.actors.emplace(id, handle);
  return handle;
}

template <class Handle>
bool directory<Handle>::activate(const std::string& id) {
  auto& shard = shard_of(id);
  std::lock_guard<std::mutex> lock(shard.mutex);
  return static_cast<bool>(find_or_spawn(shard, id, true));
}

template <class Handle>
bool directory<Handle>::try_passivate(const std::string& id,
                                      const caf::actor_addr& actor,
                                      const std::function<bool()>& idle) {
  auto& shard = shard_of(id);
  std::lock_guard<std::mutex> lock(shard.mutex);
  auto it = shard.actors.find(id);
  if (it == shard.actors.end() || it->second.address() != actor || !idle()) {
    return false;
  }
  shard.actors.erase(it);
  return true;
}

template <class Handle>
void directory<Handle>::remove(const std::string& id,
                               const caf::actor_addr& actor) {
  {
    auto& shard = shard_of(id);
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto it = shard.actors.find(id);
    if (it != shard.actors.end() && it->second.address() == actor) {
      shard.actors.erase(it);
    }
  }
  clear_blocked(id);
}

template <class Handle>
void directory<Handle>::set_blocked(const std::string& id, std::string reason) {
  std::lock_guard<std::mutex> lock(blocked_mutex_);
  blocked_[id] = std::move(reason);
}

template <class Handle>
void directory<Handle>::clear_blocked(const std::string& id) {
  std::lock_guard<std::mutex> lock(blocked_mutex_);
  blocked_.erase(id);
}

template <class Handle>
std::optional<std::string> directory<Handle>::blocked(
    const std::string& id) const {
  std::lock_guard<std::mutex> lock(blocked_mutex_);
  auto it = blocked_.find(id);
  if (it == blocked_.end()) {
    return std::nullopt;
  }
  return it->second;
}

template <class Handle>
std::size_t directory<Handle>::active() const {
  std::size_t total = 0;
  for (auto& shard : shards_) {
    std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(shard.mutex));
    total += shard.actors.size();
  }
  return total;
}

template <class Handle>
void directory<Handle>::actor_gone() {
  std::lock_guard<std::mutex> lock(live_mutex_);
  --live_;
  live_changed_.notify_all();
}

template <class Handle>
void directory<Handle>::close() {
  {
    std::lock_guard<std::mutex> lock(live_mutex_);
    closing_ = true;
  }
  for (auto& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mutex);
    for (auto& [id, handle] : shard.actors) {
      caf::anon_send_exit(handle, caf::exit_reason::user_shutdown);
    }
    shard.actors.clear();
  }
  // Passivated actors may still be finishing; wait for every one.
  std::unique_lock<std::mutex> lock(live_mutex_);
  live_changed_.wait(lock, [this] { return live_ == 0; });
}

template class directory<actors::run_actor>;
template class directory<actors::token_actor>;

}  // namespace durin::services
