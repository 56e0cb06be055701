// The durin command line. `durin run FLOW` runs one flow on a node with an
// embedded store and prints the run and its history; `durin serve` runs a
// node with the HTTP API; `durin worker` runs remote steps against one;
// `durin runs|tasks|hooks|api-keys|tenants ...` talk to a
// server (--server or DURIN_SERVER, key from --api-key, DURIN_API_KEY or the
// data dir's admin.key) and print its JSON answers. Errors print
// `code: message` on stderr and exit non-zero.
#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

#include "bin/example_flows.hpp"
#include "bin/worker_steps.hpp"
#include "client/http_client.hpp"
#include "durin/durin.hpp"
#include "durin/worker.hpp"
#include "gateway/server.hpp"

namespace {

int fail(const durin::error& err) {
  std::cerr << durin::to_code(err.code) << ": " << err.message << "\n";
  return 1;
}

int run_command(const std::string& data_dir, const std::string& flow,
                const std::string& input_text, int timeout_ms) {
  durin::json input;
  try {
    input = durin::json::parse(input_text);
  } catch (const durin::json::exception& e) {
    std::cerr << "invalid-input: --input is not JSON: " << e.what() << "\n";
    return 2;
  }
  durin::registry flows;
  durin::examples::register_examples(flows);
  auto rt = durin::runtime::open({.data_dir = data_dir}, flows);
  if (!rt) {
    return fail(rt.error());
  }
  auto started = (*rt)->start(flow, input);
  if (!started) {
    return fail(started.error());
  }
  auto done = (*rt)->wait(started->id, std::chrono::milliseconds(timeout_ms));
  if (!done) {
    return fail(done.error());
  }
  auto history = (*rt)->history(started->id);
  if (!history) {
    return fail(history.error());
  }
  durin::json events = durin::json::array();
  for (auto& event : *history) {
    events.push_back(event.to_json());
  }
  std::cout << durin::json{{"run", done->to_json()}, {"history", events}}.dump(
                   2)
            << "\n";
  return done->status == durin::run_status::completed ? 0 : 1;
}

// Options every client subcommand shares.
struct client_options {
  std::string server;
  std::string api_key;
  std::string data_dir = "./durin-data";
  std::string idempotency_key;
  std::int64_t timeout_ms = 60'000;
};

std::string env_or(const char* name, std::string fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : fallback;
}

std::string percent_encode(std::string_view text) {
  static constexpr char digits[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        c == ':') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(digits[c >> 4]);
      out.push_back(digits[c & 0xF]);
    }
  }
  return out;
}

// Sends one request and prints the answer: the JSON body on stdout (exit 0)
// or `code: message` on stderr (exit 1).
int call(const client_options& options, const std::string& method,
         const std::string& target, const durin::json* body) {
  auto server = durin::client::parse_server_url(
      options.server.empty() ? env_or("DURIN_SERVER", "http://127.0.0.1:7070")
                             : options.server);
  if (!server) {
    return fail(server.error());
  }
  std::string key =
      options.api_key.empty() ? env_or("DURIN_API_KEY", "") : options.api_key;
  if (key.empty()) {
    std::ifstream file(options.data_dir + "/admin.key");
    std::getline(file, key);
  }
  if (key.empty()) {
    std::cerr << "unauthorized: no API key: pass --api-key, set "
                 "DURIN_API_KEY, or run next to the server's data dir\n";
    return 1;
  }
  std::vector<std::pair<std::string, std::string>> headers = {
      {"Authorization", "Bearer " + key}};
  std::string payload;
  if (body != nullptr) {
    headers.emplace_back("Content-Type", "application/json");
    payload = body->dump();
  }
  if (!options.idempotency_key.empty()) {
    headers.emplace_back("Idempotency-Key", options.idempotency_key);
  }
  durin::client::http_connection connection(*server, options.timeout_ms);
  auto answer = connection.send(method, target, headers, payload);
  if (!answer) {
    return fail(answer.error());
  }
  auto parsed = durin::json::parse(answer->body, nullptr, false);
  if (answer->status >= 300) {
    if (!parsed.is_discarded() && parsed.is_object() &&
        parsed.contains("code")) {
      std::cerr << parsed.value("code", "") << ": "
                << parsed.value("message", "") << "\n";
    } else {
      std::cerr << "http-" << answer->status << ": " << answer->body << "\n";
    }
    return 1;
  }
  if (parsed.is_discarded()) {
    std::cout << answer->body << "\n";
  } else {
    std::cout << parsed.dump(2) << "\n";
  }
  return 0;
}

