#include "actors/linger_list.hpp"

#include <caf/send.hpp>

#include "actors/messages.hpp"

namespace durin::actors {

linger_list::linger_list(std::chrono::milliseconds period)
    : period_(period), thread_([this] { run(); }) {}

linger_list::~linger_list() {
  stop();
}

void linger_list::add(caf::actor actor, std::uint64_t stamp) {
  std::lock_guard lock(mutex_);
  if (!stopping_) {
    young_.emplace_back(std::move(actor), stamp);
  }
}

void linger_list::stop() {
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

void linger_list::run() {
  std::vector<entry> due;
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, period_, [this] { return stopping_; })) {
    due.swap(old_);
    old_.swap(young_);
    lock.unlock();
    for (auto& [actor, stamp] : due) {
      caf::anon_send(actor, linger_atom::value, stamp);
    }
    due.clear();
    lock.lock();
  }
}

}  // namespace durin::actors
