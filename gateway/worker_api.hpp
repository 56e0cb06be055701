// The HTTP routes of remote workers and of the operators' task view. The
// api (gateway/api.hpp) hands them every request under /v1/tasks and
// /v1/task-queues once the caller is authenticated and the body parsed:
//
//   POST /v1/task-queues/{queue}/poll   {workerId, pollRequestId?, waitMs?,
//                                        maxTasks?}
//   POST /v1/tasks/report               {workerId, reports: [{attemptId,
//                                        outcome: "complete" | "fail",
//                                        result? | message?, retryable?,
//                                        retryAfterMs?}]}
//   POST /v1/tasks/{attemptId}/complete {workerId, result}
//   POST /v1/tasks/{attemptId}/fail     {workerId, message, retryable?,
//                                        retryAfterMs?}
//   POST /v1/tasks/{attemptId}/heartbeat {workerId, message?, current?,
//                                         total?}
//   GET  /v1/tasks                      the tenant's live attempts, queues,
//                                        counters; an admin's also the node's
//   GET  /v1/tasks?runId=ID             the run's attempts and refusals
//
// A poll without maxTasks answers {"task": T | null}; with maxTasks (1 to
// 256) it claims up to that many and answers {"tasks": [...]}. A batched
// report answers {"results": [...]}, one per report in order, once every
// outcome it recorded is durable; complete and fail are a batch of one.
//
// Fencing: a report is taken only from the attempt's lease owner. A report
// that comes late (the attempt ended, lost its lease, or its run was
// cancelled) is 200 {"recorded": false, "reason"} and changes nothing: not
// a failure. A report from the wrong worker, or for an attempt nobody
// claimed, is 409 {"code": "lease-conflict", "reason": "wrong_owner" |
// "not_claimed"} (in a batch: that item's result; the others stand). A
// report is answered only once the outcome is durable.
//
// A poll that finds its queue empty waits without a thread (parked in the
// task service, services/task_service.hpp): it is answered when a task
// comes, at the end of its waitMs, or at once when the node stops. A tenant
// may have `parked_polls_max` polls waiting; one more is 429
// `too-many-polls` with Retry-After: 1.
//
// In a cluster these routes answer for this node's task service only,
// which holds the attempts of the runs this node serves; the api spreads
// them over the nodes first (gateway/worker_routing.hpp): a report or
// heartbeat of one attempt is forwarded to the node serving the attempt's
// run (the attempt id names it) and fenced there; a batched report is split
// by its items' shards, a poll visits every serving node and parks here in
// slices of at most 1 s between rounds (a task enqueued on another node is
// handed out within about a slice), and GET /v1/tasks merges every node's
// view, tagging each task with its "node" and naming "unansweredNodes".
//
// Thread-safety: any thread. handle_worker_route blocks (a poll up to its
// waitMs, at most 60 s; a report up to the run's write): call it from
// gateway worker threads. answer_worker_route never blocks.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "client/http_message.hpp"
#include "durin/json.hpp"
#include "durin/runtime.hpp"

namespace durin::gateway {

using wire::http_request;
using wire::http_response;

struct worker_request {
  std::string tenant;
  std::string method;
  std::vector<std::string> path;  // decoded segments, path[0] == "v1"
  std::multimap<std::string, std::string> query;
  json body;  // parsed; {} when empty
  // Long polls the tenant may have waiting at once; one more is 429
  // too-many-polls.
  std::size_t parked_polls_max = 256;
  bool admin = false;  // the caller's key is an admin key
  // For a worker key: its id and '/', put before every workerId it sends,
  // so its leases are its own (empty for other roles).
  std::string owner_prefix;
};

// True for paths the worker routes own.
bool is_worker_route(const std::vector<std::string>& path);

http_response handle_worker_route(runtime& node, const worker_request& request);

// Never blocks: `reply` is called exactly once: at once; for a report once
// its outcomes are durable, from the run actor's thread; for a parked poll
// from the thread that enqueued its task, the task service's expiry
// thread, or the one that stops the node. `reply` must not block.
void answer_worker_route(runtime& node, const worker_request& request,
                         std::function<void(http_response)> reply);

// Prometheus lines for the task service: stuck leases, tasks waiting on a
// queue nobody polls, redeliveries, refused reports.
std::string task_metrics(runtime& node);

}  // namespace durin::gateway
