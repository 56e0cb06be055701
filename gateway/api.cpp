#include "gateway/api.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "actors/admission.hpp"
#include "gateway/worker_api.hpp"
#include "persistence/test_points.hpp"
#include "services/node.hpp"

namespace durin::gateway {

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
  std::function<void(http_response)> reply;
  offload_fn offload;
  std::chrono::steady_clock::time_point began;
  std::optional<persistence::request_address> address;
  std::string fingerprint;
  std::uint64_t generation = 0;
  std::string tenant;
  std::shared_ptr<std::optional<http_response>> kept =
      std::make_shared<std::optional<http_response>>();
  // A waited start only: its run and the answer its settling batch
  // carries, and who answers: the first to set `claimed` (the settled run,
  // or the hand-over to an offload).
  settle_answer settle;
  std::atomic<bool> claimed{false};
};

namespace {

// Test only: DURIN_TEST_HOLD_MS=N makes every keyed request hold its key N
// ms before acting, so tests can send a repeat while the first runs.
void test_delay() {
#if defined(DURIN_TEST_POINTS)
  static const long hold_ms = [] {
    const char* text = std::getenv("DURIN_TEST_HOLD_MS");
    return text == nullptr ? 0L : std::atol(text);
  }();
  if (hold_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  }
#endif
}

using clock_type = std::chrono::steady_clock;

int hex_value(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

// Percent-decodes `text`; nullopt for a malformed escape.
std::optional<std::string> percent_decode(std::string_view text,
                                          bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size()) {
        return std::nullopt;
      }
      int high = hex_value(text[i + 1]);
      int low = hex_value(text[i + 2]);
      if (high < 0 || low < 0) {
        return std::nullopt;
      }
      out.push_back(static_cast<char>(high * 16 + low));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

bool printable_ascii(std::string_view text) {
  for (char c : text) {
    if (c < 0x21 || c > 0x7e) {
      return false;
    }
  }
  return true;
}

// The body as JSON: an empty body is {} for routes without a required body.
struct parsed_body {
  json value;
  std::optional<http_response> problem;
};

parsed_body parse_body(const std::string& body, std::size_t depth_max) {
  if (body.empty()) {
    return {json::object(), std::nullopt};
  }
  if (!valid_utf8(body)) {
    return {json(),
            error_response(400, "invalid-json", "the body is not valid UTF-8")};
  }
  std::size_t depth = 0;
  bool too_deep = false;
  json value;
  try {
    value = json::parse(body, [&](int, json::parse_event_t event, json&) {
      if (event == json::parse_event_t::object_start ||
          event == json::parse_event_t::array_start) {
        if (++depth > depth_max) {
          too_deep = true;
          throw std::out_of_range("too deep");
        }
      } else if (event == json::parse_event_t::object_end ||
                 event == json::parse_event_t::array_end) {
        --depth;
      }
      return true;
    });
  } catch (const json::exception& e) {
    return {json(),
            error_response(400, "invalid-json",
                           std::string("the body is not JSON: ") + e.what())};
  } catch (const std::out_of_range&) {
    too_deep = true;
  }
  if (too_deep) {
    return {json(), error_response(400, "invalid-json",
                                   "the body nests deeper than " +
                                       std::to_string(depth_max) + " levels")};
  }
  if (!value.is_object()) {
    return {json(), error_response(400, "invalid-argument",
                                   "the body must be a JSON object")};
  }
  return {std::move(value), std::nullopt};
}

// Refuses fields other than `allowed`.
std::optional<http_response> only_fields(const json& body,
                                         std::set<std::string> allowed) {
  for (const auto& [key, value] : body.items()) {
    (void)value;
    if (allowed.count(key) == 0) {
      std::string names;
      for (const auto& name : allowed) {
        names += (names.empty() ? "" : ", ") + name;
      }
      return bad_request("unknown field '" + key + "'; allowed: " + names);
    }
  }
  return std::nullopt;
}

metrics::route route_of(const std::vector<std::string>& path,
                        const std::string& method) {
  if (path.size() == 1 && path[0] == "healthz") {
    return metrics::route::health;
  }
  if (path.size() == 1 && path[0] == "metrics") {
    return metrics::route::metrics;
  }
  if (path.size() < 2 || path[0] != "v1") {
    return metrics::route::other;
  }
  const auto& family = path[1];
  if (family == "runs") {
    if (path.size() == 2) {
      return method == "POST" ? metrics::route::start
                              : metrics::route::list_runs;
    }
    if (path.size() == 4 && path[3] == "history") {
      return metrics::route::history;
    }
    if (path.size() == 4 && path[3] == "cancel") {
      return metrics::route::cancel;
    }
    return metrics::route::get_run;
  }
  if (family == "hooks") {
    return metrics::route::hooks;
  }
  if (family == "webhooks") {
    return metrics::route::webhooks;
  }
  if (family == "api-keys") {
    return metrics::route::api_keys;
  }
  if (family == "tenants") {
    return metrics::route::tenants;
  }
  return metrics::route::other;
}

}  // namespace

bool valid_utf8(std::string_view text) {
  std::size_t i = 0;
  const auto* b = reinterpret_cast<const unsigned char*>(text.data());
  while (i < text.size()) {
    unsigned char c = b[i];
    std::size_t extra = 0;
    std::uint32_t code = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1;
      code = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      code = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      code = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= text.size()) {
      return false;
    }
    for (std::size_t k = 1; k <= extra; ++k) {
      if ((b[i + k] & 0xC0) != 0x80) {
        return false;
      }
      code = (code << 6) | (b[i + k] & 0x3F);
    }
    if ((extra == 1 && code < 0x80) || (extra == 2 && code < 0x800) ||
        (extra == 3 && (code < 0x10000 || code > 0x10FFFF)) ||
        (code >= 0xD800 && code <= 0xDFFF)) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

unsigned http_status_of(errc code) {
  switch (code) {
    case errc::invalid_argument:
    case errc::invalid_input:
      return 400;
    case errc::flow_not_found:
    case errc::step_not_found:
    case errc::run_not_found:
    case errc::hook_not_found:
      return 404;
    case errc::run_finished:
    case errc::hook_conflict:
    case errc::nondeterministic_replay:
    case errc::cancelled:
      return 409;
    case errc::timeout:
      return 504;
    case errc::storage_error:
    case errc::shutting_down:
    case errc::start_outcome_unknown:
      return 503;
    case errc::step_failed:
    case errc::flow_error:
      return 422;
    case errc::corrupt_record:
    case errc::internal:
      return 500;
  }
  return 500;
}

http_response json_response(unsigned status, const json& body) {
  http_response response;
  response.status = status;
  response.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return response;
}

http_response bad_request(std::string_view message) {
  return error_response(400, "invalid-argument", message);
}

http_response error_response(const error& err) {
  json body = {{"code", to_code(err.code)}, {"message", err.message}};
  if (err.code == errc::hook_conflict && !err.run_id.empty()) {
    body["conflictingRunId"] = err.run_id;
  }
  if (err.code == errc::start_outcome_unknown && !err.run_id.empty()) {
    body["runId"] = err.run_id;
  }
  return json_response(http_status_of(err.code), body);
}

struct api::context {
  const http_request& request;
  std::vector<std::string> path;  // decoded segments
  std::string path_text;          // the normalised path
  std::multimap<std::string, std::string> query;
  principal caller;
  json body;
  metrics::route route = metrics::route::other;
  // Set while a keyed request runs: its key, for the admission's records.
  std::optional<persistence::request_address> held_key;
  std::string fingerprint;
  std::string recorded_run_id;  // see idempotency::decision
  // What the request made durable for its key (a start's admission).
  idempotency::stored stored = idempotency::stored::nothing;
};

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
                if (!start->claimed.exchange(true)) {
                  hand_over(std::move(start));
                }
              })) {}

