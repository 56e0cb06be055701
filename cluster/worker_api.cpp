#include "cluster/worker_api.hpp"

#include <chrono>
#include <future>
#include <memory>

#include "actors/task_service.hpp"
#include "cluster/api.hpp"
#include "cluster/idempotency.hpp"

namespace durin::cluster {

namespace {

constexpr std::size_t worker_id_bytes_max = 128;
constexpr std::size_t poll_id_bytes_max = 128;
constexpr std::size_t queue_bytes_max = 128;
constexpr std::size_t message_bytes_max = 4096;
constexpr std::int64_t poll_wait_ms_default = 20'000;
constexpr std::int64_t poll_wait_ms_max = 60'000;
constexpr auto record_wait = std::chrono::seconds(30);
constexpr std::size_t list_max = 1000;

// The string field `name`, 1..max bytes; nullopt after filling `problem`.
std::optional<std::string> text_field(const json& body, const char* name,
                                      std::size_t max, bool required,
                                      std::optional<http_response>& problem) {
  if (!body.contains(name)) {
    if (required) {
      problem = bad_request(std::string("field '") + name + "' is required");
    }
    return std::nullopt;
  }
  const auto& value = body[name];
  if (!value.is_string() || value.get_ref<const std::string&>().empty() ||
      value.get_ref<const std::string&>().size() > max) {
    problem = bad_request(std::string("field '") + name +
                          "' must be a string of 1 to " + std::to_string(max) +
                          " bytes");
    return std::nullopt;
  }
  return value.get<std::string>();
}

std::optional<http_response> only_fields(
    const json& body, std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, value] : body.items()) {
    (void)value;
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string names;
      for (auto name : allowed) {
        names += (names.empty() ? "" : ", ") + std::string(name);
      }
      return bad_request("unknown field '" + key + "'; allowed: " + names);
    }
  }
  return std::nullopt;
}

std::optional<std::int64_t> int_field(const json& body, const char* name,
                                      std::int64_t min, std::int64_t max,
                                      std::optional<http_response>& problem) {
  if (!body.contains(name)) {
    return std::nullopt;
  }
  const auto& value = body[name];
  if (!value.is_number_integer() || value.get<std::int64_t>() < min ||
      value.get<std::int64_t>() > max) {
    problem = bad_request(std::string("field '") + name +
                          "' must be an integer from " + std::to_string(min) +
                          " to " + std::to_string(max));
    return std::nullopt;
  }
  return value.get<std::int64_t>();
}

json task_json(const actors::claimed_task& task) {
  const auto& spec = task.spec;
  return {{"attemptId", spec.attempt_id},
          {"attempt", spec.attempt},
          {"stepId", spec.step_id},
          {"stepName", spec.step_name},
          {"runId", spec.run_id},
          {"instanceId", spec.instance_id},
          {"taskQueue", spec.task_queue},
          {"args", spec.args},
          {"leaseOwner", task.owner},
          {"leaseExpiresAtMs", task.lease_expires_ms},
          {"heartbeatTimeoutMs", spec.timeouts.heartbeat.count()},
          {"startToCloseTimeoutMs", spec.timeouts.start_to_close.count()}};
}

// A refusal that is not the caller's fault is 200 recorded:false; a fencing
// violation (another worker's lease, nobody's lease) is 409.
std::optional<http_response> refusal(actors::report_verdict verdict,
                                     const std::string& attempt_id,
                                     bool heartbeat) {
  using actors::report_verdict;
  switch (verdict) {
    case report_verdict::accepted:
      return std::nullopt;
    case report_verdict::wrong_owner:
    case report_verdict::not_claimed: {
      auto response = error_response(
          409, "lease-conflict",
          verdict == report_verdict::wrong_owner
              ? "attempt " + attempt_id + " is leased to another worker"
              : "attempt " + attempt_id + " is not claimed by any worker");
      auto body = json::parse(response.body);
      body["reason"] = actors::to_string(verdict);
      response.body = body.dump();
      return response;
    }
    default:
      break;
  }
  json body = {{"reason", actors::to_string(verdict)}};
  body[heartbeat ? "continue" : "recorded"] = false;
  return json_response(200, body);
}

