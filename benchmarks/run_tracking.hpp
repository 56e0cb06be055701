// Driving many runs in benchmarks: a finish_tracker bounds the runs in
// flight and counts their ends (through notify_on_finish to a CAF listener);
// a watch_queue registers admitted runs with it off the write path.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <semaphore>
#include <string>
#include <thread>
#include <vector>

#include "durin/caf.hpp"
#include "durin/runtime.hpp"

namespace durin::bench {

// Completion tracking: a CAF actor receives notify_on_finish messages and
// frees one in-flight slot per ended run.

class finish_tracker {
 public:
  finish_tracker(durin::runtime& runtime, std::uint64_t expected,
                 std::size_t in_flight_max)
      : runtime_(runtime),
        shared_(std::make_shared<shared>(expected, in_flight_max)) {
    auto state = shared_;
    listener_ = runtime.system().spawn(
        [state](caf::event_based_actor*) -> caf::behavior {
          return {
              [state](durin::run_finished_atom, const durin::run_info& info) {
                state->ended(info.status == durin::run_status::completed);
              }};
        });
  }
  ~finish_tracker() {
    // The runtime's actor system waits for every actor when it closes.
    caf::anon_send_exit(listener_, caf::exit_reason::user_shutdown);
  }
  finish_tracker(const finish_tracker&) = delete;
  finish_tracker& operator=(const finish_tracker&) = delete;

  void acquire_slot() { shared_->slots.acquire(); }
  // A start that was refused ends at once, as a failure.
  void refused() { shared_->ended(false); }
  void watch(const std::string& run_id) {
    runtime_.notify_on_finish(run_id, listener_);
  }
  // False when not every run ended within `limit`.
  bool wait_all(std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(shared_->mutex);
    return shared_->all_ended.wait_for(lock, limit, [this] {
      return shared_->ended_count.load() >= shared_->expected;
    });
  }
  std::uint64_t ended() const { return shared_->ended_count.load(); }
  std::uint64_t failed() const { return shared_->failed_count.load(); }

 private:
  struct shared {
    shared(std::uint64_t expected_runs, std::size_t in_flight_max)
        : expected(expected_runs),
          slots(static_cast<std::ptrdiff_t>(in_flight_max)) {}
    void ended(bool completed) {
      if (!completed) {
        failed_count.fetch_add(1);
      }
      slots.release();
      if (ended_count.fetch_add(1) + 1 == expected) {
        std::lock_guard<std::mutex> lock(mutex);
        all_ended.notify_all();
      }
    }
    std::uint64_t expected;
    std::counting_semaphore<1 << 24> slots;
    std::atomic<std::uint64_t> ended_count{0};
    std::atomic<std::uint64_t> failed_count{0};
    std::mutex mutex;
    std::condition_variable all_ended;
  };

  durin::runtime& runtime_;
  std::shared_ptr<shared> shared_;
  caf::actor listener_;
};

// Run ids admitted but not yet watched. start_async's callback runs on the
// committer thread and must not block, so it only queues the id; one thread
// calls notify_on_finish (a store read) off the write path.
class watch_queue {
 public:
  explicit watch_queue(finish_tracker& tracker)
      : tracker_(tracker), thread_([this] { work(); }) {}
  ~watch_queue() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  void push(std::string run_id) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ids_.push_back(std::move(run_id));
    }
    wake_.notify_one();
  }

 private:
  void work() {
    std::vector<std::string> taken;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return closed_ || !ids_.empty(); });
        if (ids_.empty()) {
          return;
        }
        taken.swap(ids_);
      }
      for (auto& id : taken) {
        tracker_.watch(id);
      }
      taken.clear();
    }
  }

  finish_tracker& tracker_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::string> ids_;
  bool closed_ = false;
  std::thread thread_;
};

}  // namespace durin::bench