api::~api() {
  close();
}

void api::close() {
  unsettled_->stop();
}

http_response api::handle(const http_request& request) {
  const auto began = clock_type::now();
  context ctx{request};
  http_response response = route(ctx);
  observe(ctx.route, response.status, began);
  return response;
}

void api::observe(metrics::route route, unsigned status,
                  std::chrono::steady_clock::time_point began) {
  metrics_.observe(route, status,
                   std::chrono::duration_cast<std::chrono::microseconds>(
                       clock_type::now() - began)
                       .count());
}

bool api::accept_on_io_thread(
    context& ctx, const std::function<bool(const context&)>& wanted) {
  if (parse_target(ctx) || !wanted(ctx)) {
    return false;
  }
  auto who = keys_.authenticate(ctx.request.header("authorization"));
  if (!who) {
    return false;
  }
  auto parsed = parse_body(ctx.request.body, options_.json_depth_max);
  if (parsed.problem) {
    return false;
  }
  ctx.body = std::move(parsed.value);
  ctx.caller = *who;
  return true;
}

std::optional<http_response> api::parse_target(context& ctx) {
  const auto& request = ctx.request;
  std::string_view target = request.target;
  if (target.empty() || target[0] != '/' ||
      target.size() > options_.path_bytes_max) {
    return error_response(400, "invalid-path",
                          "the request target must be a path of at most " +
                              std::to_string(options_.path_bytes_max) +
                              " bytes");
  }
  auto question = target.find('?');
  std::string_view path = target.substr(0, question);
  std::string_view query =
      question == std::string_view::npos ? "" : target.substr(question + 1);
  // Segments: no empty ones, no dot segments, no encoded separators.
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
    if (raw.empty() || !segment || segment->empty() || *segment == "." ||
        *segment == ".." || segment->find('/') != std::string::npos ||
        segment->find('\\') != std::string::npos ||
        segment->find('\0') != std::string::npos || !valid_utf8(*segment) ||
        segment->size() > options_.id_bytes_max) {
      return error_response(400, "invalid-path",
                            "the path has an empty, dot, malformed or too "
                            "long segment");
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
      return error_response(400, "invalid-path", "malformed query string");
    }
    if (!name->empty()) {
      ctx.query.emplace(std::move(*name), std::move(*value));
    }
    query = amp == std::string_view::npos ? "" : query.substr(amp + 1);
  }
  ctx.route = route_of(ctx.path, request.method);
  return std::nullopt;
}

