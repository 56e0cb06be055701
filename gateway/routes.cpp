// The routes of the HTTP API that answer at once (on the io thread for
// reads, on a gateway worker for writes that wait for their fsync). The
// start is in gateway/start_route.cpp, the pipeline in gateway/api.cpp.
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "base/time_text.hpp"
#include "durin/ids.hpp"
#include "durin/limits.hpp"
#include "gateway/api.hpp"
#include "gateway/readiness.hpp"
#include "gateway/worker_api.hpp"
#include "gateway/worker_routing.hpp"
#include "persistence/store.hpp"
#include "services/node.hpp"
#include "services/runtime_access.hpp"

namespace durin::gateway {

http_response api::health(request&) {
  return json_response(200, {{"status", "ok"}});
}

http_response api::readiness(request&) {
  if (placement_ != nullptr && !placement_->live()) {
    return error_response(
        503, "cluster-lease-lost",
        "this node holds no live lease in etcd now (etcd unreachable, or "
        "the node was paused): it serves none of its shards until it "
        "acquires them again, by itself");
  }
  if (placement_ != nullptr) {
    if (auto refusal = keys_not_in_step()) {
      return *refusal;  // authenticated requests would answer so
    }
    if (auto lost = placement_->copies_lost(); !lost.empty()) {
      return json_response(
          503,
          {{"code", "shard-copies-lost"},
           {"message",
            "this node's copies of " + std::to_string(lost.size()) +
                " of its shards lost their history (its data directory was "
                "deleted or replaced) and no copy in step is live: it does "
                "not serve them until one is, or until `durin cluster "
                "accept-loss SHARD` lets it serve them without their runs"},
           {"shards", lost}});
    }
    if (auto awaited = placement_->awaited(); !awaited.empty()) {
      return json_response(
          503,
          {{"code", "shards-not-acquired"},
           {"message", "this node does not serve yet " +
                           std::to_string(awaited.size()) +
                           " of the shards the cluster gives it (it takes "
                           "each once the lease of its last holder is gone)"},
           {"shards", awaited}});
    }
  }
  return readiness_response(node_);
}

http_response api::prometheus(request&) {
  http_response response;
  response.content_type = "text/plain; version=0.0.4";
  std::string extra = extra_metrics_ ? extra_metrics_() : "";
  if (placement_ != nullptr) {
    extra += placement_->metrics_text();
  }
  response.body = metrics_.render(extra);
  return response;
}

std::optional<http_response> api::gather_other_nodes(const request& ctx,
                                                     std::string_view field,
                                                     std::vector<json>& pages) {
  for (auto& answer : placement_->ask_every_other_node(ctx.http, ctx.caller)) {
    if (answer.status != 200) {
      return std::move(answer);
    }
    auto other = json::parse(answer.body, nullptr, false);
    if (other.is_discarded() || !other.is_object() || !other.contains(field)) {
      return error_response(502, "bad-gateway",
                            "a node answered without " + std::string(field));
    }
    pages.push_back(std::move(other));
  }
  return std::nullopt;
}

http_response api::run_response(unsigned status, const run_info& run) {
  metrics_.count_run_status(to_string(run.status));
  return json_response(status, run.to_json());
}

http_response api::get_instance(request& ctx) {
  auto run = node_.get_instance(ctx.params[0], ctx.caller.tenant);
  return run ? run_response(200, *run) : error_response(run.error());
}

namespace {

// Pages of runs (newest first, each with its nextCursor) as one page.
json merge_pages(std::vector<json>& pages, std::size_t limit) {
  std::string floor;
  std::vector<json> merged;
  for (auto& page : pages) {
    if (page["nextCursor"].is_string()) {
      floor = std::max(floor, page["nextCursor"].get<std::string>());
    }
    for (auto& run : page["runs"]) {
      merged.push_back(std::move(run));
    }
  }
  std::sort(merged.begin(), merged.end(), [](const json& a, const json& b) {
    return a.value("id", "") > b.value("id", "");
  });
  json runs = json::array();
  bool more = !floor.empty();
  for (auto& run : merged) {
    const auto id = run.value("id", "");
    if ((!floor.empty() && id < floor) || runs.size() == limit) {
      more = true;
      break;
    }
    runs.push_back(std::move(run));
  }
  json next = nullptr;
  if (more && !runs.empty()) {
    next = runs.back()["id"];
  }
  return json{{"runs", std::move(runs)}, {"nextCursor", std::move(next)}};
}

}  // namespace

http_response api::list_runs(request& ctx) {
  run_filter filter;
  filter.tenant = ctx.caller.tenant;
  for (const auto& [name, value] : ctx.query) {
    if (name == "status") {
      if (value.empty()) {
        continue;
      }
      auto status = parse_run_status(value);
      if (!status) {
        return bad_request("unknown status '" + value +
                           "'; one of pending, running, waiting, blocked, "
                           "completed, failed, cancelled, terminated");
      }
      filter.status = status;
    } else if (name == "flow") {
      if (!value.empty()) {
        filter.flow = value;
      }
    } else if (name == "scheduleId") {
      if (!value.empty()) {
        filter.schedule_id = value;
      }
    } else if (name == "limit") {
      if (value.empty()) {
        continue;
      }
      auto limit = query_number(value, 1, 1000, 4);
      if (!limit) {
        return bad_request("limit must be a number from 1 to 1000");
      }
      filter.limit = *limit;
    } else if (name == "cursor") {
      filter.cursor = value;
    } else {  // query (api::routes() lets no other name through)
      filter.query = value;
    }
  }
  auto page = node_.list(filter);
  if (!page) {
    return error_response(page.error());
  }
  json runs = json::array();
  for (const auto& run : page->runs) {
    runs.push_back(run.to_json());
  }
  json next =
      page->next_cursor.empty() ? json(nullptr) : json(page->next_cursor);
  if (placement_ == nullptr || ctx.forwarded) {
    return json_response(200,
                         {{"runs", std::move(runs)}, {"nextCursor", next}});
  }
  // In a cluster every other node lists the shards it serves from the same
  // cursor, and the pages merge as a node's shards do (services/
  // runtime.cpp): below the highest cursor of a page that stopped early a
  // source may have unseen runs, so nothing below it is given.
  std::vector<json> pages{
      json{{"runs", std::move(runs)}, {"nextCursor", next}}};
  if (auto refused = gather_other_nodes(ctx, "runs", pages)) {
    return std::move(*refused);
  }
  auto merged = merge_pages(pages, filter.limit);
  if (auto missing = placement_->unserved(); !missing.empty()) {
    // Said, not hidden: their runs are not in this page (nor the next).
    merged["unavailableShards"] = missing;
  }
  return json_response(200, merged);
}

http_response api::run_history(request& ctx) {
  const std::string& id = ctx.params[0];
  // Without `after` or `limit`, every event (as before); with either, the
  // events after sequence `after` (default 0), at most `limit` (1..1000,
  // default 1000), and "nextAfter" to ask for the rest.
  std::uint64_t after = 0;
  std::optional<std::uint64_t> limit;
  for (const auto& [name, value] : ctx.query) {
    if (name == "after") {
      auto number = query_number(value, 0, UINT64_C(1) << 53, 16);
      if (!number) {
        return bad_request("after must be a sequence number (0 or more)");
      }
      after = *number;
      limit = limit.value_or(history_page_max);
    } else {  // limit
      limit = query_number(value, 1, history_page_max, 4);
      if (!limit) {
        return bad_request("limit must be a number from 1 to " +
                           std::to_string(history_page_max));
      }
    }
  }
  auto events = node_.history(id, ctx.caller.tenant);
  if (!events) {
    return error_response(events.error());
  }
  // Sequences start at 1 and have no gaps: event `after` + 1 is at index
  // `after`.
  const std::uint64_t last = events->size();
  const std::uint64_t from = std::min(after, last);
  const std::uint64_t to = limit ? std::min(last, from + *limit) : last;
  json list = json::array();
  for (auto i = from; i < to; ++i) {
    list.push_back((*events)[i].to_json());
  }
  json body = {
      {"runId", id}, {"events", std::move(list)}, {"lastSequence", last}};
  if (limit) {
    body["nextAfter"] = to < last ? json(to) : json(nullptr);
  }
  return json_response(200, body);
}

http_response api::count_runs(request& ctx) {
  run_filter filter;
  filter.tenant = ctx.caller.tenant;
  filter.limit = 1000;
  if (auto flow = ctx.query.find("flow");
      flow != ctx.query.end() && !flow->second.empty()) {
    filter.flow = flow->second;
  }
  // The tenant's runs, page by page, newest first, up to count_runs_max:
  // beyond that the counts are of the newest ones ("complete": false).
  std::map<std::string, std::uint64_t> counts;
  for (auto status :
       {run_status::pending, run_status::running, run_status::waiting,
        run_status::blocked, run_status::completed, run_status::failed,
        run_status::cancelled, run_status::terminated}) {
    counts[std::string(to_string(status))] = 0;
  }
  std::uint64_t total = 0;
  bool complete = true;
  for (;;) {
    auto page = node_.list(filter);
    if (!page) {
      return error_response(page.error());
    }
    for (const auto& run : page->runs) {
      ++counts[std::string(to_string(run.status))];
      ++total;
    }
    if (page->next_cursor.empty()) {
      break;
    }
    if (total >= count_runs_max) {
      complete = false;
      break;
    }
    filter.cursor = page->next_cursor;
  }
  if (placement_ != nullptr && !ctx.forwarded) {
    // Every other node counts the shards it serves.
    std::vector<json> others;
    if (auto refused = gather_other_nodes(ctx, "counts", others)) {
      return std::move(*refused);
    }
    for (auto& other : others) {
      for (const auto& [status, count] : other["counts"].items()) {
        counts[status] += count.get<std::uint64_t>();
      }
      total += other.value("total", std::uint64_t{0});
      complete = complete && other.value("complete", true);
    }
    if (auto missing = placement_->unserved(); !missing.empty()) {
      complete = false;
    }
  }
  return json_response(
      200, {{"counts", counts}, {"total", total}, {"complete", complete}});
}

http_response api::cancel_run(request& ctx) {
  return stop_run(ctx, false);
}

http_response api::terminate_run(request& ctx) {
  return stop_run(ctx, true);
}

http_response api::stop_run(request& ctx, bool terminate) {
  const std::string& id = ctx.params[0];
  if (auto problem = only_fields(ctx.body, {"reason", "commandId"})) {
    return *problem;
  }
  cancel_options options;
  options.tenant = ctx.caller.tenant;
  if (ctx.body.contains("reason") && !ctx.body["reason"].is_string()) {
    return bad_request("field 'reason' must be a string");
  }
  // As on a start or a resume: an empty command id would key nothing.
  if (ctx.body.contains("commandId") &&
      (!ctx.body["commandId"].is_string() ||
       ctx.body["commandId"].get<std::string>().empty())) {
    return bad_request("field 'commandId' must be a non-empty string");
  }
  options.reason = ctx.body.value("reason", std::string());
  options.command_id = ctx.body.value("commandId", std::string());
  auto run =
      terminate ? node_.terminate(id, options) : node_.cancel(id, options);
  if (!run) {
    return error_response(run.error());
  }
  return run_response(200, *run);
}

http_response api::get_hook(request& ctx) {
  const std::string& token = ctx.params[0];
  auto hook = node_.get_hook_by_token(token, ctx.caller.tenant);
  if (!hook) {
    return error_response(hook.error());
  }
  return json_response(200, hook->to_json());
}

http_response api::resume_hook(request& ctx) {
  const std::string& token = ctx.params[0];
  if (auto problem = only_fields(ctx.body, {"payload", "commandId"})) {
    return *problem;
  }
  if (!ctx.body.contains("payload")) {
    return bad_request("missing field 'payload'");
  }
  resume_options options;
  options.tenant = ctx.caller.tenant;
  if (ctx.body.contains("commandId")) {
    if (!ctx.body["commandId"].is_string() ||
        ctx.body["commandId"].get<std::string>().empty()) {
      return bad_request("field 'commandId' must be a non-empty string");
    }
    options.command_id = ctx.body["commandId"].get<std::string>();
  } else if (ctx.key) {
    // The key names the command: a resume retried after a crash is not
    // delivered twice.
    options.resume_id = ctx.caller.key_id + ":" + ctx.key->key;
  }
  auto owner = node_.resume_hook(token, ctx.body["payload"], options);
  if (!owner) {
    return error_response(owner.error());
  }
  return json_response(200, {{"runId", *owner}});
}

namespace {

// What a webhook's run reads: the request's method, its headers but the
// dropped ones, and its body as JSON when it parses, else as text (UTF-8).
json webhook_payload(const http_request& http,
                     const std::set<std::string>& dropped_headers) {
  json headers = json::object();
  for (const auto& [name, value] : http.headers) {
    if (dropped_headers.count(name) == 0 && valid_utf8(value)) {
      headers[name] = value;
    }
  }
  json body;
  if (!http.body.empty()) {
    body = json::parse(http.body, nullptr, false);
    if (body.is_discarded()) {
      body = http.body;
    }
  }
  return {{"method", http.method},
          {"headers", std::move(headers)},
          {"body", std::move(body)}};
}

// The webhook index names the token's tenant (written with the webhook's
// claim, removed with its release). Its tenant is not known yet, so
// neither is its shard: each shard this node serves is asked.
result<std::optional<std::string>> webhook_tenant(services::node& node,
                                                  const std::string& token) {
  result<std::optional<std::string>> tenant = std::optional<std::string>();
  for (auto& shard : node.shards) {
    if (services::node::serves_no_more(*shard)) {
      continue;
    }
    tenant = shard->store->get_webhook_tenant(token);
    if (!tenant || *tenant) {
      break;
    }
  }
  return tenant;
}

}  // namespace

http_response api::webhook(request& ctx) {
  const std::string& token = ctx.params[0];
  // No API key: the random token is the secret. Unknown tokens answer 404
  // with an empty body, so the route tells nothing about tokens.
  http_response unknown;
  unknown.status = 404;
  unknown.content_type.clear();
  if (token.rfind("wh_", 0) != 0) {
    return unknown;
  }
  if (!valid_utf8(ctx.http.body)) {
    return error_response(400, "invalid-argument",
                          "a webhook body must be UTF-8 text");
  }
  auto payload = webhook_payload(ctx.http, options_.webhook_dropped_headers);
  // In a cluster, of the shards this node serves; then every other node
  // asks its own (only the one whose shard holds the token acts).
  auto tenant = webhook_tenant(runtime_access::services(node_), token);
  if (!tenant) {
    return error_response(tenant.error());
  }
  if (!*tenant) {
    if (placement_ != nullptr && !ctx.forwarded) {
      for (auto& answer :
           placement_->ask_every_other_node(ctx.http, ctx.caller)) {
        if (answer.status != 404) {
          return answer;
        }
      }
    }
    return unknown;
  }
  resume_options options;
  options.tenant = **tenant;
  auto owner = node_.resume_hook(token, payload, options);
  if (owner) {
    http_response accepted;
    accepted.status = 202;
    accepted.body = "{}";
    return accepted;
  }
  if (owner.error().code == errc::hook_not_found) {
    return unknown;  // a retained token: its run no longer reads it
  }
  return error_response(owner.error());
}

namespace {

std::optional<http_response> optional_name(
    const json& body, std::string& name,
    std::initializer_list<std::string_view> allowed = {"name"}) {
  if (auto problem = only_fields(body, allowed)) {
    return problem;
  }
  if (body.contains("name")) {
    if (!body["name"].is_string() ||
        body["name"].get<std::string>().size() > limits::key_name_bytes_max) {
      return bad_request("field 'name' must be a string of at most " +
                         std::to_string(limits::key_name_bytes_max) + " bytes");
    }
    name = body["name"].get<std::string>();
    // A name is shown in lists and on terminals: no line breaks or escapes.
    if (std::any_of(name.begin(), name.end(),
                    [](unsigned char c) { return is_control_byte(c); })) {
      return bad_request("field 'name' may not contain control characters");
    }
  }
  return std::nullopt;
}

}  // namespace

http_response api::create_key(request& ctx) {
  // Forwarded here by a node that authenticated the caller: this node's
  // table must be in step too, or it could miss a key the change needs.
  if (auto not_in_step = keys_not_in_step()) {
    return *not_in_step;
  }
  std::string name;
  if (auto problem = optional_name(ctx.body, name, {"name", "role"})) {
    return *problem;
  }
  // A key makes keys of its own role or lower; operator unless asked.
  auto role = std::min(key_role::operate, ctx.caller.role);
  if (ctx.body.contains("role")) {
    const auto& asked = ctx.body["role"];
    auto named = asked.is_string()
                     ? persistence::parse_key_role(asked.get<std::string>())
                     : std::nullopt;
    if (!named) {
      return bad_request(
          "field 'role' must be \"read-only\", \"worker\", \"operator\" or "
          "\"admin\"");
    }
    if (*named > ctx.caller.role) {
      return error_response(403, "forbidden",
                            "a key of role " +
                                std::string(to_string(ctx.caller.role)) +
                                " may not create a key of role " +
                                std::string(to_string(*named)));
    }
    role = *named;
  }
  auto key = keys_.create_key(ctx.caller.tenant, name, role);
  if (!key) {
    return error_response(key.error());
  }
  if (auto missed =
          spread_keys({{}, {key->record}}, key_change::created, ctx.caller)) {
    return *missed;
  }
  return json_response(
      201,
      {{"id", key->record.id},
       {"name", key->record.name},
       {"role", to_string(key->record.role)},
       {"secret", key->secret},
       {"createdAt", time_text::format_rfc3339_ms(key->record.created_at_ms)}});
}

http_response api::list_keys(request& ctx) {
  auto listed = keys_.list_keys(ctx.caller.tenant);
  if (!listed) {
    return error_response(listed.error());
  }
  json keys = json::array();
  for (const auto& key : *listed) {
    keys.push_back(
        {{"id", key.id},
         {"name", key.name},
         {"role", to_string(key.role)},
         {"admin", key.role == key_role::admin},
         {"createdAt", time_text::format_rfc3339_ms(key.created_at_ms)}});
  }
  return json_response(200, {{"apiKeys", std::move(keys)}});
}

http_response api::revoke_key(request& ctx) {
  const std::string& id = ctx.params[0];
  if (auto not_in_step = keys_not_in_step()) {
    return *not_in_step;
  }
  if (auto problem = only_fields(ctx.body, {})) {
    return *problem;
  }
  auto revoked = keys_.revoke_key(ctx.caller.tenant, id, ctx.caller.role);
  if (!revoked) {
    return error_response(revoked.error());
  }
  switch (*revoked) {
    case revoke_refusal::none:
      break;
    case revoke_refusal::not_found:
      return error_response(404, "api-key-not-found",
                            "no API key '" + id + "' in this tenant");
    case revoke_refusal::higher_role:
      return error_response(
          403, "forbidden",
          "a key of role " + std::string(to_string(ctx.caller.role)) +
              " may not revoke API key '" + id + "', whose role is higher");
    case revoke_refusal::last_admin_key:
      return error_response(
          409, "last-admin-key",
          "API key '" + id +
              "' is the last admin key; create another admin key first (or "
              "recover offline with `durin admin reset-key`)");
  }
  // Revoked now or before (a retry): every live node gets it again.
  auto revoked_record = keys_.key_record(id);
  if (!revoked_record) {
    return error_response(revoked_record.error());
  }
  if (*revoked_record) {
    if (auto missed = spread_keys({{}, {**revoked_record}}, key_change::revoked,
                                  ctx.caller)) {
      return *missed;
    }
  }
  return json_response(200, {{"id", id}, {"revoked", true}});
}

http_response api::create_tenant(request& ctx) {
  std::string name;
  if (auto problem = optional_name(ctx.body, name)) {
    return *problem;
  }
  if (name.empty()) {
    return bad_request("missing field 'name' (a non-empty string)");
  }
  if (auto not_in_step = keys_not_in_step()) {
    return *not_in_step;
  }
  auto made = keys_.create_tenant(name);
  if (!made) {
    return error_response(made.error());
  }
  if (auto missed = spread_keys({{made->tenant}, {made->first_key.record}},
                                key_change::created, ctx.caller)) {
    return *missed;
  }
  return json_response(201, {{"id", made->tenant.id},
                             {"name", made->tenant.name},
                             {"apiKey",
                              {{"id", made->first_key.record.id},
                               {"secret", made->first_key.secret}}}});
}

void api::worker_route(const request_ptr& r, reply_fn reply) {
  worker_request work{
      r->caller.tenant,          r->http.method,   r->path, r->query, r->body,
      options_.tenant_polls_max, r->caller.admin()};
  if (r->caller.role == key_role::worker) {
    work.owner_prefix = r->caller.key_id + "/";
  }
  // In a cluster: polls, batches and the tasks view reach every node.
  if (worker_routing_ != nullptr &&
      worker_routing_->take(work, r->http, r->caller, r->forwarded, reply)) {
    return;
  }
  if (r->http.method == "GET") {
    reply(handle_worker_route(node_, work));  // memory reads only
    return;
  }
  // Never with a waiting thread: a poll that finds its queue empty is
  // parked in the task service until a task, its wait's end or the drain.
  answer_worker_route(node_, work, std::move(reply));
}

}  // namespace durin::gateway
