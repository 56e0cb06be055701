// The report routes of remote workers: POST /v1/tasks/{attemptId}/complete
// and /fail, and the batched POST /v1/tasks/report. Every item is fenced by
// the task service; an accepted one is answered once its run recorded it
// (durable), an unconfirmed one as indefinite.
#include <atomic>
#include <memory>
#include <vector>

#include "durin/limits.hpp"
#include "gateway/api.hpp"
#include "gateway/worker_detail.hpp"
#include "services/task_service.hpp"

namespace durin::gateway::worker_detail {

namespace {

using limits::attempt_id_bytes_max;
using limits::worker_id_bytes_max;
using limits::worker_message_bytes_max;
using limits::worker_reports_max;

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
          lease_conflict_message(result.reason == "wrong_owner"
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
}  // namespace

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

namespace {

// The items of a batched report, each checked; a 400 naming the first
// problem instead (nothing is sent then).
std::optional<http_response> read_reports(const worker_request& request,
                                          std::string& worker,
                                          std::vector<report_item>& items) {
  if (auto unknown = only_fields(request.body, {"workerId", "reports"})) {
    return unknown;
  }
  std::optional<http_response> problem;
  auto owner = lease_owner(
      request,
      text_field(request.body, "workerId", worker_id_bytes_max, true, problem));
  if (problem) {
    return problem;
  }
  worker = std::move(*owner);
  const auto& reports =
      request.body.contains("reports") ? request.body["reports"] : json();
  if (!reports.is_array() || reports.empty() ||
      reports.size() > worker_reports_max) {
    return bad_request("field 'reports' must be an array of 1 to " +
                       std::to_string(worker_reports_max) + " reports");
  }
  items.reserve(reports.size());
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const auto& fields = reports[i];
    auto where = "reports[" + std::to_string(i) + "].";
    if (!fields.is_object()) {
      return bad_request("field 'reports[" + std::to_string(i) +
                         "]' must be an object");
    }
    const auto& kind = fields.contains("outcome") ? fields["outcome"] : json();
    if (kind != json("complete") && kind != json("fail")) {
      return bad_request("field '" + where +
                         "outcome' must be \"complete\" or \"fail\"");
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
      return unknown;
    }
    auto attempt_id = text_field(fields, "attemptId", attempt_id_bytes_max,
                                 true, problem, where);
    auto outcome = outcome_fields(fields, completed, problem, where);
    if (problem) {
      return problem;
    }
    items.push_back(report_item{std::move(*attempt_id), std::move(*outcome)});
  }
  return std::nullopt;
}

}  // namespace

std::optional<http_response> check_reports(const worker_request& request) {
  std::string worker;
  std::vector<report_item> items;
  return read_reports(request, worker, items);
}

void report_many(services::task_service& tasks, const worker_request& request,
                 std::function<void(http_response)> reply) {
  std::string worker;
  std::vector<report_item> items;
  if (auto problem = read_reports(request, worker, items)) {
    return reply(std::move(*problem));
  }
  send_reports(
      tasks, request.tenant, worker, std::move(items),
      [reply = std::move(reply)](const auto& ids, const auto& results) {
        json list = json::array();
        for (std::size_t i = 0; i < ids.size(); ++i) {
          list.push_back(result_json(ids[i], results[i]));
        }
        reply(json_response(200, {{"results", std::move(list)}}));
      });
}
}  // namespace durin::gateway::worker_detail