std::string api::fingerprint_of(const context& ctx) {
  // Bodies compare as parsed JSON: the canonical dump sorts keys and drops
  // spacing.
  return ctx.request.method + "\n" + ctx.path_text + "\n" + ctx.body.dump() +
         "\n" + std::string(ctx.request.header("content-type"));
}

std::optional<http_response> api::try_replay(const http_request& request) {
  auto key = request.header("idempotency-key");
  if ((request.method != "POST" && request.method != "DELETE") || key.empty() ||
      key.size() > 255 || !printable_ascii(key)) {
    return std::nullopt;
  }
  const auto began = clock_type::now();
  context ctx{request};
  if (!accept_on_io_thread(ctx, [](const context& c) {
        return c.path.size() >= 2 && c.path[0] == "v1" &&
               c.path[1] != "webhooks";
      })) {
    return std::nullopt;
  }
  persistence::request_address address{ctx.caller.tenant, ctx.caller.key_id,
                                       std::string(key)};
  auto answer = requests_.peek(address, fingerprint_of(ctx));
  if (answer) {
    if (answer->status < 300) {
      metrics_.count_replay();
    } else {
      metrics_.count_refusal();
    }
    observe(ctx.route, answer->status, began);
  }
  return answer;
}

http_response api::route(context& ctx) {
  if (auto problem = parse_target(ctx)) {
    return *problem;
  }
  const auto& request = ctx.request;
  const auto& method = request.method;
  const auto& p = ctx.path;
  auto method_not_allowed = [&] {
    return error_response(405, "method-not-allowed",
                          method + " is not allowed on " + ctx.path_text);
  };
  if (p.size() == 1 && p[0] == "healthz") {
    return method == "GET" ? json_response(200, {{"status", "ok"}})
                           : method_not_allowed();
  }
  if (p.size() == 1 && p[0] == "metrics") {
    if (method != "GET") {
      return method_not_allowed();
    }
    http_response response;
    response.content_type = "text/plain; version=0.0.4";
    response.body = metrics_.render(extra_metrics_ ? extra_metrics_() : "");
    return response;
  }
  if (p.size() == 3 && p[0] == "v1" && p[1] == "webhooks") {
    return method == "POST" ? webhook(ctx, p[2]) : method_not_allowed();
  }
  if (p.empty() || p[0] != "v1" || p.size() < 2) {
    return error_response(404, "not-found", "no route " + ctx.path_text);
  }
  auto who = keys_.authenticate(request.header("authorization"));
  if (!who) {
    if (who.error().code == errc::invalid_argument) {
      auto response = error_response(401, "unauthorized", who.error().message);
      response.headers.emplace_back("WWW-Authenticate", "Bearer");
      return response;
    }
    return error_response(who.error());
  }
  ctx.caller = std::move(*who);
  const bool mutating = method == "POST" || method == "DELETE";
  if (mutating) {
    auto parsed = parse_body(request.body, options_.json_depth_max);
    if (parsed.problem) {
      return *parsed.problem;
    }
    ctx.body = std::move(parsed.value);
  } else if (!request.body.empty()) {
    return bad_request(method + " takes no body");
  }
  const auto& family = p[1];
  if (is_worker_route(p)) {
    return handle_worker_route(
        node_, {ctx.caller.tenant, method, p, ctx.query, ctx.body});
  }
  if (family == "runs") {
    if (p.size() == 2) {
      if (method == "POST") {
        return mutate(ctx, false, [&] { return start_run(ctx); });
      }
      return method == "GET" ? list_runs(ctx) : method_not_allowed();
    }
    if (p.size() == 3) {
      return method == "GET" ? get_run(ctx, p[2]) : method_not_allowed();
    }
    if (p.size() == 4 && p[3] == "history") {
      return method == "GET" ? run_history(ctx, p[2]) : method_not_allowed();
    }
    if (p.size() == 4 && p[3] == "cancel") {
      if (method != "POST") {
        return method_not_allowed();
      }
      return mutate(ctx, false, [&] { return cancel_run(ctx, p[2]); });
    }
  } else if (family == "run-counts" && p.size() == 2) {
    return method == "GET" ? count_runs(ctx) : method_not_allowed();
  } else if (family == "instances" && p.size() == 3) {
    if (method != "GET") {
      return method_not_allowed();
    }
    auto run = node_.get_instance(p[2], ctx.caller.tenant);
    return run ? run_response(200, *run) : error_response(run.error());
  } else if (family == "hooks") {
    if (p.size() == 3 && method != "GET") {
      return method_not_allowed();
    }
    if (p.size() == 4 && p[3] == "resume" && method != "POST") {
      return method_not_allowed();
    }
    if (p.size() == 3) {
      return get_hook(ctx, p[2]);
    }
    if (p.size() == 4 && p[3] == "resume") {
      return mutate(ctx, false, [&] { return resume_hook(ctx, p[2]); });
    }
  } else if (family == "api-keys") {
    if (p.size() == 2 && method == "POST") {
      return mutate(ctx, true, [&] { return create_key(ctx); });
    }
    if (p.size() == 2) {
      return method == "GET" ? list_keys(ctx) : method_not_allowed();
    }
    if (p.size() == 3) {
      if (method != "DELETE") {
        return method_not_allowed();
      }
      return mutate(ctx, false, [&] { return revoke_key(ctx, p[2]); });
    }
  } else if (family == "tenants" && p.size() == 2) {
    if (method != "POST") {
      return method_not_allowed();
    }
    if (!ctx.caller.admin) {
      return error_response(403, "forbidden",
                            "only an admin key may create tenants");
    }
    return mutate(ctx, true, [&] { return create_tenant(ctx); });
  }
  return error_response(404, "not-found", "no route " + ctx.path_text);
}

