// The request pipeline: every request passes here once, in this order:
// target parsed, route matched, caller authenticated, body parsed, key
// decided, handler run (on the io thread, or on a gateway worker when the
// route may block), answer observed in the metrics and, for a keyed
// request, kept before it leaves.
#include "gateway/api.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "console/embedded.hpp"
#include "gateway/worker_api.hpp"
#include "gateway/worker_routing.hpp"
#include "persistence/test_points.hpp"
#include "services/node.hpp"
#include "services/runtime_access.hpp"

namespace durin::gateway {

using clock_type = std::chrono::steady_clock;

namespace {

// Test only: DURIN_TEST_HOLD_MS=N makes every keyed request hold its key N
// ms (on a gateway worker) before acting, so tests can send a repeat while
// the first runs; DURIN_TEST_HOLD_FORWARDED_MS=N makes every read another
// node forwarded here whose route may block (a list's page, a history)
// wait N ms before it runs, so tests can see it holds up nothing else of
// the node's peers.
long test_hold_env(const char* name) {
#if defined(DURIN_TEST_POINTS)
  const char* text = std::getenv(name);
  return text == nullptr ? 0L : std::atol(text);
#else
  (void)name;
  return 0;
#endif
}

long test_hold_ms() {
  static const long hold_ms = test_hold_env("DURIN_TEST_HOLD_MS");
  return hold_ms;
}

long test_hold_forwarded_ms() {
  static const long hold_ms = test_hold_env("DURIN_TEST_HOLD_FORWARDED_MS");
  return hold_ms;
}

bool matches(const std::vector<std::string_view>& pattern,
             const std::vector<std::string>& path,
             std::vector<std::string>* params) {
  if (pattern.size() != path.size()) {
    return false;
  }
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != "{}" && pattern[i] != path[i]) {
      return false;
    }
  }
  if (params != nullptr) {
    for (std::size_t i = 0; i < pattern.size(); ++i) {
      if (pattern[i] == "{}") {
        params->push_back(path[i]);
      }
    }
  }
  return true;
}

}  // namespace

const json& api::defaults_of(const route& chosen) {
  // Parsed once per route, at first use (the table is static).
  static const auto parsed = [] {
    std::map<const route*, json> out;
    for (const auto& candidate : routes()) {
      out.emplace(&candidate, json::parse(candidate.defaults));
    }
    return out;
  }();
  return parsed.at(&chosen);
}

key_role api::needed_role(access who) {
  switch (who) {
    case access::open:
    case access::read:
      return key_role::read_only;
    case access::work:
      return key_role::worker;
    case access::operate:
      return key_role::operate;
    case access::admin:
    case access::metrics:
    case access::internal:
      return key_role::admin;
  }
  return key_role::admin;
}

