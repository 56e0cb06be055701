// Idle actors that stay a while before passivating, so that a request
// following soon finds them loaded. One thread ticks for all of them: an
// actor added now receives (linger_atom, stamp) between one and two periods
// later. Arming a timer of CAF's actor clock per idle actor instead costs a
// wake-up of the clock's thread each time, which showed in the profiles of
// token starts (about 8% of the node's CPU).
//
// The stamp is the actor's own: it compares it with its state when the
// message arrives, to tell whether it was used meanwhile.
//
// Thread-safety: add() and stop() may be called from any thread.
#pragma once

#include <caf/actor.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace durin::actors {

class linger_list {
 public:
  explicit linger_list(std::chrono::milliseconds period);
  ~linger_list();  // stop()

  linger_list(const linger_list&) = delete;
  linger_list& operator=(const linger_list&) = delete;

  void add(caf::actor actor, std::uint64_t stamp);

  // Ends the thread and drops every entry (their actors are being closed).
  void stop();

 private:
  void run();

  using entry = std::pair<caf::actor, std::uint64_t>;
  const std::chrono::milliseconds period_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<entry> young_;  // added during this period
  std::vector<entry> old_;    // added during the previous one: due next tick
  std::thread thread_;
};

}  // namespace durin::actors