http_response api::mutate(context& ctx, bool carries_secret,
                          const std::function<http_response()>& act) {
  auto key = ctx.request.header("idempotency-key");
  if (key.empty()) {
    return act();
  }
  if (key.size() > 255 || !printable_ascii(key)) {
    return bad_request(
        "Idempotency-Key must be 1 to 255 printable ASCII characters");
  }
  persistence::request_address address{ctx.caller.tenant, ctx.caller.key_id,
                                       std::string(key)};
  std::string fingerprint = fingerprint_of(ctx);
  auto decision = requests_.begin(address, fingerprint);
  if (decision.kind == idempotency::outcome::answered) {
    bool replay = decision.response.status < 300;
    if (replay) {
      metrics_.count_replay();
    } else {
      metrics_.count_refusal();
    }
    return std::move(decision.response);
  }
  ctx.held_key = address;
  ctx.fingerprint = fingerprint;
  ctx.recorded_run_id = decision.recorded_run_id;
  DURIN_TEST_KILL_POINT("gateway.after_hold");
  test_delay();
  http_response response;
  try {
    response = act();
  } catch (const std::exception& e) {
    response = error_response(500, "internal", e.what());
  }
  return requests_.finish(address, fingerprint, decision.generation,
                          std::move(response), carries_secret, ctx.stored);
}