const std::vector<api::route>& api::routes() {
  using m = metrics::route;
  // clang-format off
  static const std::vector<route> table = {
      // method, pattern, metric, access, traits, handler
      {"GET", {"healthz"}, m::health, access::open, 0, &api::health,
       nullptr, "{}", "*"},
      {"GET", {"readyz"}, m::health, access::open, 0, &api::readiness,
       nullptr, "{}", "*"},
      {"GET", {"metrics"}, m::metrics, access::metrics, 0, &api::prometheus,
       nullptr, "{}", "*"},
      {"GET", {"v1", "cluster"}, m::other, access::admin, blocks,
       &api::cluster_view},
      {"POST", {"v1", "webhooks", "{}"}, m::webhooks, access::open, blocks,
       &api::webhook, nullptr, "{}", "*"},
      {"POST", {"v1", "runs"}, m::start, access::operate, json_body | keyed,
       nullptr, &api::start_run,
       R"({"input": {}, "wait": true, "onDuplicate": "reject-duplicate",
           "hook": null, "memo": null, "searchAttributes": null})"},
      // Pages of runs and histories can be large: built on a worker, so
      // they never hold an io thread up.
      {"GET", {"v1", "runs"}, m::list_runs, access::read, blocks,
       &api::list_runs, nullptr, "{}",
       "status,flow,scheduleId,query,limit,cursor"},
      // With ?waitMs=, a long poll for the run's end.
      {"GET", {"v1", "runs", "{}"}, m::get_run, access::read, 0, nullptr,
       &api::get_run, "{}", "waitMs"},
      {"GET", {"v1", "runs", "{}", "history"}, m::history, access::read,
       blocks, &api::run_history, nullptr, "{}", "after,limit"},
      {"POST", {"v1", "runs", "{}", "cancel"}, m::cancel, access::operate,
       json_body | keyed | blocks, &api::cancel_run},
      {"POST", {"v1", "runs", "{}", "terminate"}, m::cancel, access::operate,
       json_body | keyed | blocks, &api::terminate_run},
      // Messages and updates also carry their own key in the body (kept
      // with the run, for ever); the header's is the request's, as on
      // every mutating route.
      {"POST", {"v1", "runs", "{}", "messages", "{}"}, m::messages,
       access::operate, json_body | keyed | blocks, &api::send_message,
       nullptr, R"({"payload": null})"},
      {"POST", {"v1", "instances", "{}", "messages", "{}"}, m::messages,
       access::operate, json_body | keyed | blocks, &api::send_message,
       nullptr, R"({"payload": null})"},
      {"POST", {"v1", "runs", "{}", "updates", "{}"}, m::messages,
       access::operate, json_body | keyed | blocks, &api::update_run,
       nullptr, R"({"args": null, "waitFor": "completed"})"},
      {"GET", {"v1", "runs", "{}", "queries", "{}"}, m::messages,
       access::read, blocks, &api::query_run, nullptr, "{}", "args"},
      {"GET", {"v1", "run-counts"}, m::list_runs, access::read, blocks,
       &api::count_runs, nullptr, "{}", "flow"},
      {"GET", {"v1", "instances", "{}"}, m::get_run, access::read, 0,
       &api::get_instance},
      {"GET", {"v1", "hooks", "{}"}, m::hooks, access::read, 0,
       &api::get_hook},
      {"POST", {"v1", "hooks", "{}", "resume"}, m::hooks, access::operate,
       json_body | keyed | blocks, &api::resume_hook},
      {"POST", {"v1", "api-keys"}, m::api_keys, access::operate,
       json_body | keyed | secret | blocks, &api::create_key},
      {"GET", {"v1", "api-keys"}, m::api_keys, access::read, 0,
       &api::list_keys},
      {"DELETE", {"v1", "api-keys", "{}"}, m::api_keys, access::operate,
       json_body | keyed | blocks, &api::revoke_key},
      {"POST", {"v1", "tenants"}, m::tenants, access::admin,
       json_body | keyed | secret | blocks, &api::create_tenant},
      // Schedules (gateway/schedule_routes.cpp), in their schedule's shard.
      {"POST", {"v1", "schedules"}, m::other, access::operate,
       json_body | keyed | blocks, &api::create_schedule},
      {"GET", {"v1", "schedules"}, m::other, access::read, blocks,
       &api::list_schedules, nullptr, "{}", "limit,cursor"},
      {"GET", {"v1", "schedules", "{}"}, m::other, access::read, blocks,
       &api::get_schedule},
      {"DELETE", {"v1", "schedules", "{}"}, m::other, access::operate,
       json_body | keyed | blocks, &api::delete_schedule},
      {"POST", {"v1", "schedules", "{}", "pause"}, m::other, access::operate,
       json_body | keyed | blocks, &api::change_schedule},
      {"POST", {"v1", "schedules", "{}", "unpause"}, m::other,
       access::operate, json_body | keyed | blocks, &api::change_schedule},
      {"POST", {"v1", "schedules", "{}", "trigger"}, m::other,
       access::operate, json_body | keyed | blocks, &api::change_schedule},
      {"POST", {"v1", "schedules", "{}", "backfill"}, m::other,
       access::operate, json_body | keyed | blocks, &api::change_schedule},
      // Sent by other nodes of the cluster only (gateway/key_sync.hpp).
      {"POST", {"v1", "internal", "key-records"}, m::api_keys,
       access::internal, json_body | blocks, &api::merge_key_records},
      {"POST", {"v1", "internal", "key-table"}, m::api_keys,
       access::internal, json_body | blocks, &api::exchange_key_table},
      // gateway/remote_runs.cpp: the hook protocol between nodes.
      {"POST", {"v1", "internal", "hook-mail"}, m::hooks, access::internal,
       raw_body, &api::take_hook_mail},
      // Worker routes are fenced by attempt, not keyed (worker_api.hpp).
      {"POST", {"v1", "task-queues", "{}", "poll"}, m::other, access::work,
       json_body, nullptr, &api::worker_route},
      {"POST", {"v1", "tasks", "report"}, m::other, access::work,
       json_body, nullptr, &api::worker_route},
      {"POST", {"v1", "tasks", "{}", "complete"}, m::other, access::work,
       json_body, nullptr, &api::worker_route},
      {"POST", {"v1", "tasks", "{}", "fail"}, m::other, access::work,
       json_body, nullptr, &api::worker_route},
      {"POST", {"v1", "tasks", "{}", "heartbeat"}, m::other, access::work,
       json_body, nullptr, &api::worker_route},
      {"GET", {"v1", "tasks"}, m::other, access::read, 0, nullptr,
       &api::worker_route, "{}", "runId"},
  };
  // clang-format on
  return table;
}

