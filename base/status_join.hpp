// One outcome of several parts that finish on any threads: join_status(n,
// done) returns the callback each part calls once; the n-th call runs
// `done` with the first failure reported (ok when none failed). Calls after
// the n-th are a caller's bug and are ignored.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>

#include "durin/error.hpp"

namespace durin {

inline std::function<void(const status&)> join_status(
    std::size_t parts, std::function<void(const status&)> done) {
  struct joined {
    std::mutex mutex;
    std::size_t left = 0;
    status outcome;
    std::function<void(const status&)> done;
  };
  auto state = std::make_shared<joined>();
  state->left = parts;
  state->done = std::move(done);
  return [state](const status& part) {
    status outcome;
    {
      std::lock_guard lock(state->mutex);
      if (!part && state->outcome) {
        state->outcome = part;
      }
      if (state->left == 0 || --state->left > 0) {
        return;
      }
      outcome = state->outcome;
    }
    state->done(outcome);
  };
}

}  // namespace durin
