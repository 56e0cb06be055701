#include "actors/scheduling.hpp"

#include <caf/actor_system_config.hpp>

#include <cstddef>

namespace durin::actors {

void block_idle_workers(caf::actor_system_config& config) {
  config.set("work-stealing.aggressive-poll-attempts", std::size_t{100});
  config.set("work-stealing.moderate-poll-attempts", std::size_t{0});
}

}  // namespace durin::actors
