// The messages run actors exchange with the node's services. Local only: run
// actors are never addressed from another node directly (the cluster forwards
// requests, not these), so the types are whitelisted rather than serialisable.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>

#include "actors/step_executor.hpp"
#include "durin/error.hpp"
#include "durin/run.hpp"
#include "persistence/records.hpp"

namespace durin::actors {

using activate_atom = caf::atom_constant<caf::atom("activate")>;
using committed_atom = caf::atom_constant<caf::atom("committed")>;
using step_done_atom = caf::atom_constant<caf::atom("stepdone")>;
using timer_atom = caf::atom_constant<caf::atom("timer")>;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;
using reload_atom = caf::atom_constant<caf::atom("reload")>;

// A run admitted just now: its record, and no history yet.
struct fresh_run {
  persistence::run_record record;
};

struct step_report {
  std::uint64_t call = 0;
  std::string attempt_id;
  step_outcome outcome;
};

struct cancel_request {
  std::string reason;
  std::function<void(result<run_info>)> reply;  // runs on the actor's thread
};

}  // namespace durin::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(durin::status)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(durin::actors::fresh_run)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(durin::actors::step_report)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(durin::actors::cancel_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(durin::persistence::timer_record)
