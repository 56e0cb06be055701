// Idle actors that stay a while before passivating, so that a request
// following soon finds them loaded. An actor added now receives
// (linger_atom, stamp) between one and two periods later, all of them told
// by one thread (due_list). Arming a timer of CAF's actor clock per idle
// actor instead costs a wake-up of the clock's thread each time, which
// showed in the profiles of token starts (about 8% of the node's CPU).
//
// The stamp is the actor's own: it compares it with its state when the
// message arrives, to tell whether it was used meanwhile.
//
// Thread-safety: add() and stop() may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <utility>

#include "actors/token_actor.hpp"
#include "services/due_list.hpp"

namespace durin::services {

class linger_list {
 public:
  explicit linger_list(std::chrono::milliseconds period);

  void add(actors::token_actor actor, std::uint64_t stamp) {
    entries_.add({std::move(actor), stamp});
  }

  // Ends the thread and drops every entry (their actors are being closed).
  void stop() { entries_.stop(); }

 private:
  due_list<std::pair<actors::token_actor, std::uint64_t>> entries_;
};

}  // namespace durin::services