api::api(runtime& node, auth& keys, idempotency& requests, metrics& counters,
         std::function<std::string()> extra_metrics, api_options options)
    : node_(node),
      keys_(keys),
      requests_(requests),
      metrics_(counters),
      extra_metrics_(std::move(extra_metrics)),
      options_(options),
      unsettled_(
          std::make_unique<services::due_list<std::shared_ptr<async_start>>>(
              std::chrono::milliseconds(500),
              [this](std::shared_ptr<async_start>& start) {
                on_unsettled(std::move(start));
              })),
      run_waits_(
          std::make_unique<services::due_list<std::shared_ptr<run_wait>>>(
              std::chrono::milliseconds(250),
              [this](std::shared_ptr<run_wait>& wait) {
                on_run_wait_tick(wait);
              })) {}

api::~api() {
  close();
}

void api::close() {
  clear_remote_port();
  unsettled_->stop();
  run_waits_->stop();
}

http_response api::handle(const http_request& http) {
  auto answered = std::make_shared<std::promise<http_response>>();
  auto answer = answered->get_future();
  dispatch(
      http,
      [answered](http_response response) {
        answered->set_value(std::move(response));
      },
      [](std::function<void()> job) { job(); });
  return answer.get();
}

void api::observe(metrics::route route, unsigned status,
                  clock_type::time_point began) {
  metrics_.observe(route, status,
                   std::chrono::duration_cast<std::chrono::microseconds>(
                       clock_type::now() - began)
                       .count());
}

api::request_ptr api::begin_request(http_request http,
                                    const offload_fn& offload,
                                    reply_fn& reply) {
  auto r = std::make_shared<request>();
  r->http = std::move(http);
  r->began = clock_type::now();
  r->offload = offload;
  // Every answer is observed once; a second one (a handler that threw after
  // answering) is dropped.
  reply = [this, r, reply = std::move(reply),
           once = std::make_shared<std::atomic<bool>>(false)](
              http_response response) {
    if (once->exchange(true)) {
      return;
    }
    observe(r->matched ? r->matched->metric : metrics::route::other,
            response.status, r->began);
    reply(std::move(response));
  };
  return r;
}

void api::dispatch(http_request http, reply_fn reply,
                   const offload_fn& offload) {
  auto r = begin_request(std::move(http), offload, reply);
  // The web console's files, built into the binary (console/), need no key.
  if (auto page = console::serve(r->http)) {
    reply(std::move(*page));
    return;
  }
  if (!parse_target(*r, reply)) {
    return;
  }
  const bool path_known = match_route(*r);
  if (!authenticate(*r, r->matched, reply)) {
    return;
  }
  if (r->path.size() >= 2 && r->path[0] == "v1" && r->path[1] == "internal") {
    // Only other nodes send these (dispatch_forwarded).
    reply(error_response(404, "not-found", "no route " + r->path_text));
    return;
  }
  dispatch_known(r, std::move(reply), path_known);
}

