// The worker routes across the nodes of a cluster. A node's task service
// holds only the attempts of the runs it serves (services/task_service.hpp),
// so a worker that polls or reports to any one node must reach the others'
// tasks; worker_api.hpp says what each route means on one node, and this
// adds only where it is answered:
//
//   - a single report or heartbeat (POST /v1/tasks/{attemptId}/...) is not
//     here: its attempt id names its run (actors/attempt_id.hpp), so the
//     api's placement step forwards it to the run's node like any request
//     for a run; fencing stays with the attempt, on that node;
//   - a batched report (POST /v1/tasks/report) is checked whole, then split
//     by the shard of each attempt's run: the items of shards served here
//     go to the local task service, those of each other shard are
//     forwarded to its owner as one batch of their own, and the answers
//     merge into one result per item, in the order sent. An item whose
//     shard has no owner is answered {"attemptId", "code":
//     "shard-unavailable", "shard", "message"} (nothing recorded: send it
//     again), an item whose forward failed with that answer's code; the
//     other items stand;
//   - a poll (POST /v1/task-queues/{queue}/poll) visits the sources, this
//     node's task service and each other serving node (a forwarded poll
//     with waitMs 0), in an order rotated per poll so that no node's
//     tasks wait behind another's, each asked for what is still missing
//     of maxTasks, and is answered once a round found any. A round that
//     found none parks the poll here, in slices of at most
//     `poll_slice_ms`, and starts a round again after each slice until
//     waitMs ends: a task enqueued here is handed out at once, one
//     enqueued on another node within one slice (plus the round's
//     forwards). A task keeps the lease of the node that claimed it; its
//     reports reach that node by its attempt id;
//   - a repeated pollRequestId: each node dedupes the poll ids it claimed
//     for (a repeat gets back what the poll still holds there), and this
//     node remembers, for its last `poll_origins_max` polls answered with
//     tasks of other nodes, which nodes those were. A poll whose id this
//     node holds tasks of, or remembers, is a repeat: only those sources
//     are asked, so it gets back every task the lost answer held and no
//     node claims anything new for it (unless all of them ended: then it
//     is a fresh poll). Sent to another node, a repeat finds only what
//     that node holds; other nodes' leases of it run out and their tasks
//     are delivered again (at least once, as after any lost answer);
//   - the tasks view (GET /v1/tasks) merges every serving node's view for
//     the caller's tenant: tasks tagged with their "node", queues united,
//     counters summed, "nodes" that answered and "unansweredNodes" that
//     did not (their tasks are missing). GET /v1/tasks?runId= is the run's
//     and is forwarded to its node by the placement step.
//
// A forwarded request (another node took it first) is never spread again.
// A peer that does not answer holds a poll or a batch up to the forward's
// deadline (cluster/peers.hpp); a forwarded poll whose answer is lost may
// have claimed tasks: their leases run out and they are delivered again.
//
// Thread-safety: any thread; nothing blocks. Answers come from whichever
// thread learns the last part: an io thread, a run actor's (a report
// recorded, a task enqueued), the task service's expiry thread or the peers'
// forwarder. Limits: one round asks each other node once; remembered
// polls `poll_origins_max`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "client/http_message.hpp"
#include "durin/runtime.hpp"
#include "gateway/auth.hpp"
#include "gateway/http_server.hpp"
#include "gateway/placement.hpp"
#include "gateway/worker_api.hpp"

namespace durin::gateway {

// The longest a parked poll waits before it asks the other nodes again.
inline constexpr std::int64_t poll_slice_ms = 1000;
// Polls answered with other nodes' tasks whose sources a node remembers,
// for repeats of their pollRequestId (the oldest forgotten first).
inline constexpr std::size_t poll_origins_max = 4096;

class worker_routing {
 public:
  // REQUIRES: `node` and `where` outlive every request taken.
  worker_routing(runtime& node, placement& where);
  ~worker_routing();

  worker_routing(const worker_routing&) = delete;
  worker_routing& operator=(const worker_routing&) = delete;

  // Takes a worker request whose answer spans nodes (a batched report with
  // items of another node's shards, a poll, the tasks view) and answers it
  // through `reply`, exactly once, from any thread; returns false, leaving
  // `reply` alone, for a request this node answers by itself (worker_api).
  // `work` is the request as the worker routes read it, `http` and
  // `caller` what a forward to another node carries; `forwarded`: another
  // node took it first. REQUIRES: the caller is authenticated, the body
  // parsed, and the route is a worker route.
  bool take(const worker_request& work, const wire::http_request& http,
            const principal& caller, bool forwarded, reply_fn& reply);

  struct state;  // worker_routing.cpp only

 private:
  std::shared_ptr<state> state_;
};

}  // namespace durin::gateway
