// Messages between nodes that wait for an answer (a forwarded request, a
// replicated write) are sent as plain messages, not CAF requests with a
// timeout: in CAF 0.17 each such request puts a timer event in the clock
// thread's queue and its answer a cancel, and either wakes that thread when
// its queue was empty, twice a request, which on a virtual machine costs
// more than the message itself. The sending actor keeps each message's
// deadline and looks for overdue ones with one periodic message, armed
// while anything is unanswered: an answer is late by at most the interval
// below.
#pragma once

#include <algorithm>
#include <chrono>

namespace durin::cluster::detail {

inline std::chrono::steady_clock::duration overdue_check_interval(
    std::chrono::milliseconds timeout) {
  return std::clamp<std::chrono::steady_clock::duration>(
      timeout / 8, std::chrono::milliseconds(1),
      std::chrono::milliseconds(100));
}

// Sends `atom` to `self` after the check interval unless one is on its way
// (`armed`).
template <class Self, class Atom>
void arm_overdue_check(Self* self, bool& armed,
                       std::chrono::milliseconds timeout, Atom atom) {
  if (!armed) {
    armed = true;
    self->delayed_send(self, overdue_check_interval(timeout), atom);
  }
}

// The check itself: `check()` settles what is overdue and says whether
// anything is still unanswered; then the next check is armed if so.
template <class Self, class Atom, class Check>
void run_overdue_check(Self* self, bool& armed,
                       std::chrono::milliseconds timeout, Atom atom,
                       Check check) {
  armed = false;
  if (check()) {
    arm_overdue_check(self, armed, timeout, atom);
  }
}

}  // namespace durin::cluster::detail