std::optional<durin::json> parse_json_option(const std::string& name,
                                             const std::string& text) {
  auto value = durin::json::parse(text, nullptr, false);
  if (value.is_discarded()) {
    std::cerr << "invalid-argument: " << name << " is not JSON\n";
    return std::nullopt;
  }
  return value;
}

void add_client_options(CLI::App* command, client_options& options,
                        bool mutating) {
  command->add_option("--server", options.server,
                      "server URL (default $DURIN_SERVER or "
                      "http://127.0.0.1:7070)");
  command->add_option("--api-key", options.api_key,
                      "API key (default $DURIN_API_KEY or DATA_DIR/admin.key)");
  command->add_option("--data-dir", options.data_dir,
                      "a local node's data dir, for its admin.key");
  command->add_option("--timeout-ms", options.timeout_ms,
                      "how long to wait for the answer");
  if (mutating) {
    command->add_option("--idempotency-key", options.idempotency_key,
                        "retry-safe key: a repeat gets the first answer");
  }
}

// Flows for the side-by-side benchmark (benchmarks/compare_restate.sh):
// a no-op, and ten steps in a row.
durin::flow<durin::json> bench_noop(durin::context&, durin::json input) {
  co_return input;
}

durin::flow<durin::json> bench_ten_steps(durin::context& ctx,
                                         durin::json input) {
  int total = 0;
  for (int i = 0; i < 10; ++i) {
    total += co_await ctx.step("step-" + std::to_string(i), [i] { return i; });
  }
  co_return durin::json{{"total", total}, {"input", input}};
}

// The limits `durin serve` takes as flags (0: the server's default).
struct serve_limits {
  std::int64_t read_timeout_ms = 10'000;
  std::int64_t drain_timeout_ms = 30'000;
  std::size_t connections_max = 0;
  std::size_t tenant_polls_max = 256;
};

int serve_command(const std::string& data_dir, const std::string& listen,
                  const serve_limits& limits, bool bench_flows) {
  durin::gateway::serve_options options;
  options.data_dir = data_dir;
  auto colon = listen.rfind(':');
  if (colon == std::string::npos) {
    std::cerr << "invalid-argument: --listen is HOST:PORT\n";
    return 2;
  }
  options.http.address = listen.substr(0, colon);
  try {
    auto port = std::stoul(listen.substr(colon + 1));
    if (port > 65535) {
      throw std::out_of_range("port");
    }
    options.http.port = static_cast<std::uint16_t>(port);
  } catch (const std::exception&) {
    std::cerr << "invalid-argument: --listen port must be 0 to 65535\n";
    return 2;
  }
  options.http.read_timeout_ms = limits.read_timeout_ms;
  options.http.drain_timeout_ms = limits.drain_timeout_ms;
  options.http.connections_max = limits.connections_max;
  if (limits.tenant_polls_max == 0) {
    std::cerr << "invalid-argument: --max-polls-per-tenant must be positive\n";
    return 2;
  }
  options.api.tenant_polls_max = limits.tenant_polls_max;
  durin::registry flows;
  durin::examples::register_examples(flows);
  durin::examples::register_worker_steps(flows);
  if (bench_flows) {
    flows.flow("bench.noop", bench_noop);
    flows.flow("bench.ten-steps", bench_ten_steps);
  }
  return durin::gateway::serve(options, std::move(flows), std::cout, std::cerr);
}