http_response poll(actors::task_service& tasks, const worker_request& request,
                   const std::string& queue) {
  if (auto problem =
          only_fields(request.body, {"workerId", "pollRequestId", "waitMs"})) {
    return *problem;
  }
  if (queue.empty() || queue.size() > queue_bytes_max) {
    return bad_request("a task queue name is 1 to 128 bytes");
  }
  std::optional<http_response> problem;
  auto worker =
      text_field(request.body, "workerId", worker_id_bytes_max, true, problem);
  auto poll_id = text_field(request.body, "pollRequestId", poll_id_bytes_max,
                            false, problem);
  auto wait_ms =
      int_field(request.body, "waitMs", 0, poll_wait_ms_max, problem);
  if (problem) {
    return *problem;
  }
  auto task = tasks.poll(request.tenant, queue, *worker, poll_id.value_or(""),
                         wait_ms.value_or(poll_wait_ms_default));
  if (!task) {
    return json_response(200, {{"task", nullptr}});
  }
  return json_response(200, {{"task", task_json(*task)}});
}

http_response report(actors::task_service& tasks, const worker_request& request,
                     const std::string& attempt_id, bool completed) {
  // Two calls: an initializer_list chosen by ?: would dangle.
  auto unknown = completed
                     ? only_fields(request.body, {"workerId", "result"})
                     : only_fields(request.body, {"workerId", "message",
                                                  "retryable", "retryAfterMs"});
  if (unknown) {
    return *unknown;
  }
  std::optional<http_response> problem;
  auto worker =
      text_field(request.body, "workerId", worker_id_bytes_max, true, problem);
  actors::step_outcome outcome;
  if (completed) {
    outcome.value = request.body.value("result", json());
  } else {
    auto message =
        text_field(request.body, "message", message_bytes_max, false, problem);
    auto after =
        int_field(request.body, "retryAfterMs", 0, 86'400'000, problem);
    if (request.body.contains("retryable") &&
        !request.body["retryable"].is_boolean()) {
      problem = bad_request("field 'retryable' must be a boolean");
    }
    bool retryable = !request.body.contains("retryable") ||
                     request.body["retryable"] == json(true);
    outcome.result = retryable ? actors::step_outcome::kind::retryable
                               : actors::step_outcome::kind::fatal;
    outcome.message = message.value_or("the worker reported a failure");
    outcome.retry_after_ms = after.value_or(-1);
  }
  if (problem) {
    return *problem;
  }
  auto answer = std::make_shared<std::promise<actors::report_answer>>();
  auto future = answer->get_future();
  auto reply = [answer](actors::report_answer recorded) {
    answer->set_value(std::move(recorded));
  };
  auto verdict = tasks.report(request.tenant, attempt_id, *worker,
                              std::move(outcome), std::move(reply));
  if (auto refused = refusal(verdict, attempt_id, false)) {
    return *refused;
  }
  if (future.wait_for(record_wait) != std::future_status::ready) {
    // Indefinite: the outcome may still be recorded.
    return error_response(503, "storage-error",
                          "the outcome was not confirmed in time; the run "
                          "may or may not have recorded it");
  }
  auto recorded = future.get();
  json body = {{"recorded", recorded.recorded}};
  if (!recorded.recorded) {
    body["reason"] = recorded.reason;
  }
  return json_response(200, body);
}

http_response heartbeat(actors::task_service& tasks,
                        const worker_request& request,
                        const std::string& attempt_id) {
  if (auto problem = only_fields(request.body,
                                 {"workerId", "message", "current", "total"})) {
    return *problem;
  }
  std::optional<http_response> problem;
  auto worker =
      text_field(request.body, "workerId", worker_id_bytes_max, true, problem);
  auto message =
      text_field(request.body, "message", message_bytes_max, false, problem);
  auto current = int_field(request.body, "current", 0, INT64_MAX, problem);
  auto total = int_field(request.body, "total", 0, INT64_MAX, problem);
  if (problem) {
    return *problem;
  }
  step_progress progress{message.value_or(""), current.value_or(-1),
                         total.value_or(-1)};
  auto answer = tasks.heartbeat(request.tenant, attempt_id, *worker, progress);
  if (auto refused = refusal(answer.verdict, attempt_id, true)) {
    return *refused;
  }
  return json_response(200, {{"continue", answer.go_on},
                             {"leaseExpiresAtMs", answer.lease_expires_ms}});
}

