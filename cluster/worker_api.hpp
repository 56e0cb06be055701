// The HTTP routes of remote workers and of the operators' task view. The
// api (cluster/api.hpp) hands them every request under /v1/tasks and
// /v1/task-queues once the caller is authenticated and the body parsed:
//
//   POST /v1/task-queues/{queue}/poll   {workerId, pollRequestId?, waitMs?}
//   POST /v1/tasks/{attemptId}/complete {workerId, result}
//   POST /v1/tasks/{attemptId}/fail     {workerId, message, retryable?,
//                                        retryAfterMs?}
//   POST /v1/tasks/{attemptId}/heartbeat {workerId, message?, current?,
//                                         total?}
//   GET  /v1/tasks                      live attempts, queues, counters
//   GET  /v1/tasks?runId=ID             the run's attempts and refusals
//
// Fencing: a report is taken only from the attempt's lease owner. A report
// that comes late (the attempt ended, lost its lease, or its run was
// cancelled) is 200 {"recorded": false, "reason"} and changes nothing: not
// a failure. A report from the wrong worker, or for an attempt nobody
// claimed, is 409 {"code": "lease-conflict", "reason": "wrong_owner" |
// "not_claimed"}. A complete is answered only once the outcome is durable.
//
// Thread-safety: call from gateway worker threads; poll blocks up to its
// waitMs (at most 60 s), complete up to the run's write.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cluster/http_message.hpp"
#include "durin/json.hpp"
#include "durin/runtime.hpp"

namespace durin::cluster {

struct worker_request {
  std::string tenant;
  std::string method;
  std::vector<std::string> path;  // decoded segments, path[0] == "v1"
  std::multimap<std::string, std::string> query;
  json body;  // parsed; {} when empty
};

// True for paths the worker routes own.
bool is_worker_route(const std::vector<std::string>& path);

http_response handle_worker_route(runtime& node, const worker_request& request);

// Prometheus lines for the task service: stuck leases, tasks waiting on a
// queue nobody polls, redeliveries, refused reports.
std::string task_metrics(runtime& node);

}  // namespace durin::cluster