http_response api::run_response(unsigned status, const run_info& run) {
  metrics_.count_run_status(to_string(run.status));
  return json_response(status, run.to_json());
}

http_response api::start_run(context& ctx) {
  const auto& body = ctx.body;
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
  bool wait = true;
  if (body.contains("wait")) {
    if (!body["wait"].is_boolean()) {
      return bad_request("field 'wait' must be true or false");
    }
    wait = body["wait"].get<bool>();
  }
  json input = body.contains("input") ? body["input"] : json::object();
  start_options options;
  options.tenant = ctx.caller.tenant;
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
  auto kept = std::make_shared<std::optional<http_response>>();
  std::shared_ptr<settle_answer> settled_answer;
  if (ctx.held_key && ctx.recorded_run_id.empty()) {
    if (wait) {
      settled_answer = std::make_shared<settle_answer>();
    }
    options.admission = admission_for(&*ctx.held_key, ctx.fingerprint, wait,
                                      kept, settled_answer);
    ctx.stored = idempotency::stored::marker;
  }
  auto started = ctx.recorded_run_id.empty()
                     ? node_.start(body["flow"].get<std::string>(),
                                   std::move(input), options)
                     : node_.get(ctx.recorded_run_id, options.tenant);
  if (!started) {
    return error_response(started.error());
  }
  if (ctx.recorded_run_id.empty()) {
    metrics_.count_start();
    DURIN_TEST_KILL_POINT("gateway.after_admit");
  }
  if (!wait) {
    if (*kept) {
      ctx.stored = idempotency::stored::answer;
      metrics_.count_run_status(to_string(started->status));
      return std::move(**kept);
    }
    return run_response(202, *started);
  }
  return answer_waited(
      started->id, options.tenant, settled_answer.get(),
      clock_type::now() + std::chrono::milliseconds(options_.wait_ms_max),
      ctx.stored);
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
        settled->run_id = run.id;  // before any write: a hand-over needs it
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

bool api::try_start_async(const http_request& request,
                          std::function<void(http_response)> reply,
                          const offload_fn& offload) {
#if defined(DURIN_TEST_POINTS)
  if (std::getenv("DURIN_TEST_HOLD_MS") != nullptr) {
    return false;  // the hold is a test of the blocking path
  }
#endif
  if (request.method != "POST") {
    return false;
  }
  const auto began = clock_type::now();
  context ctx{request};
  if (!accept_on_io_thread(ctx, [](const context& c) {
        return c.path.size() == 2 && c.path[0] == "v1" && c.path[1] == "runs";
      })) {
    return false;
  }
  const auto& who = ctx.caller;
  ctx.route = metrics::route::start;
  const auto& body = ctx.body;
  // Only the plain case; everything to explain goes the blocking way.
  if (only_fields(body, {"flow", "input", "wait"}) || !body.contains("flow") ||
      !body["flow"].is_string() || body["flow"].get<std::string>().empty() ||
      (body.contains("wait") && !body["wait"].is_boolean())) {
    return false;
  }
  const bool wait = body.value("wait", true);
  auto key = request.header("idempotency-key");
  if (!key.empty() && (key.size() > 255 || !printable_ascii(key))) {
    return false;
  }
  auto start = std::make_shared<async_start>();
  start->reply = std::move(reply);
  start->began = began;
  start->tenant = who.tenant;
  if (!key.empty()) {
    start->address =
        persistence::request_address{who.tenant, who.key_id, std::string(key)};
    start->fingerprint = fingerprint_of(ctx);
    auto decision = requests_.begin(*start->address, start->fingerprint);
    if (decision.kind == idempotency::outcome::answered) {
      if (decision.response.status < 300) {
        metrics_.count_replay();
      } else {
        metrics_.count_refusal();
      }
      observe(metrics::route::start, decision.response.status, began);
      start->reply(std::move(decision.response));
      return true;
    }
    if (!decision.recorded_run_id.empty()) {
      // A run an earlier process admitted for this key: the blocking path
      // answers it. Give the key back first (no write).
      (void)requests_.finish(*start->address, start->fingerprint,
                             decision.generation,
                             error_response(409, "retry", "retry"), false,
                             idempotency::stored::marker);
      return false;
    }
    start->generation = decision.generation;
    DURIN_TEST_KILL_POINT("gateway.after_hold");
  }
  start_options options;
  options.tenant = who.tenant;
  if (wait) {
    start->offload = offload;
    // The settle hooks hold the start through an alias of its answer, so
    // `then` may use it by address.
    auto* raw = start.get();
    std::shared_ptr<settle_answer> settled(start, &start->settle);
    start->settle.then = [this, raw] { on_settled(*raw); };
    options.admission = admission_for(
        start->address ? &*start->address : nullptr, start->fingerprint, true,
        start->kept, std::move(settled));
  } else if (start->address) {
    options.admission =
        admission_for(&*start->address, start->fingerprint, false, start->kept);
  }
  json input = body.contains("input") ? body["input"] : json::object();
  auto done = [this, start, wait](result<run_info> started) {
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
    if (start->address) {
      // Only the admission's marker holds the key; keeping the answer now
      // would block this (the committer's) thread.
      response.headers.emplace_back("Idempotency-Key-Kept", "false");
    }
    answer(*start, std::move(response), idempotency::stored::answer);
  };
  node_.start_async(body["flow"].get<std::string>(), std::move(input), options,
                    std::move(done));
  return true;
}

void api::answer(async_start& start, http_response response,
                 idempotency::stored already) {
  if (start.address) {
    // Writes only when `already` says the answer is not kept yet: never so
    // on the io thread, the committer's or an actor's.
    response =
        requests_.finish(*start.address, start.fingerprint, start.generation,
                         std::move(response), false, already);
  }
  observe(metrics::route::start, response.status, start.began);
  start.reply(std::move(response));
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
  auto offload = start->offload;
  offload([this, start = std::move(start)] {
    auto stored = idempotency::stored::marker;
    metrics_.count_hand_over();
    auto response = answer_waited(
        start->settle.run_id, start->tenant, &start->settle,
        start->began + std::chrono::milliseconds(options_.wait_ms_max), stored);
    answer(*start, std::move(response), stored);
  });
}

bool api::try_worker_async(const http_request& request,
                           std::function<void(http_response)> reply) {
  if (request.method != "POST") {
    return false;  // GETs are answered inline
  }
  const auto began = clock_type::now();
  context ctx{request};
  if (!accept_on_io_thread(
          ctx, [](const context& c) { return is_worker_route(c.path); })) {
    return false;
  }
  auto observed = [this, began, route = ctx.route,
                   reply = std::move(reply)](http_response response) {
    observe(route, response.status, began);
    reply(std::move(response));
  };
  return try_worker_route_async(node_,
                                {ctx.caller.tenant, request.method, ctx.path,
                                 ctx.query, std::move(ctx.body)},
                                std::move(observed));
}

http_response api::get_run(context& ctx, const std::string& id) {
  auto run = node_.get(id, ctx.caller.tenant);
  if (!run) {
    return error_response(run.error());
  }
  return run_response(200, *run);
}

http_response api::list_runs(context& ctx) {
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
                           "'; one of pending, running, waiting, completed, "
                           "failed, cancelled");
      }
      filter.status = status;
    } else if (name == "flow") {
      if (!value.empty()) {
        filter.flow = value;
      }
    } else if (name == "limit") {
      if (value.empty()) {
        continue;
      }
      std::size_t limit = 0;
      bool digits = value.size() <= 4;
      for (char c : value) {
        digits = digits && c >= '0' && c <= '9';
      }
      if (digits) {
        limit = std::stoul(value);
      }
      if (!digits || limit < 1 || limit > 1000) {
        return bad_request("limit must be a number from 1 to 1000");
      }
      filter.limit = limit;
    } else if (name == "cursor") {
      filter.cursor = value;
    } else {
      return bad_request("unknown query parameter '" + name +
                         "'; allowed: status, flow, limit, cursor");
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
  return json_response(200, {{"runs", std::move(runs)}, {"nextCursor", next}});
}

