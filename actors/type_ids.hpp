// The type ids of the node's own messages (actors/messages.hpp), in the
// block that follows durin's public one (durin/caf.hpp). Ids are positions:
// append new types at the end, never reorder, so that two nodes of the same
// build agree. durin::add_message_types registers both blocks.
#pragma once

#include <caf/type_id.hpp>

#include "actors/messages.hpp"
#include "durin/caf.hpp"

CAF_BEGIN_TYPE_ID_BLOCK(durin_node, caf::id_block::durin::end)
CAF_ADD_TYPE_ID(durin_node, (durin::actors::fresh_run))
CAF_ADD_TYPE_ID(durin_node, (durin::actors::step_report))
CAF_ADD_TYPE_ID(durin_node, (durin::actors::cancel_request))
CAF_ADD_TYPE_ID(durin_node, (durin::actors::start_claim))
CAF_ADD_TYPE_ID(durin_node, (durin::actors::hook_claim))
CAF_ADD_TYPE_ID(durin_node, (durin::actors::claim_outcome))
CAF_ADD_TYPE_ID(durin_node, (durin::actors::resume_request))
CAF_ADD_TYPE_ID(durin_node, (durin::actors::subscription))
CAF_ADD_TYPE_ID(durin_node, (durin::actors::owner_notice))
CAF_ADD_TYPE_ID(durin_node, (durin::actors::hook_delivery))
CAF_ADD_TYPE_ID(durin_node, (durin::actors::hook_loss))
CAF_ADD_TYPE_ID(durin_node, (durin::persistence::run_record))
CAF_ADD_TYPE_ID(durin_node, (durin::persistence::token_record))
CAF_ADD_TYPE_ID(durin_node, (durin::persistence::timer_record))
CAF_ADD_TYPE_ID(durin_node, (durin::services::step_outcome))
CAF_ADD_TYPE_ID(durin_node, (durin::services::report_answer))
CAF_ADD_TYPE_ID(durin_node, (durin::actors::message_request))
CAF_ADD_TYPE_ID(durin_node, (durin::actors::message_receipt))
CAF_ADD_TYPE_ID(durin_node, (durin::actors::query_request))
CAF_ADD_TYPE_ID(durin_node, (durin::actors::child_started))
CAF_ADD_TYPE_ID(durin_node, (durin::actors::hand_over_request))
CAF_ADD_TYPE_ID(durin_node, (durin::actors::hand_over_ready))
CAF_END_TYPE_ID_BLOCK(durin_node)

namespace caf {
class actor_system;
}  // namespace caf

namespace durin::actors {

// Whether `system`'s config registered both blocks (durin::add_message_types).
bool has_message_types(caf::actor_system& system);

}  // namespace durin::actors
