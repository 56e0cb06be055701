#include "services/run_events.hpp"

#include <algorithm>

namespace durin::services {

run_events::part& run_events::part_of(const std::string& run_id) const {
  return parts_[std::hash<std::string>{}(run_id) % part_count];
}

std::uint64_t run_events::subscribe(const std::string& run_id, until what,
                                    listener fn) {
  std::uint64_t id;
  {
    std::lock_guard lock(ids_mutex_);
    id = next_id_++;
  }
  auto& part = part_of(run_id);
  std::lock_guard lock(part.mutex);
  part.runs[run_id].push_back({id, what, std::move(fn)});
  return id;
}

void run_events::unsubscribe(const std::string& run_id, std::uint64_t id) {
  auto& part = part_of(run_id);
  std::lock_guard lock(part.mutex);
  auto it = part.runs.find(run_id);
  if (it == part.runs.end()) {
    return;
  }
  std::erase_if(it->second, [id](const auto& entry) { return entry.id == id; });
  if (it->second.empty()) {
    part.runs.erase(it);
  }
}

bool run_events::listening(const std::string& run_id) const {
  auto& part = part_of(run_id);
  std::lock_guard lock(part.mutex);
  return part.runs.contains(run_id);
}

void run_events::publish(const run_event& event) {
  std::vector<subscription> told;
  {
    auto& part = part_of(event.run.id);
    std::lock_guard lock(part.mutex);
    auto it = part.runs.find(event.run.id);
    if (it == part.runs.end()) {
      return;
    }
    auto& waiting = it->second;
    auto first_told = std::stable_partition(
        waiting.begin(), waiting.end(), [&event](const subscription& s) {
          return s.what == until::ended && !event.ended;
        });
    told.assign(std::make_move_iterator(first_told),
                std::make_move_iterator(waiting.end()));
    waiting.erase(first_told, waiting.end());
    if (waiting.empty()) {
      part.runs.erase(it);
    }
  }
  for (auto& subscription : told) {
    subscription.fn(event);  // outside the lock: it may subscribe again
  }
}

void run_events::clear() {
  for (auto& part : parts_) {
    std::lock_guard lock(part.mutex);
    part.runs.clear();
  }
}

}  // namespace durin::services
