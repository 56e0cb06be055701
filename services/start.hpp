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
#include "actors/messages.hpp"
#include "durin/runtime.hpp"

namespace durin::services {

struct node;

struct start_request {
  std::string flow;
  json input;
  start_options options;
  actors::start_answer answer;  // the caller's key, and when it is answered
  // Drawn beforehand (draw_run_id) by a caller that subscribes to the run's
  // events before the run exists; empty: drawn here.
  std::string run_id;
  // A start by a schedule (services/schedule_service.hpp): recorded on the
  // run, so that it names the schedule and the occurrence it is for.
  std::string schedule_id;
  std::int64_t occurrence_ms = 0;
  // A message-with-start (services/runtime_messages.cpp): the run's first
  // events and its message's key, admitted with the run by its instance
  // token's actor (actors::start_claim).
  std::vector<persistence::event_record> first_events;
  std::string message_scope;
  std::string message_key;
  // A child run (ctx.start_child): its parent and parent_close, recorded in
  // its run record.
  std::string parent_run_id;
  std::uint8_t parent_close = 0;
};

// Admits the run; `done` runs once the admission is durable or refused, on
// an internal thread (it must not block). A start with an instance id held
// by an active run, with return_existing_active, answers that run; a
// repeated command answers the first command's run.
void start_run(node& node, start_request request,
               std::function<void(result<run_info>)> done);

// True when a start that failed with `code` may still have admitted its run
// (a write whose outcome is unknown); any other failure admitted nothing.
bool start_outcome_indefinite(errc code);

// Starts the actor of a run whose admission is durable.
bool activate_fresh(node& node, actors::fresh_run run);

// The run id a start gets: in its start token's shard (a hook, an instance
// id, a command id), else in its key's shard, else in any. Drawn by a caller
// that subscribes to the run's events before starting it.
std::string draw_run_id(node& node, const start_request& start);
// The shard of a start's run when it has a start token; -1 otherwise.
std::uint32_t start_shard(const node& node, const start_options& options);
// Whether the start's key record is written in its run's admission batch
// (the key and the run in one shard); else the caller keeps the answer.
bool key_kept_with_admission(const node& node, const start_request& start);

// The key's in-flight marker naming `run_id`, written in the key's shard
// before a start whose run lives in another shard (on this node or, in a
// cluster, on another): a retry after a crash starts that very run id.
// `done` runs on the committer's thread.
void write_key_marker(node& node, const persistence::start_key& key,
                      const std::string& run_id,
                      std::function<void(const status&)> done);
// Removes it (a start refused for certain); `done` runs once written.
void remove_key_marker(node& node, const persistence::request_address& address,
                       std::function<void()> done);

// The run now: the durable record, or `blocked` while held for replay.
// Another tenant's run is run-not-found.
result<run_info> get_run(const node& node, std::string_view run_id,
                         std::string_view tenant);

// Why a command id (of a start, a cancel or a terminate) cannot be one;
// empty when it can. An empty id is none: the command is not keyed.
std::string command_id_problem(std::string_view command_id);

}  // namespace durin::services