// `durin worker`: runs the example steps registered to `queue` in this
// process until SIGTERM or SIGINT, then stops gracefully (the tasks in hand
// finish and are reported).
std::atomic<bool> worker_signalled{false};

int worker_command(const client_options& client, const std::string& queue,
                   std::size_t concurrency, const std::string& worker_id) {
  durin::registry steps;
  durin::examples::register_examples(steps);
  durin::examples::register_worker_steps(steps);
  durin::worker_options options;
  options.server_url = client.server.empty()
                           ? env_or("DURIN_SERVER", "http://127.0.0.1:7070")
                           : client.server;
  options.api_key =
      client.api_key.empty() ? env_or("DURIN_API_KEY", "") : client.api_key;
  if (options.api_key.empty()) {
    std::ifstream file(client.data_dir + "/admin.key");
    std::getline(file, options.api_key);
  }
  if (options.api_key.empty()) {
    std::cerr << "unauthorized: no API key: pass --api-key or set "
                 "DURIN_API_KEY\n";
    return 1;
  }
  if (auto url = durin::client::parse_server_url(options.server_url); !url) {
    return fail(url.error());
  }
  options.task_queue = queue;
  options.concurrency = concurrency;
  options.worker_id = worker_id;
  durin::worker worker(options, std::move(steps));
  std::signal(SIGTERM, [](int) { worker_signalled = true; });
  std::signal(SIGINT, [](int) { worker_signalled = true; });
  std::thread watcher([&worker] {
    while (!worker_signalled) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    worker.stop();
  });
  std::cout << "worker " << worker.worker_id() << " polling " << queue << " on "
            << options.server_url << std::endl;
  worker.run();
  worker_signalled = true;
  watcher.join();
  auto stats = worker.stats();
  std::cout << "worker stopped: " << stats.tasks << " tasks, " << stats.recorded
            << " recorded, " << stats.refused << " refused as late"
            << std::endl;
  return 0;
}

// One GET; the JSON body, or nullopt after printing why.
std::optional<durin::json> get_json(const client_options& options,
                                    const std::string& target) {
  auto server = durin::client::parse_server_url(
      options.server.empty() ? env_or("DURIN_SERVER", "http://127.0.0.1:7070")
                             : options.server);
  if (!server) {
    fail(server.error());
    return std::nullopt;
  }
  std::string key =
      options.api_key.empty() ? env_or("DURIN_API_KEY", "") : options.api_key;
  if (key.empty()) {
    std::ifstream file(options.data_dir + "/admin.key");
    std::getline(file, key);
  }
  durin::client::http_connection connection(*server, options.timeout_ms);
  auto answer =
      connection.send("GET", target, {{"Authorization", "Bearer " + key}}, "");
  if (!answer) {
    fail(answer.error());
    return std::nullopt;
  }
  auto parsed = durin::json::parse(answer->body, nullptr, false);
  if (answer->status != 200 || parsed.is_discarded()) {
    std::cerr << (parsed.is_discarded()
                      ? "http-" + std::to_string(answer->status)
                      : parsed.value("code", "error"))
              << ": "
              << (parsed.is_discarded() ? answer->body
                                        : parsed.value("message", ""))
              << "\n";
    return std::nullopt;
  }
  return parsed;
}

