// The pipeline's placement step in a cluster (gateway/placement.hpp): the
// shard a request's ids resolve to, by the node's one shard function
// (services/shard_map.hpp), then here, there or nowhere.
#include "gateway/placement.hpp"

#include <string>

#include "actors/attempt_id.hpp"
#include "actors/identity.hpp"
#include "gateway/api.hpp"
#include "gateway/worker_routing.hpp"
#include "persistence/keys.hpp"
#include "services/hook_mail.hpp"
#include "services/node.hpp"
#include "services/runtime_access.hpp"

namespace durin::gateway {

namespace {

// The Idempotency-Key of a request, when it has exactly one (hold_key
// answers the others).
std::optional<std::string> single_key(const http_request& http) {
  auto key = header_once(http, "Idempotency-Key");
  if (!key.sent || key.problem) {
    return std::nullopt;
  }
  return std::string(key.value);
}

// The start token of a POST /v1/runs body, as services/start.cpp takes it:
// the hook's, else the instance id's, else the command id's.
std::optional<std::string> start_token(const json& body) {
  if (body.contains("hook") && body["hook"].is_object() &&
      body["hook"].contains("token") && body["hook"]["token"].is_string()) {
    return body["hook"]["token"].get<std::string>();
  }
  if (body.contains("instanceId") && body["instanceId"].is_string()) {
    return actors::instance_token(body["instanceId"].get<std::string>());
  }
  if (body.contains("commandId") && body["commandId"].is_string()) {
    return actors::command_token(body["commandId"].get<std::string>());
  }
  return std::nullopt;
}

// /v1/runs and what is below it.
std::optional<std::uint32_t> runs_shard(const services::shard_map& map,
                                        const std::vector<std::string>& path,
                                        const http_request& http,
                                        const principal& caller,
                                        const json& body) {
  const auto& tenant = caller.tenant;
  if (path.size() >= 3) {
    return map.of_run(path[2]);
  }
  if (http.method != "POST") {
    return std::nullopt;  // a list: every shard's
  }
  // A keyed start is decided where its key lives: the same key reaches
  // the same shard whatever its body says (a second body is a conflict).
  if (auto key = single_key(http)) {
    return map.of_key({tenant, caller.key_id, *key});
  }
  if (auto token = start_token(body)) {
    return map.of_token(persistence::keys::token(tenant, *token));
  }
  return std::nullopt;
}

// A report or heartbeat of one attempt is answered where its run is
// served, which holds the attempt's lease: the attempt id names the run
// (actors/attempt_id.hpp); an id of before names none and is answered
// here. Batches, polls and the tasks view span nodes
// (gateway/worker_routing.hpp).
std::optional<std::uint32_t> tasks_shard(
    const services::shard_map& map, const std::vector<std::string>& path,
    const std::multimap<std::string, std::string>& query) {
  if (path.size() == 4) {
    if (auto run = actors::run_of_attempt(path[2])) {
      return map.of_run(*run);
    }
    return std::nullopt;
  }
  // A run's attempts and refusals live with the run.
  auto run = query.find("runId");
  if (path.size() == 2 && run != query.end()) {
    return map.of_run(run->second);
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::uint32_t> api::home_shard(const request& r) const {
  const auto& map = runtime_access::services(node_).map;
  const auto& path = r.path;
  const auto& tenant = r.caller.tenant;
  if (path.size() < 2 || path[0] != "v1") {
    return std::nullopt;
  }
  if (path[1] == "runs") {
    return runs_shard(map, path, r.http, r.caller, r.body);
  }
  // A keyed change of keys or tenants is made where its key's record
  // lives, so that its retry meets it; the change itself reaches every
  // node (gateway/key_sync.hpp).
  if ((path[1] == "api-keys" || path[1] == "tenants") &&
      r.http.method != "GET") {
    if (auto key = single_key(r.http)) {
      return map.of_key({tenant, r.caller.key_id, *key});
    }
    return std::nullopt;
  }
  // A schedule lives in its (tenant, id)'s shard: a create names it in its
  // body, the other routes in the path; a list spans every node.
  if (path[1] == "schedules") {
    if (path.size() >= 3) {
      return map.of_schedule(tenant, path[2]);
    }
    if (r.http.method == "POST" && r.body.contains("scheduleId") &&
        r.body["scheduleId"].is_string()) {
      return map.of_schedule(tenant, r.body["scheduleId"].get<std::string>());
    }
    return std::nullopt;
  }
  if (path[1] == "instances" && path.size() >= 3) {
    return map.of_token(
        persistence::keys::token(tenant, actors::instance_token(path[2])));
  }
  if (path[1] == "hooks" && path.size() >= 3) {
    return map.of_token(persistence::keys::token(tenant, path[2]));
  }
  if (path[1] == "internal" && path.size() == 3 && path[2] == "hook-mail") {
    // Served where its actor's shard is (gateway/remote_runs.cpp); one
    // that names none is refused by its handler.
    auto mail = hook_mail_of(r.http, tenant);
    return mail ? std::optional(services::shard_of(map, *mail)) : std::nullopt;
  }
  if (path[1] == "tasks") {
    return tasks_shard(map, path, r.query);
  }
  return std::nullopt;
}

bool api::run_elsewhere(const request_ptr& r, reply_fn& reply) {
  if (placement_ == nullptr || !r->execute_at ||
      placement_->locate(*r->execute_at) == placement::where::here) {
    return false;
  }
  auto bare = r->http;
  std::erase_if(bare.headers, [](const auto& header) {
    return header.first == "idempotency-key";
  });
  // The answer is kept for the key by a write: on a worker, never on the
  // forwarder's thread.
  placement_->forward(
      *r->execute_at, std::move(bare), r->caller,
      [offload = r->offload, reply = std::move(reply)](http_response answer) {
        offload([reply, answer = std::move(answer)]() mutable {
          reply(std::move(answer));
        });
      });
  return true;
}

void api::set_placement(placement* where) {
  placement_ = where;
  worker_routing_ = where == nullptr
                        ? nullptr
                        : std::make_unique<worker_routing>(node_, *where);
  set_remote_port();
}

http_response shard_unavailable(std::uint32_t shard,
                                std::int64_t retry_after_s) {
  json body = {{"code", "shard-unavailable"},
               {"message", "shard " + std::to_string(shard) +
                               " has no live owner now; nothing was done, "
                               "retry after " +
                               std::to_string(retry_after_s) + " s"},
               {"shard", shard}};
  auto response = json_response(503, body);
  response.headers.emplace_back("Retry-After", std::to_string(retry_after_s));
  return response;
}

http_response api::cluster_view(request&) {
  if (placement_ == nullptr) {
    return error_response(404, "not-a-cluster",
                          "this node runs alone (durin serve without --etcd)");
  }
  return placement_->describe();
}

bool api::place(const request_ptr& r, reply_fn& reply) {
  auto shard = home_shard(*r);
  // A keyed cancel or resume: its key's record lives in its key's shard,
  // its effect in the run's or token's. Held where the key lives (so the
  // same key meets itself whichever run it names), then carried out, without
  // its key, where the run or token lives (run_handler).
  const bool start_like = r->path.size() == 2 &&
                          (r->path[1] == "runs" || r->path[1] == "api-keys" ||
                           r->path[1] == "tenants");
  if (shard && r->matched->has(keyed) && !start_like) {
    if (auto key = single_key(r->http)) {
      const auto key_home = runtime_access::services(node_).map.of_key(
          {r->caller.tenant, r->caller.key_id, *key});
      if (key_home != *shard) {
        r->execute_at = *shard;
        shard = key_home;
      }
    }
  }
  if (!shard) {
    const bool anywhere =
        r->http.method == "POST" && r->path.size() == 2 && r->path[1] == "runs";
    std::uint32_t local = 0;
    if (!anywhere || placement_->local_shard(local)) {
      return true;  // not a shard's route, or a start this node can take
    }
    std::uint32_t elsewhere = 0;
    if (r->forwarded || !placement_->any_shard(elsewhere)) {
      reply(error_response(503, "shard-unavailable",
                           "no shard has a live owner now; nothing was done"));
      return false;
    }
    shard = elsewhere;
  }
  switch (placement_->locate(*shard)) {
    case placement::where::here:
      return true;
    case placement::where::there:
      if (r->forwarded) {
        reply(error_response(
            not_owner_status, "not-owner",
            "this node does not serve shard " + std::to_string(*shard)));
      } else {
        placement_->forward(*shard, r->http, r->caller, std::move(reply));
      }
      return false;
    case placement::where::nowhere:
      reply(r->forwarded
                ? error_response(not_owner_status, "not-owner",
                                 "this node does not serve shard " +
                                     std::to_string(*shard))
                : shard_unavailable(*shard, placement_->retry_after_s()));
      return false;
  }
  return true;
}

}  // namespace durin::gateway
