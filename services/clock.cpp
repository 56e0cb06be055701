#include "durin/clock.hpp"

#include <chrono>

namespace durin {

std::int64_t system_clock::now_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::int64_t manual_clock::now_ms() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return now_ms_;
}

void manual_clock::advance_ms(std::int64_t delta_ms) {
  std::vector<std::function<void()>> listeners;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    now_ms_ += delta_ms;
    listeners = listeners_;
  }
  // Outside the lock: listeners read the clock.
  for (auto& listener : listeners) {
    listener();
  }
}

void manual_clock::on_jump(std::function<void()> listener) {
  std::lock_guard<std::mutex> lock(mutex_);
  listeners_.push_back(std::move(listener));
}

}  // namespace durin
