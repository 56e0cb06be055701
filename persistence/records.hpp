// The records durin keeps, as plain values: what persistence/codec.hpp turns
// into bytes and persistence/store.hpp reads back. Layouts byte by byte are in
// persistence/README.md. Payload fields (`input`, `output`, `data`) hold
// MessagePack bytes that the engine treats as opaque.
#pragma once

#include <cstdint>
#include <string>

#include "durin/run.hpp"
#include "durin/search.hpp"

namespace durin::persistence {

// Bumped when any key or value layout changes incompatibly; kept in `meta`.
inline constexpr std::uint32_t schema_version = 1;
// The spec version every new run records (behaviour version of the engine).
inline constexpr std::uint32_t spec_version = 2;
// Runs recorded at an older spec version cannot be force-claimed from.
inline constexpr std::uint32_t force_claim_min_spec_version = 2;

// Column family `runs`, key: run id.
struct run_record {
  std::string id;
  std::string flow;
  run_status status = run_status::pending;  // never `blocked`
  std::string input;                        // MessagePack
  std::string output;  // MessagePack; empty until completed
  std::string error_code;
  std::string error_message;
  std::int64_t created_at_ms = 0;
  std::int64_t started_at_ms = 0;
  std::int64_t completed_at_ms = 0;
  std::uint32_t spec_version = persistence::spec_version;
  std::string tenant = "default";  // runs of one tenant are invisible to others
  std::string start_token;         // the start hook's token, empty without one
  // A run a schedule started: the schedule's id and the occurrence (the
  // nominal firing time) it was started for; empty and 0 otherwise.
  std::string schedule_id;
  std::int64_t occurrence_ms = 0;
  // A child run: the run that started it (ctx.start_child), and what its
  // end does to this run (parent_close_*). Empty for a run started from
  // outside.
  std::string parent_run_id;
  std::uint8_t parent_close = 0;
  // A run started by ctx.continue_as_new: the run it continues.
  std::string continued_from;
  // The memo (MessagePack; empty: none) and the search attributes, as the
  // start set them and the flow's last set_memo / upsert_search_attributes
  // changed them (written with the event that records the change).
  std::string memo;
  search_attributes search;

  bool operator==(const run_record&) const = default;
};

enum class event_kind : std::uint8_t {
  run_started = 1,     // the first activation began executing the flow
  step_completed = 2,  // call, name, attempt, attempt_id, data = result
  step_attempt_failed =
      3,               // call, name, attempt, attempt_id, error, due = retry at
  step_failed = 4,     // call, name, attempt, attempt_id, error: final
  timer_armed = 5,     // call, due
  timer_fired = 6,     // call
  value_recorded = 7,  // call, name ("now", "random", side effect), data
  run_completed = 8,   // data = output
  run_failed = 9,      // error
  run_cancelled = 10,  // error_message = reason
  hook_created = 11,   // call, name = token, data = {"owner": other or null}
  hook_payload = 12,   // call, name = token, data = {"sequence","payload"}
  hook_disposed = 13,  // call, name = token
  hook_lost = 14,      // call, name = token, data = {"code","owner"}
  // A message (or an update) sent to the run: run-level (call 0), name =
  // the message's name, data = {"payload", "key"?, "update"?: update id}.
  message_received = 15,
  // The flow read a message: call, name = the names it read from (joined
  // by ','), data = {"sequence": the message_received event's}.
  message_read = 16,
  // The flow completed an update: run-level (call 0; a replay finds it by
  // its sequence), name = the update's id, data =
  // {"sequence": the update's message_received event, "result"}.
  update_completed = 17,
  // The flow set its memo (ctx.set_memo): call, data = the whole memo.
  memo_set = 18,
  // The flow upserted search attributes (ctx.upsert_search_attributes):
  // call, data = the attributes it named, {"name": {"type", "value"}}.
  search_attributes_upserted = 19,
  // The flow removed search attributes (ctx.remove_search_attributes):
  // call, data = the names it named, ["name", ...].
  search_attributes_removed = 20,
  // A step of a worker session (ctx.session) bound the session to the
  // worker that reported its outcome: call, name, attempt, attempt_id as
  // the outcome's, which follows it in the same write; data =
  // {"session": its number, "worker": the worker's id}.
  session_bound = 21,
};
inline constexpr std::uint8_t event_kind_max = 21;

// Column family `history`, key: (run id, sequence). One fact of a run.
struct event_record {
  event_kind kind = event_kind::run_started;
  std::uint64_t call =
      0;  // the flow's durable call it belongs to; 0: run-level
  std::int64_t at_ms = 0;
  std::string name;
  std::uint32_t attempt = 0;
  std::string attempt_id;
  std::string data;  // MessagePack
  std::string error_code;
  std::string error_message;
  std::int64_t due_ms = 0;

  bool operator==(const event_record&) const = default;
};

// For sleep and step_retry the timer's `run_id` is the run's id; for
// token_retention it holds the token's address, keys::token(tenant, token).
enum class timer_kind : std::uint8_t {
  sleep = 1,
  step_retry = 2,
  token_retention = 3,
};

// Column family `timers`, key: (due, run id, call, kind); value: empty frame.
struct timer_record {
  std::int64_t due_ms = 0;
  std::string run_id;
  std::uint64_t call = 0;
  timer_kind kind = timer_kind::sleep;

  bool operator==(const timer_record&) const = default;
};

enum class token_state : std::uint8_t { active = 1, retained = 2 };

// Column family `tokens`, key: (tenant, token). A hook token and its owner.
// No record means the token is free.
struct token_record {
  std::string tenant;
  std::string token;
  std::string owner_run;
  token_state state = token_state::active;
  bool start_hook = false;  // claimed by the owner's admission
  bool webhook = false;
  std::uint64_t owner_call = 0;  // the owner's create_hook call; 0: start hook
  std::int64_t created_at_ms = 0;
  std::int64_t retain_until_ms = 0;  // 0: released when the owner ends
  std::string metadata;              // MessagePack
  std::uint32_t owner_spec_version = 0;
  std::uint64_t next_payload = 1;  // sequence of the next resumed payload
  // The owner this one force-claimed the token from, and the last payload
  // that still belongs to it (delivered before its force-claimed error).
  std::string previous_owner;
  std::uint64_t previous_owner_last_payload = 0;
  // The command id of the start that claimed the token, if it had one: a
  // repeat of that start gets the owner instead of a conflict.
  std::string owner_command;

  bool operator==(const token_record&) const = default;
};

// Column family `inbox`, key: (tenant, token, 1, sequence). A payload
// resumed to the token, addressed to the owner of that moment.
struct payload_record {
  std::uint64_t sequence = 0;
  std::string owner_run;
  std::string payload;  // MessagePack
  std::string resume_id;
  std::int64_t at_ms = 0;

  bool operator==(const payload_record&) const = default;
};

// Column family `inbox`, key: (tenant, token, 2, resume id): the answer a
// resume with that id got, so a retried resume is not recorded twice.
struct resume_record {
  std::uint64_t sequence = 0;
  std::string owner_run;

  bool operator==(const resume_record&) const = default;
};

}  // namespace durin::persistence
