// Items that fall due one to two periods after they are added, handed to
// `due` on one thread that ticks for all of them. For deadlines that may be
// late by a period: cheaper than a timer per item, whose arming and firing
// each wake a clock's thread (see linger_list).
//
// Items are kept in two generations: those added during the current period
// and those added during the previous one, which the next tick hands over.
//
// Thread-safety: add() and stop() may be called from any thread; `due` runs
// on the list's own thread, never after stop() has returned.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace durin::services {

template <class T>
class due_list {
 public:
  due_list(std::chrono::milliseconds period, std::function<void(T&)> due)
      : period_(period), due_(std::move(due)), thread_([this] { run(); }) {}
  ~due_list() { stop(); }

  due_list(const due_list&) = delete;
  due_list& operator=(const due_list&) = delete;

  void add(T item) {
    std::lock_guard lock(mutex_);
    if (!stopping_) {
      young_.push_back(std::move(item));
    }
  }

  // Ends the thread and drops every item without handing it over.
  void stop() {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) {
        return;
      }
      stopping_ = true;
      young_.clear();
      old_.clear();
    }
    wake_.notify_all();
    thread_.join();
  }

 private:
  void run() {
    std::vector<T> due;
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, period_, [this] { return stopping_; })) {
      due.swap(old_);
      old_.swap(young_);
      lock.unlock();
      for (auto& item : due) {
        due_(item);
      }
      due.clear();
      lock.lock();
    }
  }

  const std::chrono::milliseconds period_;
  const std::function<void(T&)> due_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<T> young_;  // added during this period
  std::vector<T> old_;    // added during the previous one: due next tick
  std::thread thread_;    // last: starts once the members above exist
};

}  // namespace durin::services
