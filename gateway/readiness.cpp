#include "gateway/readiness.hpp"

#include <nlohmann/json.hpp>

#include "persistence/store.hpp"
#include "services/node.hpp"
#include "services/runtime_access.hpp"

namespace durin::gateway {

wire::http_response readiness_response(runtime& node) {
  const auto health = runtime_access::services(node).health();
  wire::http_response response;
  nlohmann::json body;
  if (health.ready) {
    response.status = 200;
    body = {{"status", "ready"}};
  } else {
    response.status = 503;
    body = {{"code", "storage-unavailable"},
            {"message", "writes are refused: " + health.fault +
                            "; the node recovers by itself once the cause "
                            "is gone"},
            {"notReadyMs", health.not_ready_ms}};
  }
  response.body = body.dump();
  return response;
}

std::string storage_metrics(runtime& node) {
  const auto health = runtime_access::services(node).health();
  std::string text;
  text +=
      "# HELP durin_storage_ready 1 while the node's store takes writes, 0 "
      "while a storage fault keeps it closed.\n"
      "# TYPE durin_storage_ready gauge\n"
      "durin_storage_ready " +
      std::string(health.ready ? "1" : "0") + "\n";
  text +=
      "# HELP durin_storage_faults_total Storage faults that made the store "
      "not ready.\n"
      "# TYPE durin_storage_faults_total counter\n"
      "durin_storage_faults_total " +
      std::to_string(health.faults) + "\n";
  text +=
      "# HELP durin_storage_reopens_total Reopens of the database that made "
      "the store ready again.\n"
      "# TYPE durin_storage_reopens_total counter\n"
      "durin_storage_reopens_total " +
      std::to_string(health.reopens) + "\n";
  return text;
}

}  // namespace durin::gateway
