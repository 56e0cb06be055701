#include "services/reply_relay.hpp"

#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

namespace durin::services {

reply_relay::reply_relay(caf::actor_system& system)
    : system_(system), queue_(std::make_shared<queue>()) {
  actor_ = system.spawn(
      [waiting = queue_](pointer self) -> relay_actor::behavior_type {
        return {
            [self, waiting](relay_atom) {
              std::vector<job> jobs;
              {
                std::lock_guard<std::mutex> lock(waiting->mutex);
                jobs.swap(waiting->jobs);
              }
              for (auto& work : jobs) {
                work(self);
              }
            },
        };
      });
}

reply_relay::~reply_relay() {
  stop();
}

bool reply_relay::post(job work) {
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    if (queue_->stopped) {
      return false;
    }
    queue_->jobs.push_back(std::move(work));
    if (queue_->jobs.size() > 1) {
      return true;  // a wake-up is on its way, and finds this job too
    }
  }
  caf::anon_send(actor_, relay_atom::value);
  return true;
}

void reply_relay::stop() {
  std::vector<job> dropped;
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    if (queue_->stopped) {
      return;
    }
    queue_->stopped = true;
    dropped.swap(queue_->jobs);
  }
  dropped.clear();  // their callbacks answer shutting-down
  caf::scoped_actor self{system_};
  self->send_exit(actor_, caf::exit_reason::user_shutdown);
  self->wait_for(actor_);
}

}  // namespace durin::services