http_response list(actors::task_service& tasks, const worker_request& request) {
  auto run = request.query.find("runId");
  if (run != request.query.end()) {
    auto transport = tasks.transport_of(run->second);
    json attempts = json::array();
    for (const auto& view : transport.attempts) {
      if (view.tenant == request.tenant) {
        attempts.push_back(view.to_json());
      }
    }
    json refused = json::array();
    if (!attempts.empty()) {
      for (const auto& entry : transport.refused) {
        refused.push_back(entry.to_json());
      }
    }
    return json_response(200, {{"runId", run->second},
                               {"attempts", attempts},
                               {"refusedReports", refused}});
  }
  json live = json::array();
  for (const auto& view : tasks.list(request.tenant, list_max)) {
    live.push_back(view.to_json());
  }
  auto stats = tasks.stats();
  return json_response(200, {{"tasks", live},
                             {"queues", tasks.queues(request.tenant)},
                             {"stats",
                              {{"queued", stats.queued},
                               {"running", stats.running},
                               {"stuckLeases", stats.stuck_leases},
                               {"queuedUnpolled", stats.queued_unpolled},
                               {"completed", stats.completed},
                               {"redeliveries", stats.redeliveries},
                               {"refusedReports", stats.refused_reports}}}});
}

}  // namespace

bool is_worker_route(const std::vector<std::string>& path) {
  return path.size() >= 2 && path[0] == "v1" &&
         (path[1] == "tasks" || path[1] == "task-queues");
}

http_response handle_worker_route(runtime& node,
                                  const worker_request& request) {
  auto& tasks = node.tasks();
  const auto& p = request.path;
  const auto& method = request.method;
  auto not_allowed = [&] {
    return error_response(405, "method-not-allowed",
                          method + " is not allowed here");
  };
  if (p[1] == "task-queues" && p.size() == 4 && p[3] == "poll") {
    return method == "POST" ? poll(tasks, request, p[2]) : not_allowed();
  }
  if (p[1] == "tasks" && p.size() == 2) {
    return method == "GET" ? list(tasks, request) : not_allowed();
  }
  if (p[1] == "tasks" && p.size() == 4) {
    if (method != "POST") {
      return not_allowed();
    }
    if (p[3] == "complete" || p[3] == "fail") {
      return report(tasks, request, p[2], p[3] == "complete");
    }
    if (p[3] == "heartbeat") {
      return heartbeat(tasks, request, p[2]);
    }
  }
  return error_response(404, "not-found", "no such task route");
}

std::string task_metrics(runtime& node) {
  auto stats = node.tasks().stats();
  std::string text;
  text +=
      "# HELP durin_task_leases_stuck running attempts with no heartbeat "
      "for over a minute.\n";
  text +=
      "durin_task_leases_stuck " + std::to_string(stats.stuck_leases) + "\n";
  text +=
      "# HELP durin_tasks_queued_unpolled attempts waiting on a queue no "
      "worker polled for 30 s.\n";
  text += "durin_tasks_queued_unpolled " +
          std::to_string(stats.queued_unpolled) + "\n";
  text += "durin_tasks_queued " + std::to_string(stats.queued) + "\n";
  text += "durin_tasks_running " + std::to_string(stats.running) + "\n";
  text +=
      "# HELP durin_task_redeliveries_total attempts ended by a timeout and "
      "delivered again.\n";
  text += "durin_task_redeliveries_total " +
          std::to_string(stats.redeliveries) + "\n";
  text += "durin_task_reports_refused_total " +
          std::to_string(stats.refused_reports) + "\n";
  return text;
}

}  // namespace durin::cluster
