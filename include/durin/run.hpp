// What the runtime tells about runs: status, the stored record, history
// events as shown to users, and list filters. Plain values; thread-safe to
// copy. Times are milliseconds since the Unix epoch (0 = not yet).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "durin/json.hpp"
#include "durin/search.hpp"

namespace durin {

// Durable run states. `blocked` is never stored: it is reported while a run's
// history no longer matches its flow's code (see run_info::blocked_reason).
enum class run_status : std::uint8_t {
  pending = 1,  // admitted, not yet executing
  running = 2,
  waiting = 3,  // suspended on a sleep, a hook or a step retry
  completed = 4,
  failed = 5,
  cancelled = 6,
  blocked = 7,
  // A forced stop that ran no cleanup (runtime::terminate).
  terminated = 8,
};

std::string_view to_string(run_status status) noexcept;
std::optional<run_status> parse_run_status(std::string_view text) noexcept;
bool is_terminal(run_status status) noexcept;

struct run_error {
  std::string code;  // e.g. "step-failed", "flow-error", "invalid-input"
  std::string message;
};

struct run_info {
  std::string id;
  // The business process the run belongs to: the instance id it was started
  // with, else its own id.
  std::string instance_id;
  std::string flow;
  run_status status = run_status::pending;
  json input;
  json output;                     // null until completed
  std::optional<run_error> error;  // set when failed or cancelled
  std::int64_t created_at_ms = 0;
  std::int64_t started_at_ms = 0;
  std::int64_t completed_at_ms = 0;
  std::string blocked_reason;  // non-empty iff status == blocked
  // The token of the hook the run was started with; empty without one (and
  // for a run started with an instance id).
  std::string start_token;
  // A run a schedule started: its id and the occurrence (the nominal firing
  // time) it was started for; empty and 0 otherwise.
  std::string schedule_id;
  std::int64_t occurrence_ms = 0;
  // A child run: the run that started it (ctx.start_child); empty else.
  std::string parent_run_id;
  // A run started by ctx.continue_as_new: the run it continues; empty else.
  std::string continued_from;
  // Set at start and by the flow (ctx.set_memo); null when none.
  json memo;
  // Set at start and by the flow (ctx.upsert_search_attributes).
  durin::search_attributes search_attributes;

  json to_json() const;  // {"id","flow","status","input","output",...}
};

// One recorded event, as shown to users. `sequence` starts at 1 and has no
// gaps; `kind` is e.g. "step-completed"; `detail` holds the event's fields.
struct history_event {
  std::uint64_t sequence = 0;
  std::string kind;
  std::int64_t at_ms = 0;
  json detail;

  json to_json() const;
};

struct run_filter {
  std::string tenant = "default";
  std::optional<run_status> status;
  std::optional<std::string> flow;
  std::optional<std::string> schedule_id;  // runs this schedule started
  // A query in the language of persistence/run_query.hpp, e.g.
  // "priority > 3 AND status IN ('running', 'waiting')"; empty: every run.
  // Evaluated in each store's scan, on this tenant's runs only. A query
  // that does not parse, or compares an attribute with a value of another
  // type, is invalid-argument naming the position.
  std::string query;
  std::size_t limit = 100;  // 1..1000
  std::string cursor;       // from a previous page's next_cursor
  // A page ends early, with a next_cursor, after the run that brings its
  // runs' stored records (input, output, error) to this many bytes; it
  // holds at least one run. 1 KiB..1 GiB.
  std::size_t page_bytes_max = 4 << 20;
};

struct run_page {
  std::vector<run_info> runs;  // newest first
  std::string next_cursor;     // empty on the last page
};

}  // namespace durin
