// POST /v1/runs, the one implementation of a start: the body read into a
// services::start_request, the caller's key handed down with it as plain data
// (its record written in the run's admission batch by whichever site admits
// the run), and the answer sent by whichever thread learns the outcome: the
// committer's once a background start's admission is durable; for a waited
// start, the run-event hub (on the run's actor) once the run first waits or
// ends, its answer kept in that very batch; or a gateway worker when the run
// takes longer than one to two ticks of the unsettled list (a long step, a
// run reactivated from storage) or when the answer needs a write of its own.
#include <chrono>

#include "gateway/api.hpp"
#include "persistence/test_points.hpp"
#include "services/node.hpp"
#include "services/runtime_access.hpp"
#include "services/start.hpp"

namespace durin::gateway {

using clock_type = std::chrono::steady_clock;

struct api::start_request {
  std::string flow;
  json input;
  bool wait = true;
  start_options options;
};

struct api::async_start : std::enable_shared_from_this<async_start> {
  request_ptr r;
  reply_fn reply;
  // Drawn before the start, so that a waited start subscribes to its run's
  // events before the run exists.
  std::string run_id;
  std::uint64_t subscription = 0;
  // The key's record rides in the run's admission (one shard holds both);
  // else the answer is kept by a write of its own.
  bool key_in_admission = false;
  // Who answers a waited start: the first to set it (the hub's event, or
  // the hand-over to a worker).
  std::atomic<bool> claimed{false};
};

std::optional<http_response> api::read_start(const json& body,
                                             const std::string& tenant,
                                             start_request& out) {
  if (auto problem = only_fields(
          body, {"flow", "input", "wait", "hook", "instanceId", "onDuplicate",
                 "commandId", "memo", "searchAttributes"})) {
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
  options.memo = body.value("memo", json());
  if (body.contains("searchAttributes") &&
      !body["searchAttributes"].is_null()) {
    auto attributes = search_attributes_from_json(body["searchAttributes"]);
    if (!attributes) {
      return bad_request("field 'searchAttributes': " +
                         attributes.error().message);
    }
    options.search = std::move(*attributes);
  }
  return std::nullopt;
}

bool api::answer_recorded_run(const std::shared_ptr<async_start>& start,
                              bool wait) {
  const auto& r = start->r;
  auto& node = runtime_access::services(node_);
  if (placement_ != nullptr &&
      placement_->locate(node.map.of_run(r->recorded_run_id)) !=
          placement::where::here) {
    // The run the key's marker names lives on another node: asked there.
    start->run_id = r->recorded_run_id;
    resume_elsewhere(start, wait);
    return true;
  }
  auto run = node_.get(r->recorded_run_id, r->caller.tenant);
  if (run || run.error().code != errc::run_not_found) {
    // A run an earlier holder of this key admitted: answer that run, on a
    // worker (a waited one waits for it; the answer is kept by a write).
    r->offload([this, start, wait, run = std::move(run)] {
      const auto& r = *start->r;
      if (!run) {
        start->reply(error_response(run.error()));
      } else if (!wait) {
        start->reply(run_response(202, *run));
      } else {
        start->reply(answer_waited(
            run->id, r.caller.tenant,
            r.began + std::chrono::milliseconds(options_.wait_ms_max)));
      }
    });
    return true;
  }
  // Its marker names a run never admitted (a crash between a key written
  // in its own shard and the run's admission): start that very run.
  start->run_id = r->recorded_run_id;
  return false;
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
  auto& node = runtime_access::services(node_);
  std::string parent_run_id;
  std::uint8_t parent_close = 0;
  if (r->forwarded) {
    // A start whose key lives on the forwarding node (start_elsewhere), or
    // a child run whose parent lives there (gateway/remote_runs.cpp): its
    // run id, drawn there and named by the key's marker or the parent's
    // history, in this node's shard.
    if (auto id = r->http.header("x-durin-run-id"); !id.empty()) {
      start->run_id = std::string(id);
    }
    parent_run_id = std::string(r->http.header("x-durin-parent-run"));
    auto close = r->http.header("x-durin-parent-close");
    if (close.size() == 1 && close[0] >= '0' && close[0] <= '3') {
      parent_close = static_cast<std::uint8_t>(close[0] - '0');
    }
  }
  if (!r->recorded_run_id.empty() && answer_recorded_run(start, s->wait)) {
    return;
  }
  services::start_request request;
  request.flow = std::move(s->flow);
  request.input = std::move(s->input);
  request.options = std::move(s->options);
  request.parent_run_id = std::move(parent_run_id);
  request.parent_close = parent_close;
  request.answer.when_settled = s->wait;
  if (r->key) {
    request.answer.key = requests_.start_key_of(*r->key, r->fingerprint);
  }
  if (start->run_id.empty()) {
    start->run_id = services::draw_run_id(node, request);
  }
  request.run_id = start->run_id;
  start->key_in_admission = services::key_kept_with_admission(node, request);
  if (placement_ != nullptr && request.answer.key && !start->key_in_admission) {
    const auto run_shard = node.map.of_run(start->run_id);
    if (placement_->locate(run_shard) != placement::where::here) {
      start_elsewhere(start, *request.answer.key);
      return;
    }
  }
  if (s->wait) {
    start->subscription = node.events.subscribe(
        start->run_id, services::run_events::until::settled,
        [this, start](const services::run_event& event) {
          on_settled(start, event);
        });
  }
  services::start_run(node, std::move(request),
                      [this, start, wait = s->wait](result<run_info> started) {
                        on_admitted(start, wait, std::move(started));
                      });
}

// ---- a keyed start whose run lives on another node (a cluster) ------------
//
// The key's marker naming the run is made durable here, in the key's shard,
// then the start (without its key) is forwarded to the node that serves the
// run's shard, with the run id to use; its answer is kept for the key here.
// A crash in between leaves a marker naming a run that may not exist: the
// retry asks the run's node for it (resume_elsewhere) and starts that very
// run id when it is not there.

void api::start_elsewhere(const std::shared_ptr<async_start>& start,
                          const persistence::start_key& key) {
  auto& node = runtime_access::services(node_);
  start->r->stored = idempotency::stored::marker;
  services::write_key_marker(
      node, key, start->run_id, [this, start](const status& written) {
        if (!written) {
          answer(*start,
                 error_response(make_error(
                     errc::storage_error,
                     "the request key of a start could not be written: " +
                         written.error().message)),
                 idempotency::stored::marker);
          return;
        }
        DURIN_TEST_KILL_POINT("gateway.after_key_marker");
        forward_start(start);
      });
}

void api::forward_start(const std::shared_ptr<async_start>& start) {
  auto& node = runtime_access::services(node_);
  wire::http_request sub;
  sub.method = "POST";
  sub.target = "/v1/runs";
  sub.headers = {{"content-type", "application/json"},
                 {"x-durin-run-id", start->run_id}};
  sub.body = start->r->body.dump();
  placement_->forward(
      node.map.of_run(start->run_id), std::move(sub), start->r->caller,
      [this, start](http_response response) {
        start->r->offload([this, start, response = std::move(response)]() {
          on_started_elsewhere(start, response);
        });
      });
}

void api::on_started_elsewhere(const std::shared_ptr<async_start>& start,
                               http_response response) {
  if (response.status == 409) {
    auto body = json::parse(response.body, nullptr, false);
    if (!body.is_discarded() &&
        body.value("conflictingRunId", std::string()) == start->run_id) {
      // Its token is held by this very run: an earlier try admitted it.
      resume_elsewhere(start, start->r->body.value("wait", true));
      return;
    }
  }
  if (response.status >= 400 && response.status < 500) {
    // Refused for certain, no run admitted: the marker goes first.
    auto& node = runtime_access::services(node_);
    auto done = std::make_shared<http_response>(std::move(response));
    services::remove_key_marker(node, *start->r->key, [this, start, done] {
      start->r->offload([this, start, done] {
        answer(*start, std::move(*done), idempotency::stored::nothing);
      });
    });
    return;
  }
  if (response.status < 300) {
    metrics_.count_start();
  }
  answer(*start, std::move(response), idempotency::stored::marker);
}

void api::resume_elsewhere(const std::shared_ptr<async_start>& start,
                           bool wait) {
  auto& node = runtime_access::services(node_);
  wire::http_request get;
  get.method = "GET";
  get.target = "/v1/runs/" + start->run_id;
  placement_->forward(
      node.map.of_run(start->run_id), std::move(get), start->r->caller,
      [this, start, wait](http_response response) {
        if (response.status == 404) {
          forward_start(start);  // never admitted: that very run now
          return;
        }
        if (response.status == 200 && !wait) {
          response.status = 202;
        }
        start->r->offload([this, start, response = std::move(response)]() {
          answer(*start, std::move(response), idempotency::stored::marker);
        });
      });
}

void api::on_admitted(const std::shared_ptr<async_start>& start, bool wait,
                      result<run_info> started) {
  auto& events = runtime_access::services(node_).events;
  if (!started) {
    if (wait) {
      events.unsubscribe(start->run_id, start->subscription);
    }
    if (!start->claimed.exchange(true)) {
      answer(*start, error_response(started.error()),
             idempotency::stored::marker);
    }
    return;
  }
  metrics_.count_start();
  DURIN_TEST_KILL_POINT("gateway.after_admit");
  const bool admitted_now = started->id == start->run_id;
  if (wait) {
    if (admitted_now) {
      // Answered when the run settles, or handed over if it takes long.
      unsettled_->add(start);
      return;
    }
    // An instance id's active run (or a command's first run) answered
    // instead: no event of this start's run will come; a worker waits.
    events.unsubscribe(start->run_id, start->subscription);
    start->run_id = started->id;
    if (!start->claimed.exchange(true)) {
      hand_over(start);
    }
    return;
  }
  metrics_.count_run_status(to_string(started->status));
  auto response = json_response(202, started->to_json());
  if (!start->r->key) {
    answer(*start, std::move(response), idempotency::stored::nothing);
    return;
  }
  // The admission kept this very answer (actors::add_admission) unless it
  // was too large, another run answered, or the key lives in another shard.
  if (admitted_now && start->key_in_admission &&
      response.body.size() <= persistence::kept_body_bytes_max) {
    answer(*start, std::move(response), idempotency::stored::answer);
    return;
  }
  // Keep it by a write of its own, on a worker, not on this (the
  // committer's) thread.
  start->r->offload([this, start, response = std::move(response)]() mutable {
    answer(*start, std::move(response), idempotency::stored::marker);
  });
}

void api::on_settled(const std::shared_ptr<async_start>& start,
                     const services::run_event& event) {
  if (start->claimed.exchange(true)) {
    return;
  }
  if (start->r->key && !event.answer_kept) {
    // Not kept in the settling batch (too large, or the run's actor was
    // reactivated meanwhile): a worker keeps it by a write of its own.
    hand_over(start);
    return;
  }
  metrics_.count_run_status(to_string(event.run.status));
  answer(*start, json_response(200, event.run.to_json()),
         start->r->key ? idempotency::stored::answer
                       : idempotency::stored::nothing);
}

void api::on_unsettled(std::shared_ptr<async_start> start) {
  if (!start->claimed.exchange(true)) {
    runtime_access::services(node_).events.unsubscribe(start->run_id,
                                                       start->subscription);
    hand_over(std::move(start));
  }
}

http_response api::answer_waited(const std::string& run_id,
                                 const std::string& tenant,
                                 clock_type::time_point deadline) {
  // Answers once the run ends or waits for something, told by the run-event
  // hub when that status is durable (no polling). In a cluster the run's
  // shard may leave this node meanwhile (a move, a lost lease): its events
  // then come on another node, so the wait looks up its shard every slice
  // and ends with a retryable 503; the keyed retry waits at the new owner.
  // The slices also end it at the drain's deadline (end_waited_starts_after):
  // a worker held to the wait's own end (25 s) would hold the node's exit
  // past the drain timeout.
  using std::chrono::milliseconds;
  const auto shard = runtime_access::services(node_).map.of_run(run_id);
  for (;;) {
    const auto left = std::max(
        milliseconds(0),
        std::chrono::duration_cast<milliseconds>(deadline - clock_type::now()));
    const auto slice = std::min(left, milliseconds(250));
    auto settled = node_.wait_settled(run_id, slice, tenant);
    if (settled) {
      return run_response(200, *settled);
    }
    if (settled.error().code != errc::timeout) {
      return error_response(settled.error());
    }
    if (slice == left || clock_type::now().time_since_epoch().count() >=
                             waited_starts_end_ns_.load()) {
      break;
    }
    if (placement_ != nullptr &&
        placement_->locate(shard) != placement::where::here) {
      auto moved = error_response(
          503, "shard-moved",
          "run " + run_id + "'s shard " + std::to_string(shard) +
              " moved to another node while this request waited; the run "
              "goes on there: retry with the same Idempotency-Key to wait "
              "for it");
      moved.headers.emplace_back("Retry-After", "1");
      return moved;
    }
  }
  auto now = node_.get(run_id, tenant);
  if (!now) {
    return error_response(now.error());
  }
  return run_response(200, *now);
}

void api::answer(async_start& start, http_response response,
                 idempotency::stored already) {
  // The pipeline keeps a keyed answer before it leaves, writing only when
  // `already` says it is not kept yet: never so here on the io thread, the
  // committer's or an actor's (a start that must write is offloaded).
  start.r->stored = already;
  // Moved out: the hub may hold this start (through its subscription) after
  // the answer; the connection must not be held with it.
  auto reply = std::move(start.reply);
  start.reply = nullptr;
  reply(std::move(response));
  start.r.reset();
}

void api::end_waited_starts_after(std::chrono::milliseconds after) {
  waited_starts_end_ns_.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          (clock_type::now() + after).time_since_epoch())
          .count());
}

void api::hand_over(std::shared_ptr<async_start> start) {
  auto offload = start->r->offload;
  offload([this, start = std::move(start)] {
    metrics_.count_hand_over();
    auto response = answer_waited(
        start->run_id, start->r->caller.tenant,
        start->r->began + std::chrono::milliseconds(options_.wait_ms_max));
    answer(*start, std::move(response), idempotency::stored::marker);
  });
}

}  // namespace durin::gateway
