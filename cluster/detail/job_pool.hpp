// Threads for work that blocks (a forwarded request's handler, an etcd
// swap, a shard's re-copy), so that no actor thread does. post() from any
// thread; stop() (and the destructor) ends the threads, after the jobs
// already posted when `drain`, else dropping those not started. A job
// posted after stop() is dropped.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace durin::cluster::detail {

class job_pool {
 public:
  explicit job_pool(std::size_t threads, bool drain = true) : drain_(drain) {
    for (std::size_t i = 0; i < threads; ++i) {
      threads_.emplace_back([this] { run(); });
    }
  }
  ~job_pool() { stop(); }
  job_pool(const job_pool&) = delete;
  job_pool& operator=(const job_pool&) = delete;

  void post(std::function<void()> job) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) {
        return;
      }
      jobs_.push_back(std::move(job));
    }
    wake_.notify_one();
  }

  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      if (!drain_) {
        jobs_.clear();
      }
    }
    wake_.notify_all();
    for (auto& thread : threads_) {
      if (thread.joinable()) {
        thread.join();
      }
    }
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) {
        return;  // stopping, and nothing left to run
      }
      auto job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }

  const bool drain_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace durin::cluster::detail
