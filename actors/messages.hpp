// The messages of a node's actors: run actors, token actors and the services
// that talk to them. Every type is plain data with an `inspect` overload and a
// type id (actors/type_ids.hpp), so it serialises and may cross a node.
// Replies travel as CAF responses (the actors' typed interfaces name them),
// never as callbacks inside a message.
#pragma once

#include <caf/atom.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

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
// To a run actor: a run whose admission rides in its first write.
using admit_atom = caf::atom_constant<caf::atom("admit")>;
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
// To a run waiting on a token another node serves: send again what that
// node may have lost (run_engine::hook_requests_again).
using hook_again_atom = caf::atom_constant<caf::atom("hkagain")>;
// To run actors: a run they watch ended (run_info as recorded; or, read on
// another node, its state now, or none); or a watch to ask again.
using watched_atom = caf::atom_constant<caf::atom("watched")>;
// To a child run: its parent, on another node, has ended.
using orphan_atom = caf::atom_constant<caf::atom("orphan")>;
// To run actors: a message or an update from outside; a query.
using message_atom = caf::atom_constant<caf::atom("message")>;
using query_atom = caf::atom_constant<caf::atom("query")>;
// To run actors: a child run's start was decided (child_started); retry a
// child's start whose outcome was not known.
using child_atom = caf::atom_constant<caf::atom("child")>;
// Between a run that continues as new and its start token's actor.
using hand_over_atom = caf::atom_constant<caf::atom("tkhandover")>;

// A run admitted just now: its record, and no history yet. Sent with
// activate_atom when its admission is durable already, with admit_atom when
// the admission rides in the run's first write (a start answered once its run
// settles): the run actor answers that once the write is durable.
struct fresh_run {
  persistence::run_record record;
  // How the start that made it is answered (plain data, see admission.hpp).
  start_answer answer;
  run_info info;  // the answer to admit_atom
  // Events its admission wrote as the start of its history (a message-with-
  // start's message), from sequence 1.
  std::vector<persistence::event_record> history;
};

// An attempt's outcome. Sent as a request by a reporter that wants to know
// whether it was recorded (answered once that is durable), else one-way.
struct step_report {
  std::uint64_t call = 0;
  std::string attempt_id;
  step_outcome outcome;
};

struct cancel_request {
  std::string reason;
  std::string command_id;  // recorded in the run-cancelled event
  // A forced stop: the run ends as terminated (status terminated).
  bool terminate = false;
};

// A message (or an update) for a run, answered with a message_receipt once
// it is durable (an update waiting for completion: once the flow completed
// it, durably).
struct message_request {
  std::string name;
  std::string payload;  // MessagePack (an update's args)
  // The sender's idempotency key (an update's id); empty: none. A key is
  // recorded once per `scope` (actors/identity.hpp: message_scope).
  std::string key;
  std::string scope;
  bool update = false;
  bool wait_completed = false;  // updates only
};

// Where a message was recorded: its run and its history sequence. For an
// update, whether the flow completed it and its result.
struct message_receipt {
  std::string run_id;
  std::uint64_t sequence = 0;
  bool completed = false;
  std::string result;  // MessagePack, when completed
};

// A query of a run's current state: answered with the handler's result
// (MessagePack), recording nothing.
struct query_request {
  std::string name;
  std::string args;  // MessagePack
};

