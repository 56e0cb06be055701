#include "services/held_tokens.hpp"

#include <functional>

namespace durin::services {

held_tokens::shard& held_tokens::shard_of(const std::string& address) const {
  return shards_[std::hash<std::string>{}(address) % shards_.size()];
}

void held_tokens::set(const std::string& address, const std::string& owner_run,
                      std::int64_t until_ms) {
  auto& s = shard_of(address);
  std::lock_guard lock(s.mutex);
  auto& slot = s.entries[address];
  if (slot.release != release_state::none) {
    return;
  }
  // An offer stands while the owner does: the token actor withdraws it
  // itself before it serves anything (begin_request).
  if (slot.owner_run != owner_run || until_ms != while_active) {
    slot.offered = false;
  }
  slot.owner_run = owner_run;
  slot.until_ms = until_ms;
}

void held_tokens::erase(const std::string& address) {
  auto& s = shard_of(address);
  std::lock_guard lock(s.mutex);
  auto found = s.entries.find(address);
  if (found != s.entries.end() &&
      found->second.release == release_state::none) {
    s.entries.erase(found);
  }
}

void held_tokens::offer_release(const std::string& address,
                                const std::string& owner_run) {
  auto& s = shard_of(address);
  std::lock_guard lock(s.mutex);
  auto found = s.entries.find(address);
  if (found != s.entries.end() && found->second.owner_run == owner_run &&
      found->second.until_ms == while_active &&
      found->second.release == release_state::none) {
    found->second.offered = true;
  }
}

bool held_tokens::take_release(const std::string& address,
                               const std::string& owner_run) {
  auto& s = shard_of(address);
  std::lock_guard lock(s.mutex);
  auto found = s.entries.find(address);
  if (found == s.entries.end() || !found->second.offered ||
      found->second.owner_run != owner_run) {
    return false;
  }
  found->second.offered = false;
  found->second.release = release_state::in_flight;
  // The end is then the release's business, not the token actor's.
  auto ended = s.ending.find(address);
  if (ended != s.ending.end() && ended->second == owner_run) {
    s.ending.erase(ended);
  }
  return true;
}

bool held_tokens::hold_for_hand_over(const std::string& address,
                                     const std::string& owner_run) {
  auto& s = shard_of(address);
  std::lock_guard lock(s.mutex);
  auto& slot = s.entries[address];
  if (slot.release != release_state::none) {
    return false;
  }
  slot.owner_run = owner_run;
  slot.until_ms = while_active;
  slot.offered = false;
  slot.release = release_state::in_flight;
  return true;
}

bool held_tokens::settle_release(const std::string& address, bool ok) {
  auto& s = shard_of(address);
  std::lock_guard lock(s.mutex);
  auto found = s.entries.find(address);
  if (found == s.entries.end() ||
      found->second.release != release_state::in_flight) {
    return false;
  }
  found->second.release = ok ? release_state::done : release_state::unknown;
  return found->second.actor_waiting;
}

held_tokens::release_state held_tokens::begin_request(
    const std::string& address) {
  auto& s = shard_of(address);
  std::lock_guard lock(s.mutex);
  auto found = s.entries.find(address);
  if (found == s.entries.end()) {
    return release_state::none;
  }
  auto state = found->second.release;
  switch (state) {
    case release_state::none:
      found->second.offered = false;
      break;
    case release_state::in_flight:
      found->second.actor_waiting = true;
      break;
    case release_state::done:
    case release_state::unknown:
      s.entries.erase(found);
      break;
  }
  return state;
}

bool held_tokens::erase_unless_releasing(const std::string& address) {
  auto& s = shard_of(address);
  std::lock_guard lock(s.mutex);
  auto found = s.entries.find(address);
  if (found == s.entries.end()) {
    return true;
  }
  if (found->second.release == release_state::in_flight) {
    return false;
  }
  s.entries.erase(found);
  return true;
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
  if (found == s.entries.end() || found->second.until_ms <= now_ms ||
      found->second.release != release_state::none) {
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

}  // namespace durin::services