void api::dispatch_forwarded(http_request http, principal caller,
                             reply_fn reply, const offload_fn& offload) {
  // Observed where it is answered; the forwarding node counts it too, under
  // its own route.
  auto r = begin_request(std::move(http), offload, reply);
  r->caller = std::move(caller);
  r->forwarded = true;
  if (!parse_target(*r, reply)) {
    return;
  }
  const bool path_known = match_route(*r);
  dispatch_known(r, std::move(reply), path_known);
}

void api::dispatch_known(const request_ptr& r, reply_fn reply,
                         bool path_known) {
  if (r->matched == nullptr) {
    if (path_known) {
      const auto allow = allowed_methods(r->path);
      auto refused = error_response(405, "method-not-allowed",
                                    r->http.method + " is not allowed on " +
                                        r->path_text + "; it takes " + allow);
      refused.headers.emplace_back("Allow", allow);
      reply(std::move(refused));
    } else {
      reply(error_response(404, "not-found", "no route " + r->path_text));
    }
    return;
  }
  const route& chosen = *r->matched;
  if (!check_query(*r, chosen, reply) || !read_body(*r, chosen, reply)) {
    return;
  }
  if (placement_ != nullptr && !place(r, reply)) {
    return;
  }
  if (chosen.has(keyed) && !hold_key(r, reply)) {
    return;
  }
  if (run_elsewhere(r, reply)) {
    return;
  }
  run_handler(r, std::move(reply));
}

bool api::match_route(request& r) {
  // A HEAD is its GET (RFC 9110 9.3.2), served as one all the way (a
  // forward too), so it answers the same status and headers; the server
  // sends no body to a HEAD.
  const bool head = r.http.method == "HEAD";
  bool path_known = false;
  for (const auto& candidate : routes()) {
    if (matches(candidate.pattern, r.path, nullptr)) {
      path_known = true;
      if (candidate.method == r.http.method ||
          (head && candidate.method == "GET")) {
        r.matched = &candidate;
        if (head) {
          r.http.method = "GET";
        }
        matches(candidate.pattern, r.path, &r.params);
        break;
      }
    }
  }
  return path_known;
}

std::string api::allowed_methods(const std::vector<std::string>& path) {
  std::set<std::string_view> methods;
  for (const auto& candidate : routes()) {
    if (matches(candidate.pattern, path, nullptr)) {
      methods.insert(candidate.method);
      if (candidate.method == "GET") {
        methods.insert("HEAD");
      }
    }
  }
  std::string allow;
  for (auto method : methods) {
    allow.append(allow.empty() ? "" : ", ").append(method);
  }
  return allow;
}

void api::run_handler(const request_ptr& r, reply_fn reply) {
  if (r->http.method == "GET" && r->matched->who == access::read) {
    // A read may see a replicated write that landed here unsynced; it
    // answers once every write it could have seen is durable on the
    // shard's copies, so that no failover can take back what it told.
    reply = [this, reply = std::move(reply)](http_response response) {
      auto held = std::make_shared<http_response>(std::move(response));
      runtime_access::services(node_).after_replicated_writes(
          [reply, held](const status& durable) {
            reply(durable ? std::move(*held) : error_response(durable.error()));
          });
    };
  }
  long hold_ms = r->key ? test_hold_ms() : 0;
  if (r->forwarded && r->matched->has(blocks) &&
      r->matched->who == access::read) {
    hold_ms += test_hold_forwarded_ms();
  }
  const bool hold = hold_ms > 0;
  auto run = [this, r, reply = std::move(reply), hold_ms] {
    if (hold_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
    }
    const route& chosen = *r->matched;
    try {
      if (chosen.now != nullptr) {
        reply((this->*chosen.now)(*r));
      } else {
        (this->*chosen.later)(r, reply);
      }
    } catch (const std::exception& e) {
      reply(error_response(500, "internal",
                           std::string("unexpected error: ") + e.what()));
    }
  };
  if (r->matched->has(blocks) || hold) {
    r->offload(std::move(run));
  } else {
    run();
  }
}

