// The timer service fires durable timers (sleeps, step retries). Timers live
// in the `timers` family; this service holds in memory only those due within
// a window ahead of now, reloading the window as time moves, so a node with a
// million sleeping runs keeps no memory or actor for timers due next week.
//
// A timer may fire more than once (a reload can find one whose deletion is not
// yet durable); receivers ignore a timer their run no longer waits on. A
// timer is deleted by its run, in the same batch that records its firing.
//
// Thread-safety: schedule() may be called from any thread. `fire` runs on the
// service's own thread and must not block.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "durin/clock.hpp"
#include "persistence/records.hpp"
#include "persistence/store.hpp"

namespace durin::services {

class timer_service {
 public:
  using fire_function = std::function<void(const persistence::timer_record&)>;

  timer_service(const persistence::store& store, durin::clock& clock,
                fire_function fire,
                std::chrono::milliseconds window = std::chrono::minutes(1));
  ~timer_service();  // stop()

  // Starts the thread; the first window is loaded from the store.
  void start();

  // Adds a timer whose record is durable already.
  void schedule(const persistence::timer_record& timer);

  void stop();

  std::size_t loaded() const;  // timers held in memory now

 private:
  void run();
  void reload(std::int64_t now_ms);

  struct later {
    bool operator()(const persistence::timer_record& a,
                    const persistence::timer_record& b) const {
      return a.due_ms > b.due_ms;
    }
  };

  const persistence::store& store_;
  durin::clock& clock_;
  fire_function fire_;
  std::int64_t window_ms_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::priority_queue<persistence::timer_record,
                      std::vector<persistence::timer_record>, later>
      heap_;
  std::int64_t loaded_until_ms_ = -1;  // every timer due <= this is in heap_
  std::int64_t next_reload_ms_ = 0;
  std::string resume_key_;  // after a cut-short reload: its last key
  bool stopping_ = false;
  std::thread thread_;
  // The clock may outlive this service; its jump listener reaches us only
  // while `waker_->target` is set.
  struct waker {
    std::mutex mutex;
    timer_service* target = nullptr;
  };
  std::shared_ptr<waker> waker_ = std::make_shared<waker>();
};

}  // namespace durin::services
