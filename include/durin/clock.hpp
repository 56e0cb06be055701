// The runtime's source of time, in milliseconds since the Unix epoch. The
// system clock is the default; tests inject a manual_clock to move time by
// hand (timers fire when it is advanced past their due time). Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

namespace durin {

class clock {
 public:
  virtual ~clock() = default;
  virtual std::int64_t now_ms() const = 0;
  // Calls `listener` whenever time jumps (never for the system clock, whose
  // time flows on its own). The listener must not block.
  virtual void on_jump(std::function<void()> listener) { (void)listener; }
};

class system_clock final : public clock {
 public:
  std::int64_t now_ms() const override;
};

class manual_clock final : public clock {
 public:
  explicit manual_clock(std::int64_t start_ms) : now_ms_(start_ms) {}
  std::int64_t now_ms() const override;
  void advance_ms(std::int64_t delta_ms);
  void on_jump(std::function<void()> listener) override;

 private:
  mutable std::mutex mutex_;
  std::int64_t now_ms_;
  std::vector<std::function<void()>> listeners_;
};

}  // namespace durin
