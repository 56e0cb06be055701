// The reply relay: how a thread that is not an actor (the runtime's API, the
// gateway's routes, the task service) asks a run or token actor and gets the
// answer as a callback, while every message stays plain data. The thread
// posts a job; the relay, one long-lived actor per node, runs it: the job
// sends its request with request(...).then(...), so the answer comes back as
// a CAF response and the callback runs on the relay. Jobs posted together
// are run in one turn of the relay.
//
// Every `ask` calls `done` exactly once: with the answer; with the error the
// actor answered; or shutting-down when the directory or the relay closes
// first (also when the job is dropped unrun). `ask_unless_dropped` calls
// `done` only with an answer: on an error it is destroyed uncalled (for a
// caller that treats a missing answer as indefinite).
//
// Callbacks run on the relay: they must be short and never block, since they
// hold up every other answer of the node.
//
// Thread-safety: post and the asks may be called from any thread; stop()
// once, by the node's owner, after the directories closed.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/duration.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "actors/answers.hpp"
#include "durin/error.hpp"

namespace durin::services {

using relay_atom = caf::atom_constant<caf::atom("relay")>;

class reply_relay {
 public:
  // (relay_atom): jobs are waiting in the relay's queue.
  using relay_actor = caf::typed_actor<caf::reacts_to<relay_atom>>;
  using pointer = relay_actor::pointer;
  using job = std::function<void(pointer self)>;

  explicit reply_relay(caf::actor_system& system);
  ~reply_relay();  // stop()
  reply_relay(const reply_relay&) = delete;
  reply_relay& operator=(const reply_relay&) = delete;

  // Runs `work` on the relay soon. False (and `work` dropped) once stopped.
  bool post(job work);

  // Asks the actor of `id` in `target` (a directory) the request (xs...);
  // `done(result<T>)` gets its answer. With `fresh`, the request is the new
  // actor's first message (directory::with_new_actor).
  template <class T, class Directory, class... Ts>
  void ask(Directory& target, std::string id,
           std::function<void(result<T>)> done, Ts... xs) {
    ask_impl<T>(false, target, std::move(id), std::move(done),
                std::move(xs)...);
  }
  template <class T, class Directory, class... Ts>
  void ask_fresh(Directory& target, std::string id,
                 std::function<void(result<T>)> done, Ts... xs) {
    ask_impl<T>(true, target, std::move(id), std::move(done), std::move(xs)...);
  }

  template <class T, class Directory, class... Ts>
  void ask_unless_dropped(Directory& target, std::string id,
                          std::function<void(T)> done, Ts... xs) {
    post([&target, id = std::move(id), done = std::move(done),
          ... xs = std::move(xs)](pointer self) mutable {
      target.with_actor(id, [&](const auto& handle) {
        self->request(handle, caf::infinite, std::move(xs)...)
            .then([done](T& answer) { done(std::move(answer)); },
                  [](caf::error&) {});
      });
    });
  }

  // Drops the jobs not run yet, stops the relay (dropping the answers it
  // waits for) and waits until it is gone. Idempotent.
  void stop();

 private:
  // Calls the callback once: with an answer, or shutting-down when dropped.
  template <class T>
  class answer_once {
   public:
    explicit answer_once(std::function<void(result<T>)> done)
        : done_(std::move(done)) {}
    answer_once(const answer_once&) = delete;
    answer_once& operator=(const answer_once&) = delete;
    ~answer_once() {
      if (done_) {
        done_(make_error(errc::shutting_down,
                         "the node closed before the answer came"));
      }
    }
    void operator()(result<T> outcome) {
      auto done = std::move(done_);
      done_ = nullptr;
      if (done) {
        done(std::move(outcome));
      }
    }

   private:
    std::function<void(result<T>)> done_;
  };

  template <class T, class Directory, class... Ts>
  void ask_impl(bool fresh, Directory& target, std::string id,
                std::function<void(result<T>)> done, Ts... xs) {
    auto answer = std::make_shared<answer_once<T>>(std::move(done));
    post([fresh, &target, id = std::move(id), answer,
          ... xs = std::move(xs)](pointer self) mutable {
      auto send = [&](const auto& handle) {
        self->request(handle, caf::infinite, std::move(xs)...)
            .then([answer](T& value) { (*answer)(std::move(value)); },
                  [answer](caf::error& failure) {
                    (*answer)(actors::from_caf_error(failure));
                  });
      };
      bool sent =
          fresh ? target.with_new_actor(id, send) : target.with_actor(id, send);
      if (!sent) {
        (*answer)(make_error(errc::shutting_down, "the runtime is closing"));
      }
    });
  }

  struct queue {
    std::mutex mutex;
    std::vector<job> jobs;
    bool stopped = false;
  };

  caf::actor_system& system_;
  std::shared_ptr<queue> queue_;
  relay_actor actor_;
};

}  // namespace durin::services
