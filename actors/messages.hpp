// The messages run actors exchange with the node's services. Local only: run
// actors are never addressed from another node directly (the cluster forwards
// requests, not these), so the types are whitelisted rather than serialisable.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>

#include "actors/admission.hpp"
#include "durin/caf.hpp"
#include "durin/error.hpp"
#include "durin/run.hpp"
#include "persistence/records.hpp"
#include "services/step_executor.hpp"

namespace durin::actors {

using services::report_answer;
using services::step_outcome;
using services::step_task;

using activate_atom = caf::atom_constant<caf::atom("activate")>;
using committed_atom = caf::atom_constant<caf::atom("committed")>;
using step_done_atom = caf::atom_constant<caf::atom("stepdone")>;
using timer_atom = caf::atom_constant<caf::atom("timer")>;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;
using reload_atom = caf::atom_constant<caf::atom("reload")>;
using linger_atom = caf::atom_constant<caf::atom("linger")>;

// To token actors.
using start_claim_atom = caf::atom_constant<caf::atom("tkstart")>;
using claim_atom = caf::atom_constant<caf::atom("tkclaim")>;
using resume_atom = caf::atom_constant<caf::atom("tkresume")>;
using subscribe_atom = caf::atom_constant<caf::atom("tksub")>;
using dispose_atom = caf::atom_constant<caf::atom("tkdispose")>;
using owner_end_atom = caf::atom_constant<caf::atom("tkownerend")>;
// To run actors, from token actors.
using claimed_atom = caf::atom_constant<caf::atom("hkclaimed")>;
using payload_atom = caf::atom_constant<caf::atom("hkpayload")>;
using lost_atom = caf::atom_constant<caf::atom("hklost")>;
// To run actors: a run they watch ended; (run_info as recorded).
using watched_atom = caf::atom_constant<caf::atom("watched")>;

// A run admitted just now: its record, and no history yet.
struct fresh_run {
  persistence::run_record record;
  // How the start that made it is answered (plain data, see admission.hpp).
  start_answer answer;
  // Set when the admission is not written yet (a start answered once its
  // run settles): it rides in the run's first write, and the actor calls
  // this once that write is durable (with `info`) or failed.
  std::function<void(result<run_info>)> admitted;
  run_info info;
};

struct step_report {
  std::uint64_t call = 0;
  std::string attempt_id;
  step_outcome outcome;
  // Told whether the outcome was recorded, once that is durable; may be
  // null. Runs on the run actor's thread: it must not block.
  std::function<void(report_answer)> reply;
};

struct cancel_request {
  std::string reason;
  std::string command_id;  // recorded in the run-cancelled event
  std::function<void(result<run_info>)> reply;  // runs on the actor's thread
};

// A start with a hook: the run and its token, admitted in one write.
struct start_claim {
  persistence::run_record run;
  persistence::token_record token;  // owner, retention, metadata filled in
  std::function<void(result<run_info>)> reply;
  start_answer answer;  // the caller's key, written in the admission batch
};

// A flow's create_hook: claim (or force-claim) the token for run_id.
struct hook_claim {
  std::string run_id;
  std::uint64_t call = 0;
  std::string metadata;  // MessagePack
  std::int64_t retain_until_ms = 0;
  bool force = false;
  bool webhook = false;
  std::uint32_t spec_version = 0;
};

// The token actor's answer to a hook_claim, sent to the run.
struct claim_outcome {
  std::string token;
  std::uint64_t call = 0;
  bool owned = false;
  std::string owner;  // when not owned
};

struct resume_request {
  std::string payload;  // MessagePack
  std::string resume_id;
  std::function<void(result<std::string>)> reply;  // the owner's run id
};

// A run asks for the payloads addressed to it from `from_sequence` on.
struct subscription {
  std::string run_id;
  std::uint64_t from_sequence = 1;
};

// The run disposed its hook, or ended (at `at_ms`).
struct owner_notice {
  std::string run_id;
  std::int64_t at_ms = 0;
};

// A payload for a run's hook on `token`.
struct hook_delivery {
  std::string token;
  std::uint64_t sequence = 0;
  std::string payload;  // MessagePack
};

// The run lost `token` to `new_owner`; payloads up to `last_sequence` are
// still its own.
struct hook_loss {
  std::string token;
  std::string new_owner;
  std::uint64_t last_sequence = 0;
};

}  // namespace durin::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(durin::status)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(durin::actors::fresh_run)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(durin::actors::step_report)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(durin::actors::cancel_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(durin::persistence::timer_record)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(durin::actors::start_claim)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(durin::actors::hook_claim)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(durin::actors::claim_outcome)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(durin::actors::resume_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(durin::actors::subscription)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(durin::actors::owner_notice)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(durin::actors::hook_delivery)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(durin::actors::hook_loss)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<std::function<void()>>)
