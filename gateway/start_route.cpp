// POST /v1/runs, the one implementation of a start: the body read into
// start options, the key's records added to the run's admission batch, and
// the answer sent by whichever thread learns the outcome: the committer's
// once a background start's admission is durable, the run's actor once a
// waited start's run settles (its answer kept in that very batch), or a
// gateway worker when the run takes longer than one to two ticks of the
// unsettled list (a long step, a run reactivated from storage) or when the
// answer needs a write of its own.
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "actors/admission.hpp"
#include "gateway/api.hpp"
#include "persistence/test_points.hpp"

namespace durin::gateway {

using clock_type = std::chrono::steady_clock;

struct api::start_request {
  std::string flow;
  json input;
  bool wait = true;
  start_options options;
};

struct api::settle_answer {
  std::mutex mutex;
  std::condition_variable done;
  // The run, known once its admission batch is built (before any write).
  std::string run_id;
  std::optional<http_response> answer;      // added to the settling batch
  run_status status = run_status::pending;  // the run as that batch writes it
  std::optional<bool> durable;              // that batch's outcome
  // Called once `durable` is set, outside the lock, on the run's actor.
  std::function<void()> then;
};

struct api::async_start : std::enable_shared_from_this<async_start> {
  request_ptr r;
  reply_fn reply;
  std::shared_ptr<std::optional<http_response>> kept =
      std::make_shared<std::optional<http_response>>();
  // A waited start only: its run and the answer its settling batch
  // carries, and who answers: the first to set `claimed` (the settled run,
  // or the hand-over to an offload).
  settle_answer settle;
  std::atomic<bool> claimed{false};
};

std::optional<http_response> api::read_start(const json& body,
                                             const std::string& tenant,
                                             start_request& out) {
  if (auto problem =
          only_fields(body, {"flow", "input", "wait", "hook", "instanceId",
                             "onDuplicate", "commandId"})) {
    return *problem;
  }
  if (!body.contains("flow")) {
    return bad_request("missing field 'flow' (a string)");
  }
  if (!body["flow"].is_string() || body["flow"].get<std::string>().empty()) {
    return bad_request("field 'flow' must be a non-empty string");
  }
  out.flow = body["flow"].get<std::string>();
  if (body.contains("wait")) {
    if (!body["wait"].is_boolean()) {
      return bad_request("field 'wait' must be true or false");
    }
    out.wait = body["wait"].get<bool>();
  }
  out.input = body.contains("input") ? body["input"] : json::object();
  auto& options = out.options;
  options.tenant = tenant;
  if (body.contains("hook") && !body["hook"].is_null()) {
    const auto& hook = body["hook"];
    if (!hook.is_object()) {
      return bad_request(
          "field 'hook' must be an object {token, "
          "minRetention, metadata}");
    }
    if (auto problem =
            only_fields(hook, {"token", "minRetention", "metadata"})) {
      return *problem;
    }
    if (!hook.contains("token") || !hook["token"].is_string() ||
        hook["token"].get<std::string>().empty()) {
      return bad_request("field 'hook.token' must be a non-empty string");
    }
    start_hook start;
    start.token = hook["token"].get<std::string>();
    start.min_retention = hook.value("minRetention", json());
    start.metadata = hook.value("metadata", json());
    options.hook = std::move(start);
  }
  for (const char* field : {"instanceId", "commandId"}) {
    if (body.contains(field) &&
        (!body[field].is_string() || body[field].get<std::string>().empty())) {
      return bad_request(std::string("field '") + field +
                         "' must be a non-empty string");
    }
  }
  options.instance_id = body.value("instanceId", std::string());
  options.command_id = body.value("commandId", std::string());
  if (body.contains("onDuplicate")) {
    const auto& policy = body["onDuplicate"];
    if (policy == "reject-duplicate") {
      options.on_duplicate = duplicate_policy::reject_duplicate;
    } else if (policy == "return-existing-active") {
      options.on_duplicate = duplicate_policy::return_existing_active;
    } else {
      return bad_request(
          "field 'onDuplicate' must be \"reject-duplicate\" or "
          "\"return-existing-active\"");
    }
  }
  return std::nullopt;
}

void api::start_run(const request_ptr& r, reply_fn reply) {
  auto start = std::make_shared<async_start>();
  start->r = r;
  start->reply = std::move(reply);
  auto s = std::make_shared<start_request>();
  if (auto problem = read_start(r->body, r->caller.tenant, *s)) {
    start->reply(std::move(*problem));
    return;
  }
  if (!r->recorded_run_id.empty()) {
    // A run an earlier process admitted for this key: answer that run, on a
    // worker (a waited one waits for it; the answer is kept by a write).
    r->offload([this, start, s] {
      const auto& r = *start->r;
      auto run = node_.get(r.recorded_run_id, r.caller.tenant);
      if (!run) {
        start->reply(error_response(run.error()));
        return;
      }
      if (!s->wait) {
        start->reply(run_response(202, *run));
        return;
      }
      auto deadline = r.began + std::chrono::milliseconds(options_.wait_ms_max);
      start->reply(answer_waited(run->id, r.caller.tenant, nullptr, deadline,
                                 start->r->stored));
    });
    return;
  }
  const persistence::request_address* address = r->key ? &*r->key : nullptr;
  if (s->wait) {
    // The settle hooks hold the start through an alias of its answer, so
    // `then` may use it by address.
    auto* raw = start.get();
    std::shared_ptr<settle_answer> settled(start, &start->settle);
    start->settle.then = [this, raw] { on_settled(*raw); };
    s->options.admission = admission_for(address, r->fingerprint, true,
                                         start->kept, std::move(settled));
  } else if (address != nullptr) {
    s->options.admission =
        admission_for(address, r->fingerprint, false, start->kept);
  }
  auto done = [this, start, wait = s->wait](result<run_info> started) {
    if (!started) {
      if (!start->claimed.exchange(true)) {
        answer(*start, error_response(started.error()),
               idempotency::stored::marker);
      }
      return;
    }
    metrics_.count_start();
    DURIN_TEST_KILL_POINT("gateway.after_admit");
    if (wait) {
      bool admitted_now = false;
      {
        std::lock_guard lock(start->settle.mutex);
        admitted_now = start->settle.run_id == started->id;
        start->settle.run_id = started->id;
      }
      if (!admitted_now) {
        // An instance id's active run answered instead: no settle of this
        // start will come; a worker waits for that run.
        if (!start->claimed.exchange(true)) {
          hand_over(start);
        }
        return;
      }
      // Answered when the run settles, or handed over if it takes long.
      unsettled_->add(start);
      return;
    }
    metrics_.count_run_status(to_string(started->status));
    if (*start->kept) {
      answer(*start, std::move(**start->kept), idempotency::stored::answer);
      return;
    }
    auto response = json_response(202, started->to_json());
    if (!start->r->key) {
      answer(*start, std::move(response), idempotency::stored::nothing);
      return;
    }
    // A keyed start whose answer its admission did not keep (too large, or
    // an instance id's existing run answered): keep it by a write of its
    // own, on a worker, not on this (the committer's) thread.
    start->r->offload([this, start, response = std::move(response)]() mutable {
      answer(*start, std::move(response), idempotency::stored::marker);
    });
  };
  node_.start_async(s->flow, std::move(s->input), s->options, std::move(done));
}

void api::on_unsettled(std::shared_ptr<async_start> start) {
  if (!start->claimed.exchange(true)) {
    hand_over(std::move(start));
  }
}

http_response api::answer_waited(const std::string& run_id,
                                 const std::string& tenant,
                                 settle_answer* settled_answer,
                                 clock_type::time_point deadline,
                                 idempotency::stored& stored) {
  // Answers once the run ends or waits for something, told by the store
  // when that status is durable (no polling).
  auto settled = node_.wait_settled(
      run_id,
      std::max(std::chrono::milliseconds(0),
               std::chrono::duration_cast<std::chrono::milliseconds>(
                   deadline - clock_type::now())),
      tenant);
  if (settled && settled_answer) {
    // The run's settling batch carried the answer: once that batch is
    // durable (its actor says so right after the store did), answer it.
    std::unique_lock lock(settled_answer->mutex);
    if (settled_answer->answer &&
        settled_answer->done.wait_for(
            lock, std::chrono::seconds(5),
            [&] { return settled_answer->durable.has_value(); }) &&
        *settled_answer->durable) {
      stored = idempotency::stored::answer;
      metrics_.count_run_status(to_string(settled->status));
      return std::move(*settled_answer->answer);
    }
  }
  if (settled) {
    return run_response(200, *settled);
  }
  if (settled.error().code != errc::timeout) {
    return error_response(settled.error());
  }
  auto now = node_.get(run_id, tenant);
  if (!now) {
    return error_response(now.error());
  }
  return run_response(200, *now);
}

// A keyed start writes its key's record in the admission batch: the kept
// answer itself when it answers at once, else a marker naming the run. One
// fsync, and no moment where the run is durable but its key is not.
std::shared_ptr<detail::admission_records> api::admission_for(
    const persistence::request_address* address, const std::string& fingerprint,
    bool wait, std::shared_ptr<std::optional<http_response>> kept,
    std::shared_ptr<settle_answer> settled) {
  auto records = std::make_shared<detail::admission_records>();
  std::optional<persistence::request_address> key;
  if (address != nullptr) {
    key = *address;
  }
  // The answer `status` would give about `run`, added to `batch` as the
  // key's kept answer; nullopt when it is too large to keep there. Without
  // a key it is only the answer.
  auto keep =
      [this, key, fingerprint](
          unsigned status, const run_info& run,
          persistence::write_batch& batch) -> std::optional<http_response> {
    auto answer = json_response(status, run.to_json());
    if (key && !requests_
                    .add_to(batch, *key,
                            requests_.admission_answer(fingerprint, answer))
                    .ok()) {
      return std::nullopt;
    }
    return answer;
  };
  if (settled) {
    // The answer a waited start gives is the run as it first waits or
    // ends: kept in that very batch, it costs no write of its own.
    records->settle = [keep, settled](const run_info& run,
                                      persistence::write_batch& batch) {
      auto answer = keep(200, run, batch);
      std::lock_guard lock(settled->mutex);
      settled->answer = std::move(answer);
      settled->status = run.status;
    };
    records->settled = [settled](bool durable) {
      {
        std::lock_guard lock(settled->mutex);
        settled->durable = durable;
        settled->done.notify_all();
      }
      if (settled->then) {
        settled->then();
      }
    };
  }
  if (key || settled) {
    records->add = [this, key, fingerprint, wait, kept, keep, settled](
                       const run_info& run, persistence::write_batch& batch) {
      if (settled) {
        // Before any write: a hand-over needs it.
        std::lock_guard lock(settled->mutex);
        settled->run_id = run.id;
      }
      if (!key) {
        return;
      }
      if (!wait) {
        if (auto answer = keep(202, run, batch)) {
          *kept = std::move(answer);
          return;
        }
        // Too large to keep in the admission: the marker protects the run,
        // and finish tries to keep the answer on its own.
      }
      (void)requests_.add_to(batch, *key,
                             requests_.admission_marker(fingerprint, run.id));
    };
  }
  return records;
}

void api::answer(async_start& start, http_response response,
                 idempotency::stored already) {
  // The pipeline keeps a keyed answer before it leaves, writing only when
  // `already` says it is not kept yet: never so here on the io thread, the
  // committer's or an actor's (a start that must write is offloaded).
  start.r->stored = already;
  // Moved out: the run's actor may hold this start (through its settle
  // hooks) long after the answer; the connection must not be held with it.
  auto reply = std::move(start.reply);
  start.reply = nullptr;
  reply(std::move(response));
  start.r.reset();
}

void api::on_settled(async_start& start) {
  if (start.claimed.exchange(true)) {
    return;
  }
  std::unique_lock lock(start.settle.mutex);
  if (start.settle.answer && start.settle.durable.value_or(false)) {
    auto response = std::move(*start.settle.answer);
    start.settle.answer.reset();
    auto status = start.settle.status;
    lock.unlock();
    metrics_.count_run_status(to_string(status));
    answer(start, std::move(response), idempotency::stored::answer);
    return;
  }
  lock.unlock();
  // Not kept (too large) or not known durable: the blocking way finds out.
  hand_over(start.shared_from_this());
}

void api::hand_over(std::shared_ptr<async_start> start) {
  auto offload = start->r->offload;
  offload([this, start = std::move(start)] {
    auto stored = idempotency::stored::marker;
    metrics_.count_hand_over();
    auto response = answer_waited(
        start->settle.run_id, start->r->caller.tenant, &start->settle,
        start->r->began + std::chrono::milliseconds(options_.wait_ms_max),
        stored);
    answer(*start, std::move(response), stored);
  });
}

}  // namespace durin::gateway
