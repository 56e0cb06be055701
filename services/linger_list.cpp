#include "services/linger_list.hpp"

#include <caf/send.hpp>

namespace durin::services {

linger_list::linger_list(std::chrono::milliseconds period)
    : entries_(period,
               [](std::pair<actors::token_actor, std::uint64_t>& entry) {
                 caf::anon_send(entry.first, actors::linger_atom::value,
                                entry.second);
               }) {}

}  // namespace durin::services