namespace {

// A number of at most `digits_max` decimal digits in `min..max`; nullopt
// otherwise.
std::optional<std::uint64_t> query_number(const std::string& value,
                                          std::uint64_t min, std::uint64_t max,
                                          std::size_t digits_max) {
  if (value.empty() || value.size() > digits_max) {
    return std::nullopt;
  }
  std::uint64_t number = 0;
  for (char c : value) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    number = number * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (number < min || number > max) {
    return std::nullopt;
  }
  return number;
}

}  // namespace

http_response api::run_history(context& ctx, const std::string& id) {
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
    } else if (name == "limit") {
      limit = query_number(value, 1, history_page_max, 4);
      if (!limit) {
        return bad_request("limit must be a number from 1 to " +
                           std::to_string(history_page_max));
      }
    } else {
      return bad_request("unknown query parameter '" + name +
                         "'; allowed: after, limit");
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

http_response api::count_runs(context& ctx) {
  run_filter filter;
  filter.tenant = ctx.caller.tenant;
  filter.limit = 1000;
  for (const auto& [name, value] : ctx.query) {
    if (name != "flow") {
      return bad_request("unknown query parameter '" + name +
                         "'; allowed: flow");
    }
    if (!value.empty()) {
      filter.flow = value;
    }
  }
  // The tenant's runs, page by page, newest first, up to count_runs_max:
  // beyond that the counts are of the newest ones ("complete": false).
  std::map<std::string, std::uint64_t> counts;
  for (auto status :
       {run_status::pending, run_status::running, run_status::waiting,
        run_status::blocked, run_status::completed, run_status::failed,
        run_status::cancelled}) {
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
  return json_response(
      200, {{"counts", counts}, {"total", total}, {"complete", complete}});
}

http_response api::cancel_run(context& ctx, const std::string& id) {
  if (auto problem = only_fields(ctx.body, {"reason", "commandId"})) {
    return *problem;
  }
  cancel_options options;
  options.tenant = ctx.caller.tenant;
  for (const char* field : {"reason", "commandId"}) {
    if (ctx.body.contains(field) && !ctx.body[field].is_string()) {
      return bad_request(std::string("field '") + field + "' must be a string");
    }
  }
  options.reason = ctx.body.value("reason", std::string());
  options.command_id = ctx.body.value("commandId", std::string());
  auto run = node_.cancel(id, options);
  if (!run) {
    return error_response(run.error());
  }
  return run_response(200, *run);
}

http_response api::get_hook(context& ctx, const std::string& token) {
  auto hook = node_.get_hook_by_token(token, ctx.caller.tenant);
  if (!hook) {
    return error_response(hook.error());
  }
  return json_response(200, hook->to_json());
}

http_response api::resume_hook(context& ctx, const std::string& token) {
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
  } else if (ctx.held_key) {
    // The key names the command: a resume retried after a crash is not
    // delivered twice.
    options.resume_id = ctx.caller.key_id + ":" + ctx.held_key->key;
  }
  auto owner = node_.resume_hook(token, ctx.body["payload"], options);
  if (!owner) {
    return error_response(owner.error());
  }
  return json_response(200, {{"runId", *owner}});
}

http_response api::webhook(context& ctx, const std::string& token) {
  // No API key: the random token is the secret. Unknown tokens answer 404
  // with an empty body, so the route tells nothing about tokens.
  http_response unknown;
  unknown.status = 404;
  unknown.content_type.clear();
  if (token.rfind("wh_", 0) != 0) {
    return unknown;
  }
  json headers = json::object();
  for (const auto& [name, value] : ctx.request.headers) {
    if (name != "authorization" && valid_utf8(value)) {
      headers[name] = value;
    }
  }
  json body;
  if (!ctx.request.body.empty()) {
    if (!valid_utf8(ctx.request.body)) {
      return error_response(400, "invalid-argument",
                            "a webhook body must be UTF-8 text");
    }
    body = json::parse(ctx.request.body, nullptr, false);
    if (body.is_discarded()) {
      body = ctx.request.body;
    }
  }
  json payload = {{"method", ctx.request.method},
                  {"headers", std::move(headers)},
                  {"body", std::move(body)}};
  // The webhook index names the token's tenant (written with the
  // webhook's claim, removed with its release).
  auto tenant = services::services_of(node_).store->get_webhook_tenant(token);
  if (!tenant) {
    return error_response(tenant.error());
  }
  if (!*tenant) {
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

std::optional<http_response> optional_name(const json& body,
                                           std::string& name) {
  if (auto problem = only_fields(body, {"name"})) {
    return problem;
  }
  if (body.contains("name")) {
    if (!body["name"].is_string() ||
        body["name"].get<std::string>().size() > auth::name_bytes_max) {
      return bad_request("field 'name' must be a string of at most " +
                         std::to_string(auth::name_bytes_max) + " bytes");
    }
    name = body["name"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

http_response api::create_key(context& ctx) {
  std::string name;
  if (auto problem = optional_name(ctx.body, name)) {
    return *problem;
  }
  auto key = keys_.create_key(ctx.caller.tenant, name);
  if (!key) {
    return error_response(key.error());
  }
  return json_response(201,
                       {{"id", key->record.id},
                        {"name", key->record.name},
                        {"secret", key->secret},
                        {"createdAt", rfc3339_ms(key->record.created_at_ms)}});
}

http_response api::list_keys(context& ctx) {
  if (!ctx.query.empty()) {
    return bad_request("GET /v1/api-keys takes no query parameters");
  }
  auto listed = keys_.list_keys(ctx.caller.tenant);
  if (!listed) {
    return error_response(listed.error());
  }
  json keys = json::array();
  for (const auto& key : *listed) {
    keys.push_back({{"id", key.id},
                    {"name", key.name},
                    {"admin", key.admin},
                    {"createdAt", rfc3339_ms(key.created_at_ms)}});
  }
  return json_response(200, {{"apiKeys", std::move(keys)}});
}

http_response api::revoke_key(context& ctx, const std::string& id) {
  if (auto problem = only_fields(ctx.body, {})) {
    return *problem;
  }
  auto revoked = keys_.revoke_key(ctx.caller.tenant, id);
  if (!revoked) {
    return error_response(revoked.error());
  }
  if (!*revoked) {
    return error_response(404, "api-key-not-found",
                          "no API key '" + id + "' in this tenant");
  }
  return json_response(200, {{"id", id}, {"revoked", true}});
}

http_response api::create_tenant(context& ctx) {
  std::string name;
  if (auto problem = optional_name(ctx.body, name)) {
    return *problem;
  }
  if (name.empty()) {
    return bad_request("missing field 'name' (a non-empty string)");
  }
  auto made = keys_.create_tenant(name);
  if (!made) {
    return error_response(made.error());
  }
  return json_response(201, {{"id", made->tenant.id},
                             {"name", made->tenant.name},
                             {"apiKey",
                              {{"id", made->first_key.record.id},
                               {"secret", made->first_key.secret}}}});
}

}  // namespace durin::gateway
