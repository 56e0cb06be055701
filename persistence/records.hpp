// The records durin keeps, as plain values: what persistence/codec.hpp turns
// into bytes and persistence/store.hpp reads back. Layouts byte by byte are in
// persistence/README.md. Payload fields (`input`, `output`, `data`) hold
// MessagePack bytes that the engine treats as opaque.
#pragma once

#include <cstdint>
#include <string>

#include "durin/run.hpp"

namespace durin::persistence {

// Bumped when any key or value layout changes incompatibly; kept in `meta`.
inline constexpr std::uint32_t schema_version = 1;
// The spec version every new run records (behaviour version of the engine).
inline constexpr std::uint32_t spec_version = 1;

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
};
inline constexpr std::uint8_t event_kind_max = 10;

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

enum class timer_kind : std::uint8_t { sleep = 1, step_retry = 2 };

// Column family `timers`, key: (due, run id, call, kind); value: empty frame.
struct timer_record {
  std::int64_t due_ms = 0;
  std::string run_id;
  std::uint64_t call = 0;
  timer_kind kind = timer_kind::sleep;

  bool operator==(const timer_record&) const = default;
};

}  // namespace durin::persistence
