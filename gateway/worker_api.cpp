#include "gateway/worker_api.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>

#include "durin/limits.hpp"
#include "gateway/api.hpp"
#include "gateway/idempotency.hpp"
#include "services/task_service.hpp"

namespace durin::gateway {

namespace {

// The limits of these routes are in durin/limits.hpp.
using limits::attempt_id_bytes_max;
using limits::poll_id_bytes_max;
using limits::poll_tasks_max;
using limits::poll_wait_ms_max;
using limits::task_queue_bytes_max;
using limits::tasks_list_max;
using limits::worker_id_bytes_max;
using limits::worker_message_bytes_max;
using limits::worker_reports_max;
constexpr std::int64_t poll_wait_ms_default = 20'000;
constexpr auto record_wait = std::chrono::seconds(30);

// The lease owner a request speaks for: its workerId, within the caller's
// key when that is a worker key, so one worker key can neither report for
// nor heartbeat a task another key claimed, whatever workerId it sends.
std::optional<std::string> lease_owner(const worker_request& request,
                                       std::optional<std::string> worker_id) {
  if (!worker_id || request.owner_prefix.empty()) {
    return worker_id;
  }
  return request.owner_prefix + *worker_id;
}

// The string field `name`, 1..max bytes; nullopt after filling `problem`.
// `where` names the object in messages ("" for the body, "reports[2].").
std::optional<std::string> text_field(const json& body, const char* name,
                                      std::size_t max, bool required,
                                      std::optional<http_response>& problem,
                                      const std::string& where = {}) {
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

std::optional<http_response> only_fields(
    const json& body, std::initializer_list<std::string_view> allowed,
    const std::string& where = {}) {
  for (const auto& [key, value] : body.items()) {
    (void)value;
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string names;
      for (auto name : allowed) {
        names += (names.empty() ? "" : ", ") + std::string(name);
      }
      return bad_request("unknown field '" + where + key +
                         "'; allowed: " + names);
    }
  }
  return std::nullopt;
}

std::optional<std::int64_t> int_field(const json& body, const char* name,
                                      std::int64_t min, std::int64_t max,
                                      std::optional<http_response>& problem,
                                      const std::string& where = {}) {
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

bool is_conflict(services::report_verdict verdict) {
  return verdict == services::report_verdict::wrong_owner ||
         verdict == services::report_verdict::not_claimed;
}

std::string conflict_message(services::report_verdict verdict,
                             const std::string& attempt_id) {
  return verdict == services::report_verdict::wrong_owner
             ? "attempt " + attempt_id + " is leased to another worker"
             : "attempt " + attempt_id + " is not claimed by any worker";
}

// A fencing violation (another worker's lease, nobody's lease) is 409; a
// late heartbeat is 200 continue:false, not the caller's fault.
std::optional<http_response> heartbeat_refusal(services::report_verdict verdict,
                                               const std::string& attempt_id) {
  if (verdict == services::report_verdict::accepted) {
    return std::nullopt;
  }
  if (is_conflict(verdict)) {
    auto response = error_response(409, "lease-conflict",
                                   conflict_message(verdict, attempt_id));
    auto body = json::parse(response.body);
    body["reason"] = services::to_string(verdict);
    response.body = body.dump();
    return response;
  }
  return json_response(
      200, {{"continue", false}, {"reason", services::to_string(verdict)}});
}

http_response poll_answer(bool batched,
                          const std::vector<services::claimed_task>& claimed) {
  if (!batched) {
    return json_response(
        200, {{"task", claimed.empty() ? json() : task_json(claimed.front())}});
  }
  json list = json::array();
  for (const auto& task : claimed) {
    list.push_back(task_json(task));
  }
  return json_response(200, {{"tasks", std::move(list)}});
}

// A poll: answered at once when its queue has a task, else parked in the
// task service without a thread until a task comes, its wait ends or the
// node stops; 429 too-many-polls when the tenant has its limit parked.
void poll(services::task_service& tasks, const worker_request& request,
          const std::string& queue, std::function<void(http_response)> reply) {
  if (auto problem = only_fields(
          request.body, {"workerId", "pollRequestId", "waitMs", "maxTasks"})) {
    return reply(std::move(*problem));
  }
  if (queue.empty() || queue.size() > task_queue_bytes_max) {
    return reply(bad_request("a task queue name is 1 to " +
                             std::to_string(task_queue_bytes_max) + " bytes"));
  }
  std::optional<http_response> problem;
  auto worker = lease_owner(
      request,
      text_field(request.body, "workerId", worker_id_bytes_max, true, problem));
  auto poll_id = text_field(request.body, "pollRequestId", poll_id_bytes_max,
                            false, problem);
  auto wait_ms =
      int_field(request.body, "waitMs", 0, poll_wait_ms_max, problem);
  auto max_tasks =
      int_field(request.body, "maxTasks", 1,
                static_cast<std::int64_t>(poll_tasks_max), problem);
  if (problem) {
    return reply(std::move(*problem));
  }
  const bool batched = request.body.contains("maxTasks");
  auto answer = [reply, batched](std::vector<services::claimed_task> claimed) {
    reply(poll_answer(batched, claimed));
  };
  auto parking =
      tasks.poll_async(request.tenant, queue, *worker, poll_id.value_or(""),
                       wait_ms.value_or(poll_wait_ms_default),
                       static_cast<std::size_t>(max_tasks.value_or(1)),
                       request.parked_polls_max, std::move(answer));
  if (parking == services::poll_parking::over_limit) {
    auto refused = error_response(
        429, "too-many-polls",
        "this tenant has " + std::to_string(request.parked_polls_max) +
            " long polls waiting, its limit; poll again once one is answered");
    refused.headers.emplace_back("Retry-After", "1");
    reply(std::move(refused));
  }
}

// One outcome a worker reports.
struct report_item {
  std::string attempt_id;
  services::step_outcome outcome;
};

// The fields of one outcome (a complete or fail body, or one item of a
// batch); nullopt after filling `problem`.
std::optional<services::step_outcome> outcome_fields(
    const json& fields, bool completed, std::optional<http_response>& problem,
    const std::string& where) {
  services::step_outcome outcome;
  if (completed) {
    outcome.value = fields.value("result", json());
    return outcome;
  }
  auto message = text_field(fields, "message", worker_message_bytes_max, false,
                            problem, where);
  auto after = int_field(fields, "retryAfterMs", 0, limits::duration_ms_max,
                         problem, where);
  if (fields.contains("retryable") && !fields["retryable"].is_boolean() &&
      !problem) {
    problem = bad_request("field '" + where + "retryable' must be a boolean");
  }
  if (problem) {
    return std::nullopt;
  }
  bool retryable =
      !fields.contains("retryable") || fields["retryable"] == json(true);
  outcome.result = retryable ? services::step_outcome::kind::retryable
                             : services::step_outcome::kind::fatal;
  outcome.message = message.value_or("the worker reported a failure");
  outcome.retry_after_ms = after.value_or(-1);
  return outcome;
}

// What became of one report of a batch.
struct item_result {
  enum class state : std::uint8_t {
    unsettled,  // the run never answered (its write failed): indefinite
    recorded,
    late,      // recorded: false, `reason`
    conflict,  // recorded: false, lease-conflict, `reason`
  };
  state what = state::unsettled;
  std::string reason;
};

// The reports of one request on their way to their runs. Each run answers
// its own once durable; the request is answered when the last one did, or,
// should a run drop its answer (a failed write makes it reload), when the
// last reference goes, with the unanswered ones indefinite.
class report_batch {
 public:
  using answer_function =
      std::function<void(const std::vector<std::string>& attempt_ids,
                         const std::vector<item_result>& results)>;

  report_batch(std::vector<std::string> attempt_ids, answer_function answer)
      : attempt_ids_(std::move(attempt_ids)),
        results_(attempt_ids_.size()),
        unsettled_(attempt_ids_.size()),
        answer_(std::move(answer)) {}
  report_batch(const report_batch&) = delete;
  report_batch& operator=(const report_batch&) = delete;
  ~report_batch() { finish(); }

  void settle(std::size_t index, item_result result) {
    results_[index] = std::move(result);
    if (unsettled_.fetch_sub(1) == 1) {
      finish();
    }
  }

 private:
  void finish() noexcept {
    if (answered_.exchange(true)) {
      return;
    }
    try {
      answer_(attempt_ids_, results_);
    } catch (const std::exception&) {
      // Out of memory building an answer: the worker's request times out
      // and it reports again (answered as stale).
    }
  }

  std::vector<std::string> attempt_ids_;
  std::vector<item_result> results_;
  std::atomic<std::size_t> unsettled_;
  std::atomic<bool> answered_{false};
  answer_function answer_;
};

// The one path of every report: fences each item like the service does and
// hands the accepted ones to their runs; `answer` is called once.
void send_reports(services::task_service& tasks, const std::string& tenant,
                  const std::string& worker, std::vector<report_item> items,
                  report_batch::answer_function answer) {
  std::vector<std::string> ids;
  ids.reserve(items.size());
  for (const auto& item : items) {
    ids.push_back(item.attempt_id);
  }
  auto batch =
      std::make_shared<report_batch>(std::move(ids), std::move(answer));
  for (std::size_t i = 0; i < items.size(); ++i) {
    auto reply = [batch, i](services::report_answer recorded) {
      batch->settle(i,
                    item_result{recorded.recorded ? item_result::state::recorded
                                                  : item_result::state::late,
                                std::move(recorded.reason)});
    };
    auto verdict = tasks.report(tenant, items[i].attempt_id, worker,
                                std::move(items[i].outcome), std::move(reply));
    if (verdict != services::report_verdict::accepted) {
      batch->settle(
          i, item_result{is_conflict(verdict) ? item_result::state::conflict
                                              : item_result::state::late,
                         services::to_string(verdict)});
    }
  }
}

const char* indefinite_message =
    "the outcome was not confirmed; the run may or may not have recorded it";

json result_json(const std::string& attempt_id, const item_result& result) {
  json out = {{"attemptId", attempt_id}};
  switch (result.what) {
    case item_result::state::recorded:
      out["recorded"] = true;
      break;
    case item_result::state::late:
      out["recorded"] = false;
      out["reason"] = result.reason;
      break;
    case item_result::state::conflict:
      out["recorded"] = false;
      out["code"] = "lease-conflict";
      out["reason"] = result.reason;
      out["message"] =
          conflict_message(result.reason == "wrong_owner"
                               ? services::report_verdict::wrong_owner
                               : services::report_verdict::not_claimed,
                           attempt_id);
      break;
    case item_result::state::unsettled:
      out["code"] = "storage-error";
      out["message"] = indefinite_message;
      break;
  }
  return out;
}

// The answer of a single complete or fail: the shape of before batches.
http_response single_answer(const std::string& attempt_id,
                            const item_result& result) {
  switch (result.what) {
    case item_result::state::recorded:
      return json_response(200, {{"recorded", true}});
    case item_result::state::late:
      return json_response(200,
                           {{"recorded", false}, {"reason", result.reason}});
    case item_result::state::conflict: {
      auto conflict = result_json(attempt_id, result);
      return json_response(409, {{"code", "lease-conflict"},
                                 {"message", conflict["message"]},
                                 {"reason", result.reason}});
    }
    case item_result::state::unsettled:
      break;
  }
  return error_response(503, "storage-error", indefinite_message);
}

// POST /v1/tasks/{attemptId}/complete|fail: a batch of one.
void report_one(services::task_service& tasks, const worker_request& request,
                const std::string& attempt_id, bool completed,
                std::function<void(http_response)> reply) {
  // Two calls: an initializer_list chosen by ?: would dangle.
  auto unknown = completed
                     ? only_fields(request.body, {"workerId", "result"})
                     : only_fields(request.body, {"workerId", "message",
                                                  "retryable", "retryAfterMs"});
  if (unknown) {
    return reply(std::move(*unknown));
  }
  std::optional<http_response> problem;
  auto worker = lease_owner(
      request,
      text_field(request.body, "workerId", worker_id_bytes_max, true, problem));
  auto outcome = outcome_fields(request.body, completed, problem, "");
  if (problem) {
    return reply(std::move(*problem));
  }
  std::vector<report_item> items;
  items.push_back(report_item{attempt_id, std::move(*outcome)});
  send_reports(
      tasks, request.tenant, *worker, std::move(items),
      [reply = std::move(reply)](const auto& ids, const auto& results) {
        reply(single_answer(ids.front(), results.front()));
      });
}

// POST /v1/tasks/report: every item is checked before any is sent, so bad
// input changes nothing.
void report_many(services::task_service& tasks, const worker_request& request,
                 std::function<void(http_response)> reply) {
  if (auto unknown = only_fields(request.body, {"workerId", "reports"})) {
    return reply(std::move(*unknown));
  }
  std::optional<http_response> problem;
  auto worker = lease_owner(
      request,
      text_field(request.body, "workerId", worker_id_bytes_max, true, problem));
  if (problem) {
    return reply(std::move(*problem));
  }
  const auto& reports =
      request.body.contains("reports") ? request.body["reports"] : json();
  if (!reports.is_array() || reports.empty() ||
      reports.size() > worker_reports_max) {
    return reply(bad_request("field 'reports' must be an array of 1 to " +
                             std::to_string(worker_reports_max) + " reports"));
  }
  std::vector<report_item> items;
  items.reserve(reports.size());
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const auto& fields = reports[i];
    auto where = "reports[" + std::to_string(i) + "].";
    if (!fields.is_object()) {
      return reply(bad_request("field 'reports[" + std::to_string(i) +
                               "]' must be an object"));
    }
    const auto& kind = fields.contains("outcome") ? fields["outcome"] : json();
    if (kind != json("complete") && kind != json("fail")) {
      return reply(bad_request("field '" + where +
                               "outcome' must be \"complete\" or \"fail\""));
    }
    bool completed = kind == json("complete");
    auto unknown =
        completed
            ? only_fields(fields, {"attemptId", "outcome", "result"}, where)
            : only_fields(fields,
                          {"attemptId", "outcome", "message", "retryable",
                           "retryAfterMs"},
                          where);
    if (unknown) {
      return reply(std::move(*unknown));
    }
    auto attempt_id = text_field(fields, "attemptId", attempt_id_bytes_max,
                                 true, problem, where);
    auto outcome = outcome_fields(fields, completed, problem, where);
    if (problem) {
      return reply(std::move(*problem));
    }
    items.push_back(report_item{std::move(*attempt_id), std::move(*outcome)});
  }
  send_reports(
      tasks, request.tenant, *worker, std::move(items),
      [reply = std::move(reply)](const auto& ids, const auto& results) {
        json list = json::array();
        for (std::size_t i = 0; i < ids.size(); ++i) {
          list.push_back(result_json(ids[i], results[i]));
        }
        reply(json_response(200, {{"results", std::move(list)}}));
      });
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
// poll, a report once durable).
void route(runtime& node, const worker_request& request,
           std::function<void(http_response)> reply) {
  auto& tasks = node.tasks();
  const auto& p = request.path;
  const auto& method = request.method;
  auto not_allowed = [&] {
    return error_response(405, "method-not-allowed",
                          method + " is not allowed here");
  };
  if (p[1] == "task-queues" && p.size() == 4 && p[3] == "poll") {
    if (method != "POST") {
      return reply(not_allowed());
    }
    return poll(tasks, request, p[2], std::move(reply));
  }
  if (p[1] == "tasks" && p.size() == 2) {
    return reply(method == "GET" ? list(tasks, request) : not_allowed());
  }
  if (p[1] == "tasks" && p.size() == 3 && p[2] == "report") {
    if (method != "POST") {
      return reply(not_allowed());
    }
    return report_many(tasks, request, std::move(reply));
  }
  if (p[1] == "tasks" && p.size() == 4) {
    if (method != "POST") {
      return reply(not_allowed());
    }
    if (p[3] == "complete" || p[3] == "fail") {
      return report_one(tasks, request, p[2], p[3] == "complete",
                        std::move(reply));
    }
    if (p[3] == "heartbeat") {
      return reply(heartbeat(tasks, request, p[2]));
    }
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
  text +=
      "# HELP durin_task_outcomes_total outcomes of remote and timed "
      "attempts handed to their runs.\n";
  text += "durin_task_outcomes_total " + std::to_string(stats.completed) + "\n";
  return text;
}

}  // namespace durin::gateway
