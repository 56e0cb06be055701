#include "gateway/metrics.hpp"

#include "durin/run.hpp"

namespace durin::gateway {

namespace {

constexpr std::array<std::string_view, 13> route_names = {
    "health",  "metrics",  "start", "get_run",  "list_runs",
    "history", "cancel",   "hooks", "webhooks", "api_keys",
    "tenants", "messages", "other"};

}  // namespace

void metrics::observe(route which, unsigned status, std::int64_t latency_us) {
  auto klass = std::min<std::size_t>(status / 100, status_classes - 1);
  requests_[static_cast<std::size_t>(which)][klass].fetch_add(
      1, std::memory_order_relaxed);
  latency_.observe(latency_us);
}

void metrics::count_run_status(std::string_view status) {
  if (auto parsed = parse_run_status(status)) {
    run_status_[static_cast<std::size_t>(*parsed)].fetch_add(
        1, std::memory_order_relaxed);
  }
}

std::string metrics::render(const std::string& extra) const {
  std::string out;
  out += "# HELP durin_http_requests_total HTTP requests answered.\n";
  out += "# TYPE durin_http_requests_total counter\n";
  for (std::size_t r = 0; r < route_count; ++r) {
    for (std::size_t k = 1; k < status_classes; ++k) {
      auto value = requests_[r][k].load(std::memory_order_relaxed);
      if (value == 0) {
        continue;
      }
      out += "durin_http_requests_total{route=\"" +
             std::string(route_names[r]) + "\",status=\"" + std::to_string(k) +
             "xx\"} " + std::to_string(value) + "\n";
    }
  }
  latency_.render(out, "durin_http_request_duration_seconds",
                  "Request latency.");
  out += "# TYPE durin_runs_started_total counter\n";
  out += "durin_runs_started_total " + std::to_string(starts_.load()) + "\n";
  out +=
      "# HELP durin_waited_starts_handed_over_total Waited starts answered "
      "by a gateway worker (their run took over a second to settle).\n";
  out += "# TYPE durin_waited_starts_handed_over_total counter\n";
  out += "durin_waited_starts_handed_over_total " +
         std::to_string(hand_overs_.load()) + "\n";
  out += "# TYPE durin_idempotent_replays_total counter\n";
  out += "durin_idempotent_replays_total " + std::to_string(replays_.load()) +
         "\n";
  out += "# TYPE durin_idempotent_refusals_total counter\n";
  out += "durin_idempotent_refusals_total " + std::to_string(refusals_.load()) +
         "\n";
  out +=
      "# HELP durin_run_waits Long polls of a run (GET /v1/runs/{id}?waitMs=) "
      "waiting for its end now.\n";
  out += "# TYPE durin_run_waits gauge\n";
  out += "durin_run_waits " + std::to_string(run_waits_.load()) + "\n";
  out +=
      "# HELP durin_run_answers_total Runs answered by the API, by the "
      "status they had.\n";
  out += "# TYPE durin_run_answers_total counter\n";
  for (std::size_t s = 1; s < run_status_.size(); ++s) {
    out += "durin_run_answers_total{status=\"" +
           std::string(to_string(static_cast<run_status>(s))) + "\"} " +
           std::to_string(run_status_[s].load()) + "\n";
  }
  out += extra;
  return out;
}

}  // namespace durin::gateway
