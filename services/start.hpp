// The admission of runs: the one implementation of a start, behind the
// runtime's start calls and the gateway's POST /v1/runs. A start is checked
// (tenant, flow, input, its token), given a run record, and admitted in one
// atomic write at one of three sites (actors/admission.hpp): here for a
// plain start, in the run's first write for a plain start answered once it
// settles, or by the token's actor for a start with a token.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "actors/admission.hpp"
#include "durin/runtime.hpp"

namespace durin::services {

struct node;

struct start_request {
  std::string flow;
  json input;
  start_options options;
  actors::start_answer answer;  // the caller's key, and when it is answered
  // Drawn beforehand (node::new_run_id) by a caller that subscribes to the
  // run's events before the run exists; empty: drawn here.
  std::string run_id;
};

// Admits the run; `done` runs once the admission is durable or refused, on
// an internal thread (it must not block). A start with an instance id held
// by an active run, with return_existing_active, answers that run; a
// repeated command answers the first command's run.
void start_run(node& node, start_request request,
               std::function<void(result<run_info>)> done);

// The run now: the durable record, or `blocked` while held for replay.
// Another tenant's run is run-not-found.
result<run_info> get_run(const node& node, std::string_view run_id,
                         std::string_view tenant);

}  // namespace durin::services
