#include "services/node.hpp"

namespace durin::services {

std::uint64_t finish_listeners::add(const std::string& run_id, listener fn) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto token = next_token_++;
  listeners_[run_id].emplace_back(token, std::move(fn));
  return token;
}

void finish_listeners::remove(const std::string& run_id, std::uint64_t token) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = listeners_.find(run_id);
  if (it == listeners_.end()) {
    return;
  }
  std::erase_if(it->second,
                [token](auto& entry) { return entry.first == token; });
  if (it->second.empty()) {
    listeners_.erase(it);
  }
}

void finish_listeners::notify(const run_info& info) {
  std::vector<std::pair<std::uint64_t, listener>> ready;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = listeners_.find(info.id);
    if (it == listeners_.end()) {
      return;
    }
    ready = std::move(it->second);
    listeners_.erase(it);
  }
  for (auto& entry : ready) {
    entry.second(info);
  }
}

void finish_listeners::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  listeners_.clear();
}

}  // namespace durin::services
