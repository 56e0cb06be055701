// What the worker routes' files share, and nothing else includes:
// worker_api.cpp (polls, heartbeats, the tasks view, routing) defines the
// field checks, the poll's fields and answers and the lease-conflict texts;
// worker_reports.cpp (complete, fail and batched reports, answered once the
// runs recorded them) defines the report routes; worker_routing.cpp (the
// routes across a cluster's nodes) checks requests with them before it
// splits or forwards anything. Any thread; nothing here blocks.
#pragma once

#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

// A poll's wait when it names none.
inline constexpr std::int64_t poll_wait_ms_default = 20'000;

// A poll's fields (POST /v1/task-queues/{queue}/poll), checked.
struct poll_fields {
  std::string worker;     // the lease owner it claims for (lease_owner)
  std::string worker_id;  // as the body sent it
  std::string poll_id;    // "" when none
  std::int64_t wait_ms = poll_wait_ms_default;
  std::size_t max_tasks = 1;
  bool batched = false;  // maxTasks given: answered {"tasks": [...]}
};
// nullopt after filling `problem` (400 naming the field).
std::optional<poll_fields> read_poll(const worker_request& request,
                                     const std::string& queue,
                                     std::optional<http_response>& problem);

// A claimed task as a worker gets it; a list of them as a JSON array.
json task_json(const services::claimed_task& task);
json tasks_json(const std::vector<services::claimed_task>& claimed);
// A poll's answer: {"task": T | null}, or {"tasks": [...]} when batched.
// `tasks` is a JSON array of task_json.
http_response poll_answer(bool batched, json tasks);
// 429 too-many-polls with Retry-After: the tenant has its long polls
// parked.
http_response too_many_polls(std::size_t parked_polls_max);

// What an unconfirmed outcome is told (503 storage-error): indefinite.
inline constexpr const char* indefinite_message =
    "the outcome was not confirmed; the run may or may not have recorded it";

// POST /v1/tasks/{attemptId}/complete|fail: a batch of one.
void report_one(services::task_service& tasks, const worker_request& request,
                const std::string& attempt_id, bool completed,
                std::function<void(http_response)> reply);

// The 400 a batched report's body is answered with, naming its first
// problem; nullopt when report_many would send every item.
std::optional<http_response> check_reports(const worker_request& request);

// POST /v1/tasks/report: every item is checked before any is sent, so bad
// input changes nothing.
void report_many(services::task_service& tasks, const worker_request& request,
                 std::function<void(http_response)> reply);

}  // namespace durin::gateway::worker_detail
