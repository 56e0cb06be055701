// What the worker routes' two files share, and nothing else includes:
// worker_api.cpp (polls, heartbeats, the tasks view, routing) defines the
// field checks and lease-conflict texts; worker_reports.cpp (complete, fail
// and batched reports, answered once the runs recorded them) defines the
// report routes. Any thread; nothing here blocks.
#pragma once

#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "durin/json.hpp"
#include "gateway/http_server.hpp"
#include "gateway/worker_api.hpp"
#include "services/task_service.hpp"

namespace durin::gateway::worker_detail {

// The lease owner a request speaks for: its workerId, within the caller's
// key when that is a worker key, so one worker key can neither report for
// nor heartbeat a task another key claimed, whatever workerId it sends.
std::optional<std::string> lease_owner(const worker_request& request,
                                       std::optional<std::string> worker_id);

// The string field `name`, 1..max bytes; nullopt after filling `problem`.
// `where` names the object in messages ("" for the body, "reports[2].").
std::optional<std::string> text_field(const json& body, const char* name,
                                      std::size_t max, bool required,
                                      std::optional<http_response>& problem,
                                      const std::string& where = {});

// 400 naming the first field not in `allowed` (listed in the given order).
std::optional<http_response> only_fields(
    const json& body, std::initializer_list<std::string_view> allowed,
    const std::string& where = {});

// The integer field `name`, min..max; nullopt when absent, or after filling
// `problem`.
std::optional<std::int64_t> int_field(const json& body, const char* name,
                                      std::int64_t min, std::int64_t max,
                                      std::optional<http_response>& problem,
                                      const std::string& where = {});

// wrong_owner and not_claimed: a fencing violation, 409 lease-conflict.
bool is_conflict(services::report_verdict verdict);
std::string lease_conflict_message(services::report_verdict verdict,
                                   const std::string& attempt_id);

// What an unconfirmed outcome is told (503 storage-error): indefinite.
inline constexpr const char* indefinite_message =
    "the outcome was not confirmed; the run may or may not have recorded it";

// POST /v1/tasks/{attemptId}/complete|fail: a batch of one.
void report_one(services::task_service& tasks, const worker_request& request,
                const std::string& attempt_id, bool completed,
                std::function<void(http_response)> reply);

// POST /v1/tasks/report: every item is checked before any is sent, so bad
// input changes nothing.
void report_many(services::task_service& tasks, const worker_request& request,
                 std::function<void(http_response)> reply);

}  // namespace durin::gateway::worker_detail
