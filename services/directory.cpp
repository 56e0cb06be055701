#include "services/directory.hpp"

#include <caf/attachable.hpp>
#include <caf/exit_reason.hpp>

namespace durin::services {

directory::directory(spawn_function spawn) : spawn_(std::move(spawn)) {}

directory::shard& directory::shard_of(const std::string& run_id) {
  return shards_[std::hash<std::string>{}(run_id) % shard_count];
}

caf::actor directory::find_or_spawn(shard& target, const std::string& run_id,
                                    const fresh_run* fresh) {
  auto it = target.actors.find(run_id);
  if (it != target.actors.end()) {
    return it->second;
  }
  {
    std::lock_guard<std::mutex> lock(live_mutex_);
    if (closing_) {
      return caf::actor{};
    }
    ++live_;
  }
  auto handle = spawn_(run_id);
  handle->attach_functor([this] { actor_gone(); });
  if (fresh != nullptr) {
    caf::anon_send(handle, actors::activate_atom::value, *fresh);
  } else {
    caf::anon_send(handle, actors::activate_atom::value);
  }
  target.actors.emplace(run_id, handle);
  return handle;
}

bool directory::activate(const std::string& run_id) {
  auto& shard = shard_of(run_id);
  std::lock_guard<std::mutex> lock(shard.mutex);
  return static_cast<bool>(find_or_spawn(shard, run_id, nullptr));
}

bool directory::activate_fresh(fresh_run run) {
  auto& shard = shard_of(run.record.id);
  std::lock_guard<std::mutex> lock(shard.mutex);
  return static_cast<bool>(find_or_spawn(shard, run.record.id, &run));
}

bool directory::try_passivate(const std::string& run_id,
                              const caf::actor_addr& actor,
                              const std::function<bool()>& idle) {
  auto& shard = shard_of(run_id);
  std::lock_guard<std::mutex> lock(shard.mutex);
  auto it = shard.actors.find(run_id);
  if (it == shard.actors.end() || it->second.address() != actor || !idle()) {
    return false;
  }
  shard.actors.erase(it);
  return true;
}

void directory::remove(const std::string& run_id,
                       const caf::actor_addr& actor) {
  {
    auto& shard = shard_of(run_id);
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto it = shard.actors.find(run_id);
    if (it != shard.actors.end() && it->second.address() == actor) {
      shard.actors.erase(it);
    }
  }
  clear_blocked(run_id);
}

void directory::set_blocked(const std::string& run_id, std::string reason) {
  std::lock_guard<std::mutex> lock(blocked_mutex_);
  blocked_[run_id] = std::move(reason);
}

void directory::clear_blocked(const std::string& run_id) {
  std::lock_guard<std::mutex> lock(blocked_mutex_);
  blocked_.erase(run_id);
}

std::optional<std::string> directory::blocked(const std::string& run_id) const {
  std::lock_guard<std::mutex> lock(blocked_mutex_);
  auto it = blocked_.find(run_id);
  if (it == blocked_.end()) {
    return std::nullopt;
  }
  return it->second;
}

std::size_t directory::active() const {
  std::size_t total = 0;
  for (auto& shard : shards_) {
    std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(shard.mutex));
    total += shard.actors.size();
  }
  return total;
}

void directory::actor_gone() {
  std::lock_guard<std::mutex> lock(live_mutex_);
  --live_;
  live_changed_.notify_all();
}

void directory::close() {
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

}  // namespace durin::services
