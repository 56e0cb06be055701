// Message types an embedding CAF application receives from durin. Include this
// in actors that call runtime::notify_on_finish.
#pragma once

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>

#include "durin/run.hpp"

namespace durin {
// (run_finished_atom, run_info): a run ended; run_info holds its final state.
using run_finished_atom = caf::atom_constant<caf::atom("runfinish")>;
}  // namespace durin

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(durin::run_info)
