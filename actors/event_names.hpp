// How the run engine names what it records, for the run engine's own files
// only (run_engine*.cpp): the wire name of an event kind ("step-completed"),
// whether an event belongs to a step, and a step's stable id. Defined in
// run_engine_views.cpp, where the user-facing forms use them. Pure
// functions; any thread.
#pragma once

#include <cstdint>
#include <string>

#include "persistence/records.hpp"

namespace durin::actors {

// "run-started", "step-completed", ...; "unknown" outside the enum.
const char* event_kind_name(persistence::event_kind kind);

// True for the events of a step call (completed, attempt failed, failed,
// and a worker session bound by its outcome).
bool is_step_event(persistence::event_kind kind);

// The step's id, stable across its attempts: "<run id>/<call>".
std::string step_id_of(const std::string& run_id, std::uint64_t call);

}  // namespace durin::actors
