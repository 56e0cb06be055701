// The run-event hub: who waits for which run to settle or end, told after
// the write recording that status is durable. Every "tell me when the run
// reaches X" subscribes here (runtime::wait, wait_settled, notify_on_finish,
// a flow's run handle watching another run, the gateway's waited starts);
// the run's actor is the only publisher, once its write is durable. The
// store knows no observers, and the actor knows none of the subscribers.
//
// A subscription is told once, by the first event it asks for, then ends.
// Subscribe before reading the run's state (an event that lands between the
// two is then seen by one or the other, never by neither). Listeners run on
// the publisher's thread (a run actor's): they must not block, only hand
// off. Thread-safety: every method may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "durin/run.hpp"

namespace durin::services {

struct run_event {
  run_info run;        // as the durable write recorded it
  bool ended = false;  // completed, failed or cancelled; else waiting
  // The batch also kept the answer of the start that made the run
  // (actors::start_answer::when_settled): its caller may send it as is.
  bool answer_kept = false;
};

class run_events {
 public:
  enum class until : std::uint8_t {
    settled,  // the run waits for something or ended
    ended,
  };
  using listener = std::function<void(const run_event&)>;

  // Tells `fn` the first event of `run_id` that `what` asks for.
  std::uint64_t subscribe(const std::string& run_id, until what, listener fn);
  // Ends a subscription not told yet; one told already is gone.
  void unsubscribe(const std::string& run_id, std::uint64_t id);

  // Whether anyone listens to `run_id` (the publisher skips building an
  // event nobody reads; a later subscriber reads the durable state).
  bool listening(const std::string& run_id) const;
  void publish(const run_event& event);

  // The node closes: subscriptions end untold (their waits time out).
  void clear();

 private:
  struct subscription {
    std::uint64_t id = 0;
    until what = until::settled;
    listener fn;
  };
  struct part {
    mutable std::mutex mutex;
    std::unordered_map<std::string, std::vector<subscription>> runs;
  };
  part& part_of(const std::string& run_id) const;

  static constexpr std::size_t part_count = 16;
  mutable std::array<part, part_count> parts_;
  std::mutex ids_mutex_;
  std::uint64_t next_id_ = 1;
};

}  // namespace durin::services
