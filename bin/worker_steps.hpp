// The example flows whose steps run in remote workers (issue 5): a node
// registers them to queue the steps, `durin worker` (and the Python example
// worker) to run them. Same registry in both processes.
//
// | flow              | input              | steps (task queue)            |
// | acme.remote-echo  | {"count","value"}  | count x remote-echo (workers) |
// | acme.pay          | {"orderId","charges"} | charges x charge (payments) |
// | acme.session      | {"steps",...}      | steps x session-step (sessions) |
//
// `charge` posts {key: step_id, attemptId, orderId} to the payment service
// at $DURIN_PAYMENT_URL (tests/gateway/worker_test.cpp runs one) after
// $DURIN_CHARGE_DELAY_MS; its start-to-close timeout is
// $DURIN_CHARGE_TIMEOUT_MS (default 10 s), so a killed worker's attempt is
// delivered again after that. Tests make every $DURIN_CHARGE_SLOW_EVERY-th
// charge of a worker wait $DURIN_CHARGE_SLOW_MS first (past its lease).
// `session-step` heartbeats through its delay; its heartbeat timeout is
// $DURIN_SESSION_HEARTBEAT_MS (default 10 s), after which a killed
// worker's session fails.
#pragma once

#include "durin/registry.hpp"

namespace durin::examples {

void register_worker_steps(registry& flows);

}  // namespace durin::examples
