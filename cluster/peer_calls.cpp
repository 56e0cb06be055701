// One round of calls: an actor of the peers' system asks the middleman for
// each node's router (a cached connection answers at once), sends the call
// with the time left, and hands each answer to the round, which the caller
// waits on.
#include "cluster/peer_calls.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <future>
#include <memory>
#include <mutex>
#include <optional>

#include "cluster/detail/peer_wire.hpp"
#include "gateway/wire_format.hpp"

namespace durin::cluster {

namespace {

using clock_type = std::chrono::steady_clock;

// The answers of one round; the caller waits until every one is in.
class call_round {
 public:
  explicit call_round(std::size_t size) : answers_(size), left_(size) {
    if (size == 0) {
      done_.set_value();
    }
  }

  // The first answer of target `index` counts; later ones, and any after
  // take(), are dropped.
  void answer(std::size_t index, wire::http_response response) {
    std::lock_guard lock(mutex_);
    if (taken_ || answers_[index]) {
      return;
    }
    answers_[index] = std::move(response);
    if (--left_ == 0) {
      done_.set_value();
    }
  }

  std::future<void> finished() { return done_.get_future(); }

  // The answers in so far (nullopt: none yet), once.
  std::vector<std::optional<wire::http_response>> take() {
    std::lock_guard lock(mutex_);
    taken_ = true;
    return std::move(answers_);
  }

 private:
  std::mutex mutex_;
  std::vector<std::optional<wire::http_response>> answers_;
  std::size_t left_;
  bool taken_ = false;
  std::promise<void> done_;
};

std::chrono::milliseconds left_until(clock_type::time_point deadline) {
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - clock_type::now()));
}

// A connect that fails may have lost CAF's race of two nodes connecting
// to each other at once (it keeps one connection per pair and closes the
// other handshake): tried again while the deadline allows, since nothing
// was sent yet.
constexpr int connect_tries = 3;

void call_one(caf::event_based_actor* self,
              const std::shared_ptr<call_round>& round, std::size_t index,
              const call_target& target, const forwarded_request& message,
              clock_type::time_point deadline, int tries = connect_tries) {
  std::string host;
  std::uint16_t port = 0;
  if (!detail::split_address(target.peer, host, port)) {
    round->answer(
        index, node_not_answered(target.node, "its peer address is malformed"));
    return;
  }
  auto mm = self->system().middleman().actor_handle();
  const auto node = target.node;
  auto again = [self, round, index, target, message, deadline, tries] {
    if (tries > 1 && clock_type::now() < deadline) {
      call_one(self, round, index, target, message, deadline, tries - 1);
      return true;
    }
    return false;
  };
  self->request(mm, left_until(deadline), caf::connect_atom::value, host, port)
      .then(
          [self, round, index, node, message, deadline, again](
              const caf::node_id&, caf::strong_actor_ptr& ptr,
              const std::set<std::string>&) {
            if (!ptr) {
              if (!again()) {
                round->answer(index,
                              node_not_answered(node, "it cannot be reached"));
              }
              return;
            }
            self->request(caf::actor_cast<caf::actor>(ptr),
                          left_until(deadline), call_atom::value, message)
                .then(
                    [round, index](forwarded_response& response) {
                      round->answer(index,
                                    detail::from_message(std::move(response)));
                    },
                    [round, index, node](caf::error& failure) {
                      round->answer(
                          index, node_not_answered(
                                     node, failure == caf::sec::request_timeout
                                               ? "it did not answer in time"
                                               : "its connection failed"));
                    });
          },
          [self, round, index, node, again](caf::error& failure) {
            if (!again()) {
              round->answer(
                  index, node_not_answered(
                             node, "it cannot be reached (" +
                                       self->system().render(failure) + ")"));
            }
          });
}

}  // namespace

wire::http_response node_not_answered(const std::string& node,
                                      std::string_view why) {
  return gateway::error_response(
      503, "node-not-answered",
      "node " + node + " did not answer: " + std::string(why) +
          "; the request may or may not have taken effect there");
}

std::vector<gateway::placement::node_answer> call_nodes(
    caf::actor_system& system, const std::vector<call_target>& targets,
    const forwarded_request& message, std::chrono::milliseconds timeout) {
  const auto deadline = clock_type::now() + timeout;
  auto round = std::make_shared<call_round>(targets.size());
  auto finished = round->finished();
  if (!targets.empty()) {
    // The actor lives while its requests wait for their answers, each
    // bounded by the deadline, and ends by itself after the last.
    system.spawn(
        [round, targets, message, deadline](caf::event_based_actor* self) {
          for (std::size_t index = 0; index < targets.size(); ++index) {
            call_one(self, round, index, targets[index], message, deadline);
          }
        });
  }
  // Each answer is bounded by the deadline; the slack covers the actor's
  // own delivery of its timeouts.
  (void)finished.wait_until(deadline + std::chrono::milliseconds(500));
  auto answers = round->take();
  std::vector<gateway::placement::node_answer> out;
  for (std::size_t index = 0; index < targets.size(); ++index) {
    out.push_back({targets[index].node,
                   answers[index]
                       ? std::move(*answers[index])
                       : node_not_answered(targets[index].node,
                                           "it did not answer in time")});
  }
  return out;
}

}  // namespace durin::cluster
