// The worker routes (gateway/worker_api.hpp): polls, heartbeats, the tasks
// view, routing by path and the task metrics; the field checks the report
// routes share (worker_detail.hpp). Reports are in worker_reports.cpp.
#include "gateway/worker_api.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>

#include "durin/ids.hpp"
#include "durin/limits.hpp"
#include "gateway/api.hpp"
#include "gateway/idempotency.hpp"
#include "gateway/worker_detail.hpp"
#include "services/node.hpp"
#include "services/runtime_access.hpp"
#include "services/task_service.hpp"

namespace durin::gateway {

namespace worker_detail {

std::optional<std::string> lease_owner(const worker_request& request,
                                       std::optional<std::string> worker_id) {
  if (!worker_id || request.owner_prefix.empty()) {
    return worker_id;
  }
  return request.owner_prefix + *worker_id;
}

std::optional<std::string> text_field(const json& body, const char* name,
                                      std::size_t max, bool required,
                                      std::optional<http_response>& problem,
                                      const std::string& where) {
  if (!body.contains(name)) {
    if (required && !problem) {
      problem = bad_request("field '" + where + name + "' is required");
    }
    return std::nullopt;
  }
  const auto& value = body[name];
  if (!value.is_string() || value.get_ref<const std::string&>().empty() ||
      value.get_ref<const std::string&>().size() > max) {
    if (!problem) {
      problem =
          bad_request("field '" + where + name + "' must be a string of 1 to " +
                      std::to_string(max) + " bytes");
    }
    return std::nullopt;
  }
  return value.get<std::string>();
}

std::optional<std::int64_t> int_field(const json& body, const char* name,
                                      std::int64_t min, std::int64_t max,
                                      std::optional<http_response>& problem,
                                      const std::string& where) {
  if (!body.contains(name)) {
    return std::nullopt;
  }
  const auto& value = body[name];
  if (!value.is_number_integer() || value.get<std::int64_t>() < min ||
      value.get<std::int64_t>() > max) {
    if (!problem) {
      problem =
          bad_request("field '" + where + name + "' must be an integer from " +
                      std::to_string(min) + " to " + std::to_string(max));
    }
    return std::nullopt;
  }
  return value.get<std::int64_t>();
}

bool is_conflict(services::report_verdict verdict) {
  return verdict == services::report_verdict::wrong_owner ||
         verdict == services::report_verdict::not_claimed;
}

std::string lease_conflict_message(services::report_verdict verdict,
                                   const std::string& attempt_id) {
  return verdict == services::report_verdict::wrong_owner
             ? "attempt " + attempt_id + " is leased to another worker"
             : "attempt " + attempt_id + " is not claimed by any worker";
}

std::optional<poll_fields> read_poll(const worker_request& request,
                                     const std::string& queue,
                                     std::optional<http_response>& problem) {
  if (auto unknown = only_fields(
          request.body, {"workerId", "pollRequestId", "waitMs", "maxTasks"})) {
    problem = std::move(unknown);
    return std::nullopt;
  }
  if (auto bad =
          id_problem("a task queue name", queue, limits::task_queue_bytes_max);
      !bad.empty()) {
    problem = bad_request(bad);
    return std::nullopt;
  }
  auto worker_id = text_field(request.body, "workerId",
                              limits::worker_id_bytes_max, true, problem);
  auto poll_id = text_field(request.body, "pollRequestId",
                            limits::poll_id_bytes_max, false, problem);
  auto wait_ms =
      int_field(request.body, "waitMs", 0, limits::poll_wait_ms_max, problem);
  auto max_tasks =
      int_field(request.body, "maxTasks", 1,
                static_cast<std::int64_t>(limits::poll_tasks_max), problem);
  if (problem) {
    return std::nullopt;
  }
  poll_fields out;
  out.worker = *lease_owner(request, worker_id);
  out.worker_id = std::move(*worker_id);
  out.poll_id = poll_id.value_or("");
  out.wait_ms = wait_ms.value_or(poll_wait_ms_default);
  out.max_tasks = static_cast<std::size_t>(max_tasks.value_or(1));
  out.batched = request.body.contains("maxTasks");
  return out;
}

json task_json(const services::claimed_task& task) {
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

json tasks_json(const std::vector<services::claimed_task>& claimed) {
  json list = json::array();
  for (const auto& task : claimed) {
    list.push_back(task_json(task));
  }
  return list;
}

http_response poll_answer(bool batched, json tasks) {
  if (!batched) {
    return json_response(
        200, {{"task", tasks.empty() ? json() : std::move(tasks.front())}});
  }
  return json_response(200, {{"tasks", std::move(tasks)}});
}

http_response too_many_polls(std::size_t parked_polls_max) {
  auto refused = error_response(
      429, "too-many-polls",
      "this tenant has " + std::to_string(parked_polls_max) +
          " long polls waiting, its limit; poll again once one is answered");
  refused.headers.emplace_back("Retry-After", "1");
  return refused;
}
}  // namespace worker_detail

using namespace worker_detail;

namespace {

// The limits of these routes are in durin/limits.hpp.
using limits::poll_wait_ms_max;
using limits::tasks_list_max;
using limits::worker_id_bytes_max;
using limits::worker_message_bytes_max;

constexpr auto record_wait = std::chrono::seconds(30);

// A fencing violation (another worker's lease, nobody's lease) is 409; a
// late heartbeat is 200 continue:false, not the caller's fault.
std::optional<http_response> heartbeat_refusal(services::report_verdict verdict,
                                               const std::string& attempt_id) {
  if (verdict == services::report_verdict::accepted) {
    return std::nullopt;
  }
  if (is_conflict(verdict)) {
    auto response = error_response(409, "lease-conflict",
                                   lease_conflict_message(verdict, attempt_id));
    auto body = json::parse(response.body);
    body["reason"] = services::to_string(verdict);
    response.body = body.dump();
    return response;
  }
  return json_response(
      200, {{"continue", false}, {"reason", services::to_string(verdict)}});
}

// A poll: answered at once when its queue has a task, else parked in the
// task service without a thread until a task comes, its wait ends or the
// node stops; 429 too-many-polls when the tenant has its limit parked.
void poll(services::task_service& tasks, const worker_request& request,
          const std::string& queue, std::function<void(http_response)> reply) {
  std::optional<http_response> problem;
  auto fields = read_poll(request, queue, problem);
  if (!fields) {
    return reply(std::move(*problem));
  }
  auto answer = [reply, batched = fields->batched](
                    std::vector<services::claimed_task> claimed) {
    reply(poll_answer(batched, tasks_json(claimed)));
  };
  auto parking = tasks.poll_async(
      request.tenant, queue, fields->worker, fields->poll_id, fields->wait_ms,
      fields->max_tasks, request.parked_polls_max, std::move(answer));
  if (parking == services::poll_parking::over_limit) {
    reply(too_many_polls(request.parked_polls_max));
  }
}

http_response heartbeat(services::task_service& tasks,
                        const worker_request& request,
                        const std::string& attempt_id) {
  if (auto problem = only_fields(request.body,
                                 {"workerId", "message", "current", "total"})) {
    return *problem;
  }
  std::optional<http_response> problem;
  auto worker = lease_owner(
      request,
      text_field(request.body, "workerId", worker_id_bytes_max, true, problem));
  auto message = text_field(request.body, "message", worker_message_bytes_max,
                            false, problem);
  auto current = int_field(request.body, "current", 0, INT64_MAX, problem);
  auto total = int_field(request.body, "total", 0, INT64_MAX, problem);
  if (problem) {
    return *problem;
  }
  step_progress progress{message.value_or(""), current.value_or(-1),
                         total.value_or(-1)};
  auto answer = tasks.heartbeat(request.tenant, attempt_id, *worker, progress);
  if (auto refused = heartbeat_refusal(answer.verdict, attempt_id)) {
    return *refused;
  }
  return json_response(200, {{"continue", answer.go_on},
                             {"leaseExpiresAtMs", answer.lease_expires_ms}});
}

json stats_json(const services::task_stats& stats) {
  return {{"queued", stats.queued},
          {"running", stats.running},
          {"stuckLeases", stats.stuck_leases},
          {"queuedUnpolled", stats.queued_unpolled},
          {"completed", stats.completed},
          {"redeliveries", stats.redeliveries},
          {"refusedReports", stats.refused_reports}};
}

// The caller's tenant's tasks and counters; an admin key also gets the
// node's ("nodeStats"), which count every tenant.
http_response list(services::task_service& tasks,
                   const worker_request& request) {
  auto run = request.query.find("runId");
  if (run != request.query.end()) {
    if (run->second.empty() || run->second.size() > limits::run_id_bytes_max) {
      return bad_request("runId must be a run id of 1 to " +
                         std::to_string(limits::run_id_bytes_max) + " bytes");
    }
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
  for (const auto& view : tasks.list(request.tenant, tasks_list_max)) {
    live.push_back(view.to_json());
  }
  json answer = {{"tasks", live},
                 {"queues", tasks.queues(request.tenant)},
                 {"stats", stats_json(tasks.stats(request.tenant))}};
  if (request.admin) {
    answer["nodeStats"] = stats_json(tasks.stats());
  }
  return json_response(200, answer);
}

}  // namespace
bool is_worker_route(const std::vector<std::string>& path) {
  return path.size() >= 2 && path[0] == "v1" &&
         (path[1] == "tasks" || path[1] == "task-queues");
}

namespace {

// Routes by path; `reply` is called exactly once, perhaps later (a parked
// poll, a report once durable). The gateway's route table has matched the
// method and path before (forwarded requests too: they pass the same table
// on the node that receives them), so only the path is looked at here.
void route(runtime& node, const worker_request& request,
           std::function<void(http_response)> reply) {
  auto& tasks = *runtime_access::services(node).tasks;
  const auto& p = request.path;
  if (p[1] == "task-queues" && p.size() == 4 && p[3] == "poll") {
    return poll(tasks, request, p[2], std::move(reply));
  }
  if (p[1] == "tasks" && p.size() == 2) {
    return reply(list(tasks, request));
  }
  if (p[1] == "tasks" && p.size() == 3 && p[2] == "report") {
    return report_many(tasks, request, std::move(reply));
  }
  if (p[1] == "tasks" && p.size() == 4 &&
      (p[3] == "complete" || p[3] == "fail")) {
    return report_one(tasks, request, p[2], p[3] == "complete",
                      std::move(reply));
  }
  if (p[1] == "tasks" && p.size() == 4 && p[3] == "heartbeat") {
    return reply(heartbeat(tasks, request, p[2]));
  }
  reply(error_response(404, "not-found", "no such task route"));
}

}  // namespace

http_response handle_worker_route(runtime& node,
                                  const worker_request& request) {
  auto answer = std::make_shared<std::promise<http_response>>();
  auto future = answer->get_future();
  route(node, request, [answer](http_response response) {
    answer->set_value(std::move(response));
  });
  // A parked poll answers by the end of its wait; a report once durable.
  if (future.wait_for(record_wait +
                      std::chrono::milliseconds(poll_wait_ms_max)) !=
      std::future_status::ready) {
    // Indefinite: the outcome may still be recorded.
    return error_response(503, "storage-error", indefinite_message);
  }
  return future.get();
}

void answer_worker_route(runtime& node, const worker_request& request,
                         std::function<void(http_response)> reply) {
  route(node, request, std::move(reply));
}

std::string task_metrics(runtime& node) {
  auto stats = runtime_access::services(node).tasks->stats();
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
  text +=
      "# HELP durin_task_outcomes_total outcomes of remote and timed "
      "attempts handed to their runs.\n";
  text += "durin_task_outcomes_total " + std::to_string(stats.completed) + "\n";
  return text;
}

}  // namespace durin::gateway