bool api::authenticate(request& r, const route* matched,
                       const reply_fn& reply) {
  // Every /v1 path but webhooks needs a key, a path of no route too: an
  // unknown caller learns nothing about routes.
  bool needed =
      r.path.size() >= 2 && r.path[0] == "v1" && r.path[1] != "webhooks";
  if (matched != nullptr) {
    needed = matched->who != access::open &&
             !(matched->who == access::metrics && options_.metrics_open);
  }
  if (!needed) {
    return true;
  }
  // In a cluster, a key table that may miss a revocation authenticates
  // nobody (gateway/key_sync.hpp).
  if (auto not_in_step = keys_not_in_step()) {
    reply(std::move(*not_in_step));
    return false;
  }
  auto credential = header_once(r.http, "Authorization");
  if (credential.problem) {
    reply(std::move(*credential.problem));
    return false;
  }
  auto who = keys_.authenticate(credential.value);
  if (!who) {
    if (who.error().code == errc::invalid_argument) {
      auto response = error_response(401, "unauthorized", who.error().message);
      response.headers.emplace_back("WWW-Authenticate", "Bearer");
      reply(std::move(response));
    } else {
      reply(error_response(who.error()));
    }
    return false;
  }
  r.caller = std::move(*who);
  if (matched != nullptr && r.caller.role < needed_role(matched->who)) {
    reply(error_response(
        403, "forbidden",
        "a key of role " + std::string(to_string(r.caller.role)) + " may not " +
            r.http.method + " " + r.path_text + "; it needs " +
            std::string(to_string(needed_role(matched->who)))));
    return false;
  }
  return true;
}

bool api::check_query(const request& r, const route& matched,
                      const reply_fn& reply) {
  if (matched.query == "*") {
    return true;
  }
  auto listed = [](std::string_view names) {
    std::string text;
    for (char c : names) {
      text += c == ',' ? std::string(", ") : std::string(1, c);
    }
    return text;
  };
  auto takes = [&](std::string_view name) {
    for (std::string_view rest = matched.query; !rest.empty();) {
      auto comma = rest.find(',');
      if (rest.substr(0, comma) == name) {
        return true;
      }
      rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
    }
    return false;
  };
  for (auto at = r.query.begin(); at != r.query.end();
       at = r.query.upper_bound(at->first)) {
    const auto& name = at->first;
    std::string problem;
    if (!takes(name)) {
      problem = "unknown query parameter '" + name + "'; " + r.http.method +
                " " + r.path_text +
                (matched.query.empty() ? " takes no query parameters"
                                       : " takes " + listed(matched.query));
    } else if (r.query.count(name) > 1) {
      problem = "query parameter '" + name + "' is given more than once";
    } else {
      continue;
    }
    reply(bad_request(problem));
    return false;
  }
  return true;
}

bool api::read_body(request& r, const route& matched, const reply_fn& reply) {
  if (matched.has(json_body)) {
    auto parsed = parse_body(r.http.body, options_.json_depth_max);
    if (parsed.problem) {
      reply(std::move(*parsed.problem));
      return false;
    }
    r.body = std::move(parsed.value);
    return true;
  }
  r.body = json::object();
  if (matched.who != access::open && !matched.has(raw_body) &&
      !r.http.body.empty()) {
    reply(bad_request(r.http.method + " takes no body"));
    return false;
  }
  return true;
}