// `durin runs describe ID`: the run, and for each step what the history
// recorded beside what the transport did (attempts with lease owner,
// expiry and state, and refused late reports).
int describe_command(const client_options& client, const std::string& id) {
  auto encoded = percent_encode(id);
  auto run = get_json(client, "/v1/runs/" + encoded);
  auto history =
      run ? get_json(client, "/v1/runs/" + encoded + "/history") : std::nullopt;
  auto transport =
      history ? get_json(client, "/v1/tasks?runId=" + encoded) : std::nullopt;
  if (!transport) {
    return 1;
  }
  std::map<std::string, durin::json> steps;
  auto step_of = [&steps](const std::string& step_id) -> durin::json& {
    auto& step = steps[step_id];
    if (step.is_null()) {
      step = {{"stepId", step_id},
              {"recorded", durin::json::array()},
              {"attempts", durin::json::array()},
              {"refusedReports", durin::json::array()}};
    }
    return step;
  };
  const auto& events =
      (*history).contains("events") ? (*history)["events"] : *history;
  for (const auto& event : events) {
    const auto& detail = event;  // the event's details are its own fields
    if (detail.contains("stepId")) {
      auto& step = step_of(detail["stepId"].get<std::string>());
      step["name"] = detail.value("name", "");
      step["recorded"].push_back(
          {{"kind", event.value("kind", "")},
           {"attempt", detail.value("attempt", 0)},
           {"attemptId", detail.value("attemptId", "")},
           {"error", detail.value("error", durin::json())}});
    }
  }
  for (const auto& attempt : (*transport)["attempts"]) {
    step_of(attempt.value("stepId", ""))["attempts"].push_back(attempt);
  }
  for (const auto& refused : (*transport)["refusedReports"]) {
    step_of(refused.value("stepId", ""))["refusedReports"].push_back(refused);
  }
  durin::json out = {{"run", *run}, {"steps", durin::json::array()}};
  for (auto& [step_id, step] : steps) {
    out["steps"].push_back(std::move(step));
  }
  std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"durin: durable workflows for C++"};
  app.require_subcommand(1);

  std::string data_dir = "./durin-data";
  std::string flow;
  std::string input = "{}";
  int timeout_ms = 60'000;
  auto* run = app.add_subcommand(
      "run", "run one flow on a local node and print the run and its history");
  run->add_option("flow", flow, "flow name, e.g. acme.review-order")
      ->required();
  run->add_option("--input", input, "the flow's input, as JSON");
  run->add_option("--data-dir", data_dir, "where the node keeps its store");
  run->add_option("--timeout-ms", timeout_ms, "how long to wait for the end");

  std::string listen = "127.0.0.1:7070";
  serve_limits limits;
  auto* serve = app.add_subcommand(
      "serve", "run a node with the HTTP API until SIGTERM or SIGINT");
  serve->add_option("--data-dir", data_dir, "where the node keeps its store");
  serve->add_option("--listen", listen,
                    "HOST:PORT to listen on (port 0: any free port)");
  serve->add_option("--read-timeout-ms", limits.read_timeout_ms,
                    "a request must arrive within this (default 10000)");
  serve->add_option("--drain-timeout-ms", limits.drain_timeout_ms,
                    "at SIGTERM, how long requests in flight may take to be "
                    "answered (default 30000)");
  serve->add_option("--max-connections", limits.connections_max,
                    "open connections at most; one more is answered 503 "
                    "too-many-connections (default: half the descriptor "
                    "limit, at most 10000)");
  serve->add_option("--max-polls-per-tenant", limits.tenant_polls_max,
                    "long polls one tenant may have waiting; one more is 429 "
                    "too-many-polls (default 256)");
  bool bench_flows = false;
  serve->add_flag("--bench-flows", bench_flows,
                  "also register bench.noop and bench.ten-steps");

  client_options client;
  std::string id;
  std::string payload = "{}";
  std::string name;
  std::string hook_token;
  std::string min_retention;
  bool no_wait = false;
  std::string status_filter;
  std::string flow_filter;
  std::string cursor;
  int limit = 0;
  std::string reason;
  std::string instance_id;
  std::string on_duplicate;
  std::string command_id;

  auto* runs = app.add_subcommand("runs", "start and inspect runs");
  runs->require_subcommand(1);
  auto* runs_start = runs->add_subcommand("start", "start a run");
  runs_start->add_option("--flow", flow, "flow name")->required();
  runs_start->add_option("--input", input, "the flow's input, as JSON");
  runs_start->add_flag("--no-wait", no_wait, "answer once admitted");
  runs_start->add_option("--hook-token", hook_token, "start hook token");
  runs_start->add_option("--min-retention", min_retention,
                         "how long the start hook's token stays held");
  runs_start->add_option("--instance-id", instance_id,
                         "the business process; one active run each");
  runs_start->add_option(
      "--on-duplicate", on_duplicate,
      "reject-duplicate (default) or return-existing-active");
  runs_start->add_option("--command-id", command_id,
                         "a repeat gets the run the first start admitted");
  add_client_options(runs_start, client, true);
  auto* runs_get = runs->add_subcommand("get", "the run now");
  runs_get->add_option("id", id, "run id")->required();
  add_client_options(runs_get, client, false);
  auto* runs_list = runs->add_subcommand("list", "runs, newest first");
  runs_list->add_option("--status", status_filter, "only this status");
  runs_list->add_option("--flow", flow_filter, "only this flow");
  runs_list->add_option("--limit", limit, "page size, 1 to 1000");
  runs_list->add_option("--cursor", cursor, "from a previous nextCursor");
  add_client_options(runs_list, client, false);
  auto* runs_history = runs->add_subcommand("history", "recorded events");
  runs_history->add_option("id", id, "run id")->required();
  add_client_options(runs_history, client, false);
  auto* runs_describe = runs->add_subcommand(
      "describe", "each step's recorded outcomes beside its attempts");
  runs_describe->add_option("id", id, "run id")->required();
  add_client_options(runs_describe, client, false);
  auto* runs_cancel = runs->add_subcommand("cancel", "cancel a run");
  runs_cancel->add_option("id", id, "run id")->required();
  runs_cancel->add_option("--reason", reason, "why");
  runs_cancel->add_option("--command-id", command_id,
                          "a repeat answers the cancelled run again");
  add_client_options(runs_cancel, client, true);

  auto* hooks = app.add_subcommand("hooks", "hooks by token");
  hooks->require_subcommand(1);
  auto* hooks_get = hooks->add_subcommand("get", "the hook on a token");
  hooks_get->add_option("token", id, "hook token")->required();
  add_client_options(hooks_get, client, false);
  auto* hooks_resume = hooks->add_subcommand("resume", "deliver a payload");
  hooks_resume->add_option("token", id, "hook token")->required();
  hooks_resume->add_option("--payload", payload, "the payload, as JSON");
  hooks_resume->add_option("--command-id", command_id,
                           "a repeat is not delivered again");
  add_client_options(hooks_resume, client, true);

  auto* api_keys = app.add_subcommand("api-keys", "the tenant's API keys");
  api_keys->require_subcommand(1);
  auto* keys_create = api_keys->add_subcommand("create", "a new key");
  keys_create->add_option("--name", name, "a label");
  add_client_options(keys_create, client, true);
  auto* keys_list = api_keys->add_subcommand("list", "the keys");
  add_client_options(keys_list, client, false);
  auto* keys_revoke = api_keys->add_subcommand("revoke", "revoke a key");
  keys_revoke->add_option("id", id, "key id")->required();
  add_client_options(keys_revoke, client, true);

  auto* tenants = app.add_subcommand("tenants", "tenants (admin key)");
  tenants->require_subcommand(1);
  auto* tenants_create =
      tenants->add_subcommand("create", "a tenant with its first key");
  tenants_create->add_option("--name", name, "the tenant's name")->required();
  add_client_options(tenants_create, client, true);

  auto* tasks = app.add_subcommand("tasks", "step attempts and leases");
  tasks->require_subcommand(1);
  auto* tasks_list = tasks->add_subcommand(
      "list", "live attempts, queues, stuck leases, redeliveries");
  add_client_options(tasks_list, client, false);

  std::string queue = "workers";
  std::size_t concurrency = 4;
  std::string worker_id;
  auto* worker = app.add_subcommand(
      "worker", "run the example steps of a task queue against a node");
  worker->add_option("--queue", queue, "task queue to poll");
  worker->add_option("--concurrency", concurrency, "tasks in hand at once");
  worker->add_option("--worker-id", worker_id, "default HOST-PID");
  add_client_options(worker, client, false);

  CLI11_PARSE(app, argc, argv);
  if (worker->parsed()) {
    return worker_command(client, queue, concurrency, worker_id);
  }
  if (tasks_list->parsed()) {
    return call(client, "GET", "/v1/tasks", nullptr);
  }
  if (runs_describe->parsed()) {
    return describe_command(client, id);
  }
  if (run->parsed()) {
    return run_command(data_dir, flow, input, timeout_ms);
  }
  if (serve->parsed()) {
    return serve_command(data_dir, listen, limits, bench_flows);
  }
  if (runs_start->parsed()) {
    auto parsed = parse_json_option("--input", input);
    if (!parsed) {
      return 2;
    }
    durin::json body = {{"flow", flow}, {"input", *parsed}};
    if (no_wait) {
      body["wait"] = false;
    }
    if (!hook_token.empty()) {
      body["hook"] = {{"token", hook_token}};
      if (!min_retention.empty()) {
        body["hook"]["minRetention"] = min_retention;
      }
    }
    if (!instance_id.empty()) {
      body["instanceId"] = instance_id;
    }
    if (!on_duplicate.empty()) {
      body["onDuplicate"] = on_duplicate;
    }
    if (!command_id.empty()) {
      body["commandId"] = command_id;
    }
    return call(client, "POST", "/v1/runs", &body);
  }
  if (runs_get->parsed()) {
    return call(client, "GET", "/v1/runs/" + percent_encode(id), nullptr);
  }
  if (runs_list->parsed()) {
    std::string query;
    auto add = [&query](const std::string& key, const std::string& value) {
      if (!value.empty()) {
        query +=
            (query.empty() ? "?" : "&") + key + "=" + percent_encode(value);
      }
    };
    add("status", status_filter);
    add("flow", flow_filter);
    add("limit", limit > 0 ? std::to_string(limit) : "");
    add("cursor", cursor);
    return call(client, "GET", "/v1/runs" + query, nullptr);
  }
  if (runs_history->parsed()) {
    return call(client, "GET", "/v1/runs/" + percent_encode(id) + "/history",
                nullptr);
  }
  if (runs_cancel->parsed()) {
    durin::json body = durin::json::object();
    if (!reason.empty()) {
      body["reason"] = reason;
    }
    if (!command_id.empty()) {
      body["commandId"] = command_id;
    }
    return call(client, "POST", "/v1/runs/" + percent_encode(id) + "/cancel",
                &body);
  }
  if (hooks_get->parsed()) {
    return call(client, "GET", "/v1/hooks/" + percent_encode(id), nullptr);
  }
  if (hooks_resume->parsed()) {
    auto parsed = parse_json_option("--payload", payload);
    if (!parsed) {
      return 2;
    }
    durin::json body = {{"payload", *parsed}};
    if (!command_id.empty()) {
      body["commandId"] = command_id;
    }
    return call(client, "POST", "/v1/hooks/" + percent_encode(id) + "/resume",
                &body);
  }
  if (keys_create->parsed()) {
    durin::json body = durin::json::object();
    if (!name.empty()) {
      body["name"] = name;
    }
    return call(client, "POST", "/v1/api-keys", &body);
  }
  if (keys_list->parsed()) {
    return call(client, "GET", "/v1/api-keys", nullptr);
  }
  if (keys_revoke->parsed()) {
    return call(client, "DELETE", "/v1/api-keys/" + percent_encode(id),
                nullptr);
  }
  if (tenants_create->parsed()) {
    durin::json body = {{"name", name}};
    return call(client, "POST", "/v1/tenants", &body);
  }
  return 2;
}
