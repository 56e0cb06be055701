// The size limits of durin's inputs, in one place, with their units in their
// names. A request beyond a limit is refused with invalid-argument naming
// the limit; nothing is written. Where one limit must hold another, a
// static_assert says so.
//
// Durations and times too, wherever they enter: a flow's sleeps, retry
// policies and their delays, step timeouts, hook retention, the runtime's
// options, worker reports. Beyond them a call is refused (invalid-argument,
// or durin::invalid_argument_error in flow code) instead of computing a due
// time that overflows: a sleep of INT64_MAX ms once armed a timer in the past.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace durin::limits {

// A hook token, from the caller's domain (start hooks, create_hook).
inline constexpr std::size_t token_bytes_max = 256;
// An instance id, or a start's, cancel's or terminate's command id.
inline constexpr std::size_t identity_bytes_max = 200;
// A resume's id (its command id): kept in its token's record, never made a
// start token, so it may be as long as a token.
inline constexpr std::size_t resume_id_bytes_max = token_bytes_max;
// Instance and command ids become start tokens in a reserved namespace:
// a mark byte, a kind byte and ':' before the id.
inline constexpr std::size_t identity_token_prefix_bytes = 3;
static_assert(identity_bytes_max + identity_token_prefix_bytes <=
                  token_bytes_max,
              "an instance or command id must fit in a start token");

inline constexpr std::size_t run_id_bytes_max = 128;
inline constexpr std::size_t flow_name_bytes_max = 128;
inline constexpr std::size_t tenant_bytes_max = 128;
// A run's input and a hook payload, as encoded for storage.
inline constexpr std::size_t payload_bytes_max = 1 << 20;
// A hook's metadata, as encoded.
inline constexpr std::size_t metadata_bytes_max = 64 << 10;

// A run's memo, as encoded (MessagePack).
inline constexpr std::size_t memo_bytes_max = 64 << 10;
// A run's search attributes (durin/search.hpp): how many, a name, a
// keyword's value; and the names one tenant may use on a node.
inline constexpr std::size_t search_attributes_max = 64;
inline constexpr std::size_t search_attribute_name_bytes_max = 128;
inline constexpr std::size_t search_keyword_bytes_max = 1024;
inline constexpr std::size_t search_attribute_names_per_tenant_max = 1024;
// A list's query (GET /v1/runs?query=): its text, its comparisons, the
// values of one IN, and how deep parentheses nest.
inline constexpr std::size_t query_bytes_max = 4096;
inline constexpr std::size_t query_comparisons_max = 64;
inline constexpr std::size_t query_in_values_max = 100;
inline constexpr std::size_t query_depth_max = 16;

// HTTP: one path segment (an id in a route), the body, an Idempotency-Key.
inline constexpr std::size_t path_segment_bytes_max = 256;
inline constexpr std::size_t request_body_bytes_max = 1 << 20;
inline constexpr std::size_t idempotency_key_bytes_max = 255;
static_assert(path_segment_bytes_max >= token_bytes_max &&
                  path_segment_bytes_max >= run_id_bytes_max &&
                  path_segment_bytes_max >= identity_bytes_max,
              "every id a route names must fit in one path segment");

// The reason given to a cancel or a terminate, kept in the run's error.
inline constexpr std::size_t reason_bytes_max = 4096;

// The name of an API key or a tenant (POST /v1/api-keys, /v1/tenants).
inline constexpr std::size_t key_name_bytes_max = 128;

// The worker routes (POST /v1/task-queues/{q}/poll, /v1/tasks/...): a
// worker id, a poll request id, a task queue's name, an attempt id as a
// worker sends it back, and a report's or heartbeat's message.
inline constexpr std::size_t worker_id_bytes_max = 128;
inline constexpr std::size_t poll_id_bytes_max = 128;
inline constexpr std::size_t task_queue_bytes_max = 128;
inline constexpr std::size_t attempt_id_bytes_max = 256;
inline constexpr std::size_t worker_message_bytes_max = 4096;
// A heartbeat's progress message as the task service keeps it (cut there).
inline constexpr std::size_t progress_message_bytes_max = 1024;
static_assert(progress_message_bytes_max <= worker_message_bytes_max,
              "a kept progress message is at most what a worker may send");
// How long one poll may wait, and how many tasks it may claim.
inline constexpr std::int64_t poll_wait_ms_max = 60'000;
inline constexpr std::size_t poll_tasks_max = 256;
// Reports in one POST /v1/tasks/report; the worker client sends at most
// this many at once.
inline constexpr std::size_t worker_reports_max = 256;
// Attempts in one GET /v1/tasks answer.
inline constexpr std::size_t tasks_list_max = 1000;

// The longest duration: 36,500 days (about 100 years), in milliseconds.
inline constexpr std::int64_t duration_ms_max = 36'500LL * 86'400'000;
// The latest absolute time (ctx.sleep_until, RFC 3339 retention times):
// 9999-12-31T23:59:59.999Z, in milliseconds since the Unix epoch. Times
// before the epoch are refused too.
inline constexpr std::int64_t time_ms_max = 253'402'300'799'999;
static_assert(time_ms_max + duration_ms_max < INT64_MAX / 2,
              "a due time (a time plus a duration) must never overflow");
// The most attempts a retry policy may ask for (retry_policy::max_attempts).
inline constexpr std::uint32_t retry_attempts_max = 1000;

// "" when 0 <= `ms` <= duration_ms_max; otherwise a message naming `what`
// ("ctx.sleep", "retry_policy.initial_backoff", ...), the value and the
// limit.
inline std::string duration_problem(std::string_view what, std::int64_t ms) {
  if (ms >= 0 && ms <= duration_ms_max) {
    return {};
  }
  std::string text(what);
  text += ms < 0 ? ": a duration of " + std::to_string(ms) + " ms is negative"
                 : ": a duration of " + std::to_string(ms) +
                       " ms is beyond the maximum of " +
                       std::to_string(duration_ms_max) + " ms (36500 days)";
  return text;
}

}  // namespace durin::limits