bool api::hold_key(const request_ptr& r, reply_fn& reply) {
  auto header = header_once(r->http, "Idempotency-Key");
  if (header.problem) {
    reply(std::move(*header.problem));
    return false;
  }
  if (!header.sent) {
    return true;
  }
  const std::string_view key = header.value;
  if (key.empty() || key.size() > limits::idempotency_key_bytes_max ||
      !printable_ascii(key)) {
    reply(bad_request("Idempotency-Key must be 1 to " +
                      std::to_string(limits::idempotency_key_bytes_max) +
                      " printable ASCII characters"));
    return false;
  }
  persistence::request_address address{r->caller.tenant, r->caller.key_id,
                                       std::string(key)};
  // The request's meaning, not its spelling: the body as parsed JSON (its
  // dump sorts keys and drops spacing), with absent defaults made explicit.
  std::string meaning;
  if (r->matched->defaults == "{}") {
    meaning = r->body.dump();
  } else {
    json filled = r->body;
    for (const auto& [name, value] : defaults_of(*r->matched).items()) {
      if (!filled.contains(name)) {
        filled[name] = value;
      }
    }
    meaning = filled.dump();
  }
  std::string fingerprint =
      r->http.method + "\n" + r->path_text + "\n" + meaning;
  auto decision = requests_.begin(address, fingerprint);
  if (decision.kind == idempotency::outcome::answered) {
    if (decision.response.status < 300) {
      metrics_.count_replay();
    } else {
      metrics_.count_refusal();
    }
    reply(std::move(decision.response));
    return false;
  }
  r->key = std::move(address);
  r->fingerprint = std::move(fingerprint);
  r->generation = decision.generation;
  r->recorded_run_id = decision.recorded_run_id;
  DURIN_TEST_KILL_POINT("gateway.after_hold");
  // The outcome is kept (or the key freed) before the answer leaves.
  reply = [this, r, reply = std::move(reply)](http_response response) {
    reply(requests_.finish(*r->key, r->fingerprint, r->generation,
                           std::move(response), r->matched->has(secret),
                           r->stored));
  };
  return true;
}

bool api::parse_target(request& ctx, const reply_fn& reply) {
  const auto& request = ctx.http;
  std::string_view target = request.target;
  if (target.empty() || target[0] != '/' ||
      target.size() > options_.path_bytes_max) {
    reply(error_response(400, "invalid-path",
                         "the request target must be a path of at most " +
                             std::to_string(options_.path_bytes_max) +
                             " bytes"));
    return false;
  }
  auto question = target.find('?');
  std::string_view path = target.substr(0, question);
  std::string_view query =
      question == std::string_view::npos ? "" : target.substr(question + 1);
  std::size_t at = 1;
  while (at <= path.size()) {
    auto next = path.find('/', at);
    if (next == std::string_view::npos) {
      next = path.size();
    }
    auto raw = path.substr(at, next - at);
    if (raw.empty() && next == path.size() && at == path.size() &&
        ctx.path.empty()) {
      break;  // the path "/"
    }
    auto segment = percent_decode(raw, false);
    // A segment obeys the rule every addressable id obeys (durin/ids.hpp).
    if (!segment || !id_problem("", *segment, options_.id_bytes_max).empty()) {
      reply(error_response(400, "invalid-path",
                           "the path has an empty, dot, malformed or too "
                           "long segment"));
      return false;
    }
    ctx.path.push_back(std::move(*segment));
    at = next + 1;
  }
  for (const auto& segment : ctx.path) {
    ctx.path_text += "/" + segment;
  }
  while (!query.empty()) {
    auto amp = query.find('&');
    auto pair = query.substr(0, amp);
    auto eq = pair.find('=');
    auto name = percent_decode(pair.substr(0, eq), true);
    auto value = percent_decode(
        eq == std::string_view::npos ? "" : pair.substr(eq + 1), true);
    if (!name || !value || !valid_utf8(*name) || !valid_utf8(*value)) {
      reply(error_response(400, "invalid-path", "malformed query string"));
      return false;
    }
    if (!name->empty()) {
      ctx.query.emplace(std::move(*name), std::move(*value));
    }
    query = amp == std::string_view::npos ? "" : query.substr(amp + 1);
  }
  return true;
}

}  // namespace durin::gateway
