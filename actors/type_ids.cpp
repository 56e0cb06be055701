#include "actors/type_ids.hpp"

#include <caf/actor_system.hpp>
#include <caf/uniform_type_info_map.hpp>
#include <typeinfo>

namespace durin {

void add_message_types(caf::actor_system_config& config) {
  config.add_message_types<caf::id_block::durin>();
  config.add_message_types<caf::id_block::durin_node>();
}

namespace actors {

bool has_message_types(caf::actor_system& system) {
  // The last type of each block: a config that added the block has it.
  auto& types = system.types();
  auto known = [&](const std::type_info& type) {
    return types.portable_name(0, &type) != types.default_type_name();
  };
  return known(typeid(durin::status)) && known(typeid(services::report_answer));
}

}  // namespace actors

}  // namespace durin
