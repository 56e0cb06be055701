#include "services/timer_service.hpp"

#include <algorithm>
#include <cstdio>

#include "persistence/keys.hpp"

namespace durin::services {

namespace {
// Timers are loaded in slices so one reload never holds a huge vector.
constexpr std::size_t reload_slice_max = 50'000;
// Upper bound on a wait, so that a clock that moves on its own (or a store
// that was written behind our back) is looked at again soon.
constexpr std::int64_t idle_wait_ms_max = 100;
}  // namespace

timer_service::timer_service(const persistence::store& store,
                             durin::clock& clock, fire_function fire,
                             std::chrono::milliseconds window)
    : store_(store),
      clock_(clock),
      fire_(std::move(fire)),
      window_ms_(std::max<std::int64_t>(window.count(), 10)) {}

timer_service::~timer_service() {
  stop();
}

void timer_service::start() {
  {
    std::lock_guard<std::mutex> lock(waker_->mutex);
    waker_->target = this;
  }
  clock_.on_jump([waker = waker_] {
    std::lock_guard<std::mutex> lock(waker->mutex);
    if (waker->target != nullptr) {
      // Under the service's mutex, so the wake-up cannot fall between its
      // check of the clock and its wait.
      std::lock_guard<std::mutex> service_lock(waker->target->mutex_);
      waker->target->wake_.notify_all();
    }
  });
  thread_ = std::thread([this] { run(); });
}

void timer_service::schedule(const persistence::timer_record& timer) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Beyond the loaded window the next reload finds it in the store.
    if (timer.due_ms > loaded_until_ms_) {
      return;
    }
    heap_.push(timer);
  }
  wake_.notify_all();
}

void timer_service::stop() {
  {
    std::lock_guard<std::mutex> lock(waker_->mutex);
    waker_->target = nullptr;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
}

std::size_t timer_service::loaded() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return heap_.size();
}

// REQUIRES: mutex_ held.
void timer_service::reload(std::int64_t now_ms) {
  std::int64_t until = now_ms + window_ms_;
  // Continue after what is loaded: after the last key of a slice that was
  // cut short, else after every timer due by loaded_until_ms_.
  std::string after = resume_key_;
  if (after.empty() && loaded_until_ms_ >= 0) {
    // Shorter than any timer key, so no timer equals it.
    after = persistence::keys::timer_upper_bound(loaded_until_ms_);
  }
  if (store_.guard() && (!store_.guard()->open() || !store_.ready())) {
    // Another node's shard now, or this node's again but still reopening
    // (its timers are reloaded once it is ready): nothing to say, and
    // nothing to look at again before the idle wait (not every 1 ms).
    next_reload_ms_ = now_ms + idle_wait_ms_max;
    return;
  }
  auto loaded = store_.timers_until(until, reload_slice_max, after);
  if (!loaded) {
    std::fprintf(stderr, "durin: timer reload failed: %s\n",
                 loaded.error().to_string().c_str());
    next_reload_ms_ = now_ms + idle_wait_ms_max;
    return;
  }
  for (auto& timer : *loaded) {
    heap_.push(timer);
  }
  // A full slice may have stopped short of `until`, even inside a group of
  // timers due at the same time: the next reload goes on after its last key.
  if (loaded->size() == reload_slice_max) {
    resume_key_ = persistence::keys::timer(loaded->back());
    loaded_until_ms_ = std::max(loaded_until_ms_, loaded->back().due_ms - 1);
    next_reload_ms_ = now_ms;
  } else {
    resume_key_.clear();
    loaded_until_ms_ = until;
    next_reload_ms_ = now_ms + window_ms_ / 2;
  }
}

void timer_service::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    auto now = clock_.now_ms();
    if (now >= next_reload_ms_) {
      reload(now);
    }
    std::vector<persistence::timer_record> due;
    while (!heap_.empty() && heap_.top().due_ms <= now) {
      due.push_back(heap_.top());
      heap_.pop();
    }
    if (!due.empty()) {
      lock.unlock();
      for (auto& timer : due) {
        fire_(timer);
      }
      lock.lock();
      continue;
    }
    std::int64_t wait_ms = std::min(idle_wait_ms_max, next_reload_ms_ - now);
    if (!heap_.empty()) {
      wait_ms = std::min(wait_ms, heap_.top().due_ms - now);
    }
    wake_.wait_for(
        lock, std::chrono::milliseconds(std::max<std::int64_t>(wait_ms, 1)));
  }
}

}  // namespace durin::services
