#include "services/step_executor.hpp"

#include <chrono>
#include <stdexcept>

#include "base/json_text.hpp"

namespace durin {

namespace {
thread_local const step_info* current_step = nullptr;
thread_local const std::function<bool(const step_progress&)>* current_beat =
    nullptr;
}  // namespace

const step_info& step_metadata() {
  if (current_step == nullptr) {
    throw std::logic_error(
        "durin::step_metadata() called outside of a step body");
  }
  return *current_step;
}

bool heartbeat(const step_progress& progress) {
  if (current_step == nullptr) {
    throw std::logic_error("durin::heartbeat() called outside of a step body");
  }
  if (current_beat == nullptr || !*current_beat) {
    return true;
  }
  return (*current_beat)(progress);
}

namespace detail {

step_scope::step_scope(const step_info& info,
                       const std::function<bool(const step_progress&)>& beat)
    : previous_info_(current_step), previous_beat_(current_beat) {
  current_step = &info;
  current_beat = &beat;
}

step_scope::~step_scope() {
  current_step = previous_info_;
  current_beat = previous_beat_;
}

}  // namespace detail

}  // namespace durin

namespace durin::services {

namespace {

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

step_outcome run_step_body(
    step_info& info, const std::function<json()>& body,
    const std::function<bool(const step_progress&)>& beat) {
  step_outcome outcome;
  info.started_at_ms = wall_ms();
  detail::step_scope scope(info, beat);
  try {
    outcome.value = body();
  } catch (const fatal_error& e) {
    outcome.result = step_outcome::kind::fatal;
    outcome.message = e.what();
  } catch (const retryable_error& e) {
    outcome.result = step_outcome::kind::retryable;
    outcome.message = e.what();
    outcome.retry_after_ms = e.retry_after().count();
    if (outcome.retry_after_ms > limits::duration_ms_max) {
      // No timer that far: the step fails for good, saying why.
      outcome.result = step_outcome::kind::fatal;
      outcome.error_code = "invalid-argument";
      outcome.message =
          limits::duration_problem("retry_after", outcome.retry_after_ms) +
          "; the attempt failed with: " + outcome.message;
      outcome.retry_after_ms = -1;
    }
  } catch (const json::exception& e) {
    // Arguments or a result that do not convert will not convert next time.
    outcome.result = step_outcome::kind::fatal;
    outcome.message = "JSON conversion failed: " + json_problem(e);
  } catch (const std::exception& e) {
    outcome.result = step_outcome::kind::retryable;
    outcome.message = e.what();
  } catch (...) {
    outcome.result = step_outcome::kind::retryable;
    outcome.message = "the step threw a non-standard exception";
  }
  return outcome;
}

step_executor::step_executor(std::size_t threads, std::size_t queue_max)
    : queue_max_(queue_max) {
  threads_.reserve(threads);
  for (std::size_t i = 0; i < std::max<std::size_t>(threads, 1); ++i) {
    threads_.emplace_back([this] { work(); });
  }
}

step_executor::~step_executor() {
  stop();
}

bool step_executor::submit(step_task task) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || queue_.size() >= queue_max_) {
      return false;
    }
    queue_.push_back(std::move(task));
    wake = wake_one();
  }
  if (wake) {
    wake_.notify_one();
  }
  return true;
}

bool step_executor::wake_one() {
  if (wakes_on_the_way_ > 0 || sleeping_ == 0) {
    return false;  // a woken thread takes it, or every thread is busy
  }
  ++wakes_on_the_way_;
  return true;
}

void step_executor::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ && threads_.empty()) {
      return;
    }
    stopping_ = true;
    queue_.clear();
  }
  wake_.notify_all();
  for (auto& thread : threads_) {
    if (thread.joinable()) {
      thread.join();
    }
  }
  threads_.clear();
}

void step_executor::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    while (!stopping_ && queue_.empty()) {
      ++sleeping_;
      wake_.wait(lock);
      --sleeping_;
      if (wakes_on_the_way_ > 0) {
        --wakes_on_the_way_;
      }
    }
    if (stopping_) {
      return;
    }
    auto task = std::move(queue_.front());
    queue_.pop_front();
    // More waiting: a successor, so that they need not wait for this body.
    bool wake = !queue_.empty() && wake_one();
    lock.unlock();
    if (wake) {
      wake_.notify_one();
    }
    auto outcome = run_step_body(task.info, task.body, task.beat);
    if (task.done) {
      task.done(std::move(outcome));
    }
    task = step_task{};  // its captures go before the lock is taken again
    lock.lock();
  }
}

}  // namespace durin::services
