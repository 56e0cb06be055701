// How answers travel between actors and whoever asked them. A durin error is
// a caf::error of category "durin" whose context holds the durin::error, so
// it crosses a node whole; a CAF error that is not ours (the receiver is
// gone, the request timed out) becomes shutting-down or timeout.
//
// reply_once<T> is a response promise that answers exactly once: by a call,
// or with its `dropped` error when the last copy goes unanswered (an engine
// discarded on reload drops the replies it held), so a requester never
// waits for an answer that cannot come. Use it on the answering actor only.
#pragma once

#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/make_message.hpp>
#include <caf/sec.hpp>
#include <caf/typed_response_promise.hpp>
#include <memory>
#include <utility>

#include "durin/caf.hpp"
#include "durin/error.hpp"

namespace durin::actors {

constexpr caf::atom_value error_category = caf::atom("durin");

inline caf::error to_caf_error(error failure) {
  auto code = static_cast<std::uint8_t>(failure.code);
  return caf::error(code, error_category,
                    caf::make_message(std::move(failure)));
}

inline error from_caf_error(const caf::error& failure) {
  if (failure.category() == error_category &&
      failure.context().match_elements<error>()) {
    return failure.context().get_as<error>(0);
  }
  if (failure == caf::sec::request_timeout) {
    return make_error(errc::timeout,
                      "no answer in time: " + to_string(failure));
  }
  return make_error(
      errc::shutting_down,
      "the actor that was to answer is gone (" + to_string(failure) + ")");
}

template <class T>
class reply_once {
 public:
  reply_once(caf::typed_response_promise<T> promise, error dropped)
      : state_(
            std::make_shared<state>(std::move(promise), std::move(dropped))) {}

  // Answers `answer` unless answered already.
  void operator()(result<T> answer) const {
    if (state_->answered) {
      return;
    }
    state_->answered = true;
    if (answer) {
      state_->promise.deliver(std::move(*answer));
    } else {
      state_->promise.deliver(to_caf_error(answer.error()));
    }
  }

  // Whether anyone waits for the answer (the message was a request).
  bool awaited() const { return state_->promise.pending(); }

 private:
  struct state {
    state(caf::typed_response_promise<T> p, error d)
        : promise(std::move(p)), dropped(std::move(d)) {}
    state(const state&) = delete;
    state& operator=(const state&) = delete;
    ~state() {
      if (!answered && promise.pending()) {
        promise.deliver(to_caf_error(std::move(dropped)));
      }
    }
    caf::typed_response_promise<T> promise;
    error dropped;
    bool answered = false;
  };
  std::shared_ptr<state> state_;
};

}  // namespace durin::actors