// A start with a hook: the run and its token, admitted in one write. The
// token actor answers the run as admitted, or why not.
struct start_claim {
  persistence::run_record run;
  persistence::token_record token;  // owner, retention, metadata filled in
  start_answer answer;  // the caller's key, written in the admission batch
  // A message-with-start: the run's first events, written with its
  // admission, and its message's key (recorded under message_scope with
  // sequence 1). A key recorded already answers the run that recorded it
  // and admits nothing.
  std::vector<persistence::event_record> first_events;
  std::string message_scope;
  std::string message_key;
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

// Answered with the owner's run id once the payload is durable.
struct resume_request {
  std::string payload;  // MessagePack
  std::string resume_id;
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
// `scanned`: read from the inbox for a subscription, in order from its
// first sequence, so the run may take it after what it consumed even across
// a gap (a take-over's first payload, a push another node lost).
struct hook_delivery {
  std::string token;
  std::uint64_t sequence = 0;
  std::string payload;  // MessagePack
  bool scanned = false;
};

// The run lost `token` to `new_owner`; payloads up to `last_sequence` are
// still its own.
struct hook_loss {
  std::string token;
  std::string new_owner;
  std::uint64_t last_sequence = 0;
};

// A child run's start (ctx.start_child) was decided: `child_run_id` is the
// run admitted (the one recorded, or a repeat's first run), or `code` and
// `message` say why not. `indefinite`: the outcome is not known (a failed
// write); the parent asks again.
struct child_started {
  std::uint64_t call = 0;
  std::string child_run_id;
  std::string code;
  std::string message;
  std::string owner_run_id;  // for hook-conflict: the instance id's holder
  bool indefinite = false;
};

// continue-as-new: the ending owner asks its start token's actor to hand
// the token over to its successor; the actor answers `hand_over_ready`
// (with the record as it stands) once it is held still for the owner's end
// write, which rewrites it (see held_tokens).
struct hand_over_request {
  std::string run_id;
};
struct hand_over_ready {
  std::string token;
  bool ok = false;  // false: the run does not hold the token (any more)
  persistence::token_record record;
};

// -- How each message serialises -------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, child_started& x) {
  return f(caf::meta::type_name("durin::actors::child_started"), x.call,
           x.child_run_id, x.code, x.message, x.owner_run_id, x.indefinite);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, hand_over_request& x) {
  return f(caf::meta::type_name("durin::actors::hand_over_request"), x.run_id);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, hand_over_ready& x) {
  return f(caf::meta::type_name("durin::actors::hand_over_ready"), x.token,
           x.ok, x.record);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, start_answer& x) {
  bool has_key = x.key.has_value();
  auto key = has_key ? *x.key : persistence::start_key{};
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.key = has_key ? std::optional(std::move(key)) : std::nullopt;
    return caf::none;
  });
  return f(caf::meta::type_name("durin::actors::start_answer"), has_key, key,
           x.when_settled, load);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fresh_run& x) {
  return f(caf::meta::type_name("durin::actors::fresh_run"), x.record, x.answer,
           x.info, x.history);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_report& x) {
  return f(caf::meta::type_name("durin::actors::step_report"), x.call,
           x.attempt_id, x.outcome);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cancel_request& x) {
  return f(caf::meta::type_name("durin::actors::cancel_request"), x.reason,
           x.command_id, x.terminate);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, message_request& x) {
  return f(caf::meta::type_name("durin::actors::message_request"), x.name,
           x.payload, x.key, x.scope, x.update, x.wait_completed);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, message_receipt& x) {
  return f(caf::meta::type_name("durin::actors::message_receipt"), x.run_id,
           x.sequence, x.completed, x.result);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, query_request& x) {
  return f(caf::meta::type_name("durin::actors::query_request"), x.name,
           x.args);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, start_claim& x) {
  return f(caf::meta::type_name("durin::actors::start_claim"), x.run, x.token,
           x.answer, x.first_events, x.message_scope, x.message_key);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, hook_claim& x) {
  return f(caf::meta::type_name("durin::actors::hook_claim"), x.run_id, x.call,
           x.metadata, x.retain_until_ms, x.force, x.webhook, x.spec_version);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, claim_outcome& x) {
  return f(caf::meta::type_name("durin::actors::claim_outcome"), x.token,
           x.call, x.owned, x.owner);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, resume_request& x) {
  return f(caf::meta::type_name("durin::actors::resume_request"), x.payload,
           x.resume_id);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, subscription& x) {
  return f(caf::meta::type_name("durin::actors::subscription"), x.run_id,
           x.from_sequence);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, owner_notice& x) {
  return f(caf::meta::type_name("durin::actors::owner_notice"), x.run_id,
           x.at_ms);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, hook_delivery& x) {
  return f(caf::meta::type_name("durin::actors::hook_delivery"), x.token,
           x.sequence, x.payload, x.scanned);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, hook_loss& x) {
  return f(caf::meta::type_name("durin::actors::hook_loss"), x.token,
           x.new_owner, x.last_sequence);
}

}  // namespace durin::actors

// The stored records and step outcomes that messages carry. Declared here,
// not beside their types: persistence/ and the step executor know no CAF.
namespace durin::persistence {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_record& x) {
  return f(caf::meta::type_name("durin::persistence::run_record"), x.id, x.flow,
           x.status, x.input, x.output, x.error_code, x.error_message,
           x.created_at_ms, x.started_at_ms, x.completed_at_ms, x.spec_version,
           x.tenant, x.start_token, x.parent_run_id, x.parent_close,
           x.continued_from, x.memo, x.search);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, event_record& x) {
  return f(caf::meta::type_name("durin::persistence::event_record"), x.kind,
           x.call, x.at_ms, x.name, x.attempt, x.attempt_id, x.data,
           x.error_code, x.error_message, x.due_ms);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_record& x) {
  return f(caf::meta::type_name("durin::persistence::token_record"), x.tenant,
           x.token, x.owner_run, x.state, x.start_hook, x.webhook, x.owner_call,
           x.created_at_ms, x.retain_until_ms, x.metadata, x.owner_spec_version,
           x.next_payload, x.previous_owner, x.previous_owner_last_payload,
           x.owner_command);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_address& x) {
  return f(caf::meta::type_name("durin::persistence::request_address"),
           x.tenant, x.caller, x.key);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, start_key& x) {
  return f(caf::meta::type_name("durin::persistence::start_key"), x.address,
           x.fingerprint, x.instance_id, x.lease_ms, x.keep_ms);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, timer_record& x) {
  return f(caf::meta::type_name("durin::persistence::timer_record"), x.due_ms,
           x.run_id, x.call, x.kind);
}

}  // namespace durin::persistence

namespace durin::services {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_outcome& x) {
  auto value = x.value.dump();
  auto load = caf::meta::load_callback(
      [&] { return durin::detail::parse_json_into(x.value, value); });
  return f(caf::meta::type_name("durin::services::step_outcome"), x.result,
           value, x.message, x.retry_after_ms, x.error_code, load);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, report_answer& x) {
  return f(caf::meta::type_name("durin::services::report_answer"), x.recorded,
           x.reason);
}

}  // namespace durin::services

#include "actors/type_ids.hpp"
