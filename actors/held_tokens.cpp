#include "actors/held_tokens.hpp"

#include <functional>

namespace durin::actors {

held_tokens::shard& held_tokens::shard_of(const std::string& address) const {
  return shards_[std::hash<std::string>{}(address) % shards_.size()];
}

void held_tokens::set(const std::string& address, const std::string& owner_run,
                      std::int64_t until_ms) {
  auto& s = shard_of(address);
  std::lock_guard lock(s.mutex);
  auto& slot = s.entries[address];
  slot.owner_run = owner_run;
  slot.until_ms = until_ms;
}

void held_tokens::erase(const std::string& address) {
  auto& s = shard_of(address);
  std::lock_guard lock(s.mutex);
  s.entries.erase(address);
}

void held_tokens::mark_ending(const std::string& address,
                              const std::string& owner_run) {
  auto& s = shard_of(address);
  std::lock_guard lock(s.mutex);
  s.ending[address] = owner_run;
}

void held_tokens::clear_ending(const std::string& address,
                               const std::string& owner_run) {
  auto& s = shard_of(address);
  std::lock_guard lock(s.mutex);
  auto found = s.ending.find(address);
  if (found != s.ending.end() && found->second == owner_run) {
    s.ending.erase(found);
  }
}

bool held_tokens::is_ending(const std::string& address,
                            const std::string& owner_run) const {
  auto& s = shard_of(address);
  std::lock_guard lock(s.mutex);
  auto found = s.ending.find(address);
  return found != s.ending.end() && found->second == owner_run;
}

std::optional<std::string> held_tokens::holder(const std::string& address,
                                               std::int64_t now_ms) const {
  auto& s = shard_of(address);
  std::lock_guard lock(s.mutex);
  auto found = s.entries.find(address);
  if (found == s.entries.end() || found->second.until_ms <= now_ms) {
    return std::nullopt;
  }
  if (found->second.until_ms == while_active) {
    auto ended = s.ending.find(address);
    if (ended != s.ending.end() && ended->second == found->second.owner_run) {
      return std::nullopt;
    }
  }
  return found->second.owner_run;
}

}  // namespace durin::actors
