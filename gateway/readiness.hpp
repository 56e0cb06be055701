// Readiness of a node: GET /readyz and the storage lines of GET /metrics.
// `/healthz` answers whether the process serves at all (liveness); `/readyz`
// whether writes work now: 200 {"status": "ready"} while the node's store is
// ready, else 503 {"code": "storage-unavailable", "message": ...} naming the
// fault in plain words (never a path). Both read an atomic state and never
// block: they may be answered on the io thread.
#pragma once

#include <string>

#include "client/http_message.hpp"
#include "durin/runtime.hpp"

namespace durin::gateway {

wire::http_response readiness_response(runtime& node);

// durin_storage_ready (gauge, 1 or 0), durin_storage_faults_total and
// durin_storage_reopens_total (counters since the process started).
std::string storage_metrics(runtime& node);

}  // namespace durin::gateway
