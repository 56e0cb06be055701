// The durin command line. `durin run FLOW` runs one flow on a node with an
// embedded store and prints the run and its history; `durin serve` runs a
// node with the HTTP API; `durin worker` runs remote steps against one;
// `durin runs|tasks|hooks|api-keys|tenants ...` talk to a
// server (--server or DURIN_SERVER, key from --api-key, DURIN_API_KEY or the
// data dir's admin.key) and print its JSON answers. Errors print
// `code: message` on stderr and exit non-zero.
#include <sys/stat.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "base/json_text.hpp"
#include "bin/example_flows.hpp"
#include "bin/worker_steps.hpp"
#include "client/http_client.hpp"
#include "cluster/membership.hpp"
#include "cluster/node.hpp"
#include "cluster/shard_move.hpp"
#include "durin/durin.hpp"
#include "durin/worker.hpp"
#include "gateway/auth.hpp"
#include "gateway/server.hpp"
#include "persistence/auth_store.hpp"
#include "persistence/committer.hpp"
#include "persistence/store.hpp"

namespace {

int fail(const durin::error& err) {
  std::cerr << durin::to_code(err.code) << ": " << err.message << "\n";
  return 1;
}

int run_command(const std::string& data_dir, const std::string& flow,
                const std::string& input_text, std::int64_t timeout_ms) {
  durin::json input;
  try {
    input = durin::json::parse(input_text);
  } catch (const durin::json::exception& e) {
    std::cerr << "invalid-input: --input is not JSON: "
              << durin::json_problem(e) << "\n";
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

// The node a client command talks to and the key it uses: the flags, else
// $DURIN_SERVER and $DURIN_API_KEY, else the data dir's admin.key. nullopt
// after saying what is wrong or missing.
struct node_target {
  durin::client::server_address server;
  std::string key;
};
std::optional<node_target> resolve_target(const client_options& options) {
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
  if (key.empty()) {
    std::cerr << "unauthorized: no API key: pass --api-key, set "
                 "DURIN_API_KEY, or run next to the server's data dir\n";
    return std::nullopt;
  }
  return node_target{std::move(*server), std::move(key)};
}

// Sends one request and prints the answer: the JSON body on stdout (exit 0)
// or `code: message` on stderr (exit 1).
int call(const client_options& options, const std::string& method,
         const std::string& target, const durin::json* body) {
  auto node = resolve_target(options);
  if (!node) {
    return 1;
  }
  std::vector<std::pair<std::string, std::string>> headers = {
      {"Authorization", "Bearer " + node->key}};
  std::string payload;
  if (body != nullptr) {
    headers.emplace_back("Content-Type", "application/json");
    payload = body->dump();
  }
  if (!options.idempotency_key.empty()) {
    headers.emplace_back("Idempotency-Key", options.idempotency_key);
  }
  durin::client::http_connection connection(node->server, options.timeout_ms);
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
  command
      ->add_option("--timeout-ms", options.timeout_ms,
                   "how long to wait for the answer")
      ->check(CLI::Range(std::int64_t{1}, durin::limits::duration_ms_max));
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
  bool metrics_open = false;
  std::vector<std::string> webhook_kept_headers;
  std::uint32_t shards = 1;
};

// `durin serve --etcd`: a node of a cluster (cluster/node.hpp).
struct cluster_flags {
  std::string etcd;
  std::string cluster;
  std::string node_id;
  std::string peer_listen = "127.0.0.1:0";
  std::string peer_advertise;  // empty: where it listens
  std::int64_t lease_ttl_s = 5;
  std::int64_t replication_timeout_ms = 2000;             // serve
  std::int64_t forward_timeout_ms = 30'000;               // serve
  std::size_t replication_log_bytes = 16u << 20;          // serve
  std::uint32_t shards = durin::cluster::shards_default;  // init
  std::vector<std::string> nodes;                         // init
  std::uint32_t replicas = 0;  // init; 0: 2, or 1 for --nodes of one
  std::uint32_t shard = 0;     // move, accept-loss
  std::string to;              // move, accept-loss
  std::string node;            // drain
  bool remove = false;         // drain: its backup copies too
  int timeout_s = 120;         // move, drain
};

// One move, told and waited for: 0 once the target serves the shard.
int move_one(durin::cluster::etcd_client& etcd, const cluster_flags& flags,
             std::uint32_t shard, const std::string& to) {
  auto moved = durin::cluster::request_move(etcd, flags.cluster, shard, to);
  if (!moved) {
    std::cerr << durin::to_code(moved.error().code) << ": "
              << moved.error().message << "\n";
    return 1;
  }
  auto epoch = durin::cluster::wait_for_move(
      etcd, flags.cluster, shard, to, std::chrono::seconds(flags.timeout_s));
  if (!epoch) {
    std::cerr << "timeout: shard " << shard << " is not served by '" << to
              << "' after " << flags.timeout_s
              << " s; it answers 503 while it moves (its owner must be "
                 "live for the copy); durin cluster move "
              << shard << " --to " << moved->owner << " cancels\n";
    return 1;
  }
  std::cout << "shard " << shard << " served by " << to << " at epoch "
            << *epoch << std::endl;
  return 0;
}

// `durin cluster move` and `durin cluster drain`.
int cluster_move_command(const cluster_flags& flags, bool drain) {
  auto etcd = durin::cluster::etcd_client::make(flags.etcd);
  if (!etcd) {
    std::cerr << durin::to_code(etcd.error().code) << ": "
              << etcd.error().message << "\n";
    return 2;
  }
  if (!drain) {
    return move_one(*etcd, flags, flags.shard, flags.to);
  }
  auto plan = durin::cluster::drain_plan(*etcd, flags.cluster, flags.node);
  if (!plan) {
    std::cerr << durin::to_code(plan.error().code) << ": "
              << plan.error().message << "\n";
    return 1;
  }
  // One shard at a time: each is unavailable only while it is copied.
  for (const auto& [shard, to] : *plan) {
    if (const int code = move_one(*etcd, flags, shard, to); code != 0) {
      return code;
    }
  }
  if (!flags.remove) {
    std::cout << "node " << flags.node
              << " holds no shard; it can be stopped (it keeps its backup "
                 "copies: --remove moves them too)"
              << std::endl;
    return 0;
  }
  auto copies = durin::cluster::copies_plan(*etcd, flags.cluster, flags.node);
  if (!copies) {
    std::cerr << durin::to_code(copies.error().code) << ": "
              << copies.error().message << "\n";
    return 1;
  }
  for (const auto& [shard, to] : *copies) {
    auto moved =
        durin::cluster::replace_copy(*etcd, flags.cluster, shard, flags.node,
                                     to, std::chrono::seconds(flags.timeout_s));
    if (!moved) {
      std::cerr << durin::to_code(moved.error().code) << ": "
                << moved.error().message << "\n";
      return 1;
    }
    std::cout << "shard " << shard << "'s copy on " << flags.node
              << " moved to " << to << std::endl;
  }
  std::cout << "node " << flags.node
            << " holds no shard and no copy; it can be taken out" << std::endl;
  return 0;
}

// `durin cluster accept-loss`: the owner of a shard whose copy lost its
// history serves it without it; waited for like a move.
int cluster_accept_loss_command(const cluster_flags& flags) {
  auto etcd = durin::cluster::etcd_client::make(flags.etcd);
  if (!etcd) {
    std::cerr << durin::to_code(etcd.error().code) << ": "
              << etcd.error().message << "\n";
    return 2;
  }
  auto accepted =
      durin::cluster::accept_loss(*etcd, flags.cluster, flags.shard, flags.to);
  if (!accepted) {
    std::cerr << durin::to_code(accepted.error().code) << ": "
              << accepted.error().message << "\n";
    return 1;
  }
  const std::string taker(accepted->loss_accepted_by());
  auto epoch =
      durin::cluster::wait_for_move(*etcd, flags.cluster, flags.shard, taker,
                                    std::chrono::seconds(flags.timeout_s));
  if (!epoch) {
    std::cerr << "timeout: shard " << flags.shard << " is not served by '"
              << taker << "' after " << flags.timeout_s
              << " s (the node must be live)\n";
    return 1;
  }
  std::cout << "shard " << flags.shard << " served by " << taker << " at epoch "
            << *epoch << ", without the history its copy "
            << (taker == accepted->owner ? "lost" : "lacks") << std::endl;
  return 0;
}

// `durin cluster init`: the cluster's config, once.
int cluster_init_command(const cluster_flags& flags) {
  auto etcd = durin::cluster::etcd_client::make(flags.etcd);
  if (!etcd) {
    std::cerr << durin::to_code(etcd.error().code) << ": "
              << etcd.error().message << "\n";
    return 2;
  }
  auto made = durin::cluster::init_cluster(*etcd, flags.cluster, flags.shards,
                                           flags.nodes, flags.replicas);
  if (!made) {
    std::cerr << durin::to_code(made.error().code) << ": "
              << made.error().message << "\n";
    return 1;
  }
  std::cout << "cluster '" << flags.cluster << "' initialised with "
            << made->shards << " shards, " << made->replicas
            << (made->replicas == 1 ? " copy" : " copies") << " of each"
            << (flags.nodes.empty()
                    ? std::string("; they are placed over the nodes "
                                  "that join")
                    : "; placed over the nodes named")
            << "\nevery node's data dir gets the admin API key (admin.key)"
            << std::endl;
  return 0;
}

// `durin cluster status`: read from etcd, as GET /v1/cluster answers.
int cluster_status_command(const cluster_flags& flags) {
  auto etcd = durin::cluster::etcd_client::make(flags.etcd);
  if (!etcd) {
    std::cerr << durin::to_code(etcd.error().code) << ": "
              << etcd.error().message << "\n";
    return 2;
  }
  auto status = durin::cluster::read_status(*etcd, flags.cluster);
  if (!status) {
    std::cerr << durin::to_code(status.error().code) << ": "
              << status.error().message << "\n";
    return 1;
  }
  // The copies' log positions are on the nodes: a live node's GET
  // /v1/cluster has them (with the cluster's admin key, from etcd).
  if (auto config = etcd->range(durin::cluster::layout(flags.cluster).config());
      config && !config->kvs.empty()) {
    auto decoded = durin::cluster::decode_config(config->kvs.front().value);
    for (const auto& node : (*status)["nodes"]) {
      auto server = durin::client::parse_server_url(
          "http://" + node.value("http", std::string()));
      if (!decoded || !server) {
        continue;
      }
      durin::client::http_connection connection(*server, 5000);
      auto answer = connection.send(
          "GET", "/v1/cluster",
          {{"Authorization", "Bearer " + decoded->admin_key}}, "");
      if (answer && answer->status == 200) {
        auto full = durin::json::parse(answer->body, nullptr, false);
        if (full.is_object()) {
          std::cout << full.dump(2) << std::endl;
          return 0;
        }
      }
    }
  }
  std::cout << status->dump(2) << std::endl;
  return 0;
}

// `durin admin reset-key`: offline, with no node running on the data dir
// (the store's lock refuses a second opener), a new admin key of tenant
// `default`, written to DATA_DIR/admin.key. The way back when every admin
// key is lost; keys already there stay valid.
int reset_key_command(const std::string& data_dir) {
  // API keys live in the first shard (the data dir itself for one shard);
  // a cluster's node keeps them in a store of its own, and the new key
  // reaches the other nodes at this node's next join (gateway/key_sync.hpp).
  const bool clustered = std::filesystem::exists(data_dir + "/node");
  const bool sharded = std::filesystem::exists(data_dir + "/shards/count");
  // A mistyped path would otherwise get a new, empty store and a key that
  // no node knows.
  if (!clustered && !sharded &&
      !std::filesystem::exists(data_dir + "/CURRENT")) {
    std::cerr << "invalid-argument: " << data_dir
              << " holds no node's data (no store was made there)\n";
    return 1;
  }
  auto store = durin::persistence::store::open(
      clustered ? data_dir + "/node"
                : (sharded ? data_dir + "/shards/000" : data_dir));
  if (!store) {
    // The store says why: in use (a node runs on it), permission...
    std::cerr << "durin admin reset-key: cannot open the node's store: "
              << store.error().message << "\n";
    return 1;
  }
  durin::persistence::committer writer(**store);
  durin::persistence::auth_store key_store(**store, writer);
  durin::gateway::auth keys(key_store, [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  });
  const std::string path = data_dir + "/admin.key";
  auto key = keys.reset_admin_key(path);
  if (!key) {
    std::cerr << "durin admin reset-key: " << key.error().to_string() << "\n";
    return 1;
  }
  std::cout << "new admin API key " << key->record.id << " written to " << path
            << "\n";
  return 0;
}

// A duration flag of 100 ms to `most_ms`; nullopt (and says so) otherwise.
std::optional<std::chrono::milliseconds> milliseconds_flag(
    const char* flag, std::int64_t value, std::int64_t most_ms) {
  if (value < 100 || value > most_ms) {
    std::cerr << "invalid-argument: " << flag << " must be 100 to " << most_ms
              << "\n";
    return std::nullopt;
  }
  return std::chrono::milliseconds(value);
}

int serve_command(const std::string& data_dir, const std::string& listen,
                  const serve_limits& limits, bool bench_flows,
                  const cluster_flags& cluster) {
  // The node's files are its owner's only: every file and directory it makes
  // (RocksDB's, admin.key, a cluster node's identity, the data dir when it is
  // new) 0600 or 0700. A data dir that exists keeps its mode: it may be a
  // directory others use too (--data-dir .), which is not the node's to change.
  ::umask(077);
  if (struct stat info{};
      ::stat(data_dir.c_str(), &info) == 0 && (info.st_mode & 077) != 0) {
    std::cerr << "durin serve: note: the data dir " << data_dir
              << " is open to other users; the node's files in it are its "
                 "owner's only\n";
  }
  durin::gateway::serve_options options;
  options.data_dir = data_dir;
  options.shards = limits.shards;
  if (!cluster.etcd.empty() || !cluster.cluster.empty() ||
      !cluster.node_id.empty()) {
    if (cluster.etcd.empty() || cluster.cluster.empty() ||
        cluster.node_id.empty()) {
      std::cerr << "invalid-argument: a cluster node needs --etcd, --cluster "
                   "and --node-id\n";
      return 2;
    }
    durin::cluster::node_options joined;
    joined.members.etcd = cluster.etcd;
    joined.members.cluster = cluster.cluster;
    joined.members.node_id = cluster.node_id;
    joined.members.lease_ttl_s = cluster.lease_ttl_s;
    joined.data_dir = data_dir;
    joined.peers.listen = cluster.peer_listen;
    joined.peers.advertise = cluster.peer_advertise;
    auto replication_timeout = milliseconds_flag(
        "--replication-timeout-ms", cluster.replication_timeout_ms, 60'000);
    auto forward_timeout = milliseconds_flag(
        "--forward-timeout-ms", cluster.forward_timeout_ms, 600'000);
    if (!replication_timeout || !forward_timeout) {
      return 2;
    }
    joined.replication.timeout = *replication_timeout;
    joined.peers.forward_timeout = *forward_timeout;
    joined.replication.log_bytes_max =
        std::max<std::size_t>(cluster.replication_log_bytes, 1);
    auto member = durin::cluster::cluster_node::open(joined);
    if (!member) {
      std::cerr << durin::to_code(member.error().code) << ": "
                << member.error().message << "\n";
      return 1;
    }
    options.cluster = std::move(*member);
  }
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
  for (const auto& [flag, ms] :
       {std::pair<const char*, std::int64_t>{"--read-timeout-ms",
                                             limits.read_timeout_ms},
        {"--drain-timeout-ms", limits.drain_timeout_ms}}) {
    if (auto problem = durin::limits::duration_problem(flag, ms);
        !problem.empty()) {
      std::cerr << "invalid-argument: " << problem << "\n";
      return 2;
    }
  }
  if (limits.read_timeout_ms == 0) {
    std::cerr << "invalid-argument: --read-timeout-ms must be positive\n";
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
  options.api.metrics_open = limits.metrics_open;
  for (auto name : limits.webhook_kept_headers) {
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char ch) { return std::tolower(ch); });
    options.api.webhook_dropped_headers.erase(name);
  }
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
  // Each problem once while it lasts: a node that is down fails every
  // retry the same way.
  auto last_problem = std::make_shared<std::pair<std::mutex, std::string>>();
  options.on_problem = [last_problem](const std::string& problem) {
    std::lock_guard lock(last_problem->first);
    if (problem != last_problem->second) {
      last_problem->second = problem;
      std::cerr << "durin worker: " << problem << std::endl;
    }
  };
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
  // run() ends by itself only when the node refused the key.
  const bool refused = !worker_signalled.exchange(true);
  watcher.join();
  auto stats = worker.stats();
  std::cout << "worker stopped: " << stats.tasks << " tasks, " << stats.recorded
            << " recorded, " << stats.refused << " refused as late, "
            << stats.errors << " failed requests" << std::endl;
  return refused ? 1 : 0;
}

// One GET; the JSON body, or nullopt after printing why.
std::optional<durin::json> get_json(const client_options& options,
                                    const std::string& target) {
  auto node = resolve_target(options);
  if (!node) {
    return std::nullopt;
  }
  durin::client::http_connection connection(node->server, options.timeout_ms);
  auto answer = connection.send("GET", target,
                                {{"Authorization", "Bearer " + node->key}}, "");
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

// `durin schedules create`'s options.
struct schedule_flags {
  std::string cron;
  std::string timezone;
  std::string interval;
  std::string jitter;
  std::string start_at;
  std::string end_at;
  std::string overlap;
  std::string catchup_window;
  std::string note;
  bool paused = false;
};

// The command line's option values, filled by CLI11 and read by the
// subcommands' callbacks (which run once parsing is done).
struct cli {
  int exit_code = 2;
  std::string data_dir = "./durin-data";
  std::string flow;
  std::string input = "{}";
  std::int64_t timeout_ms = 60'000;
  std::string listen = "127.0.0.1:7070";
  serve_limits limits;
  cluster_flags cluster;
  bool bench_flows = false;
  client_options client;
  std::string id;
  std::string payload = "{}";
  std::string name;
  std::string role;
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
  std::string queue = "workers";
  std::size_t concurrency = 4;
  std::string worker_id;
  std::string schedule_filter;
  std::string run_query;          // runs list --query
  std::string memo;               // runs start --memo, JSON
  std::string search_attributes;  // runs start --search-attributes, JSON
  schedule_flags schedule;
  // runs message|update|query
  std::string message_key;
  bool by_instance = false;
  std::string start_flow;
  std::string start_input = "{}";
  std::string args = "null";
  std::string update_id;
  std::string wait_for = "completed";
};

// Runs `command` with the parsed options once `sub` was chosen.
void on_chosen(CLI::App* sub, cli& c, std::function<int(cli&)> command) {
  sub->callback(
      [&c, command = std::move(command)] { c.exit_code = command(c); });
}

// A subcommand that sends one request: `target` and `body` are built from
// the options once parsed.
void request_command(CLI::App* sub, cli& c, std::string method,
                     std::function<std::string(const cli&)> target,
                     std::function<std::optional<durin::json>(cli&)> body) {
  on_chosen(sub, c, [method, target, body](cli& c) {
    std::optional<durin::json> payload;
    if (body) {
      payload = body(c);
      if (!payload) {
        return 2;
      }
    }
    return call(c.client, method, target(c), payload ? &*payload : nullptr);
  });
}

std::function<std::string(const cli&)> fixed(std::string target) {
  return [target](const cli&) { return target; };
}

// durin run: one flow on a local node, no server.
void add_run_local_command(CLI::App& app, cli& c) {
  auto* run = app.add_subcommand(
      "run", "run one flow on a local node and print the run and its history");
  run->add_option("flow", c.flow, "flow name, e.g. acme.review-order")
      ->required();
  run->add_option("--input", c.input, "the flow's input, as JSON");
  run->add_option("--data-dir", c.data_dir, "where the node keeps its store");
  run->add_option("--timeout-ms", c.timeout_ms, "how long to wait for the end")
      ->check(CLI::Range(std::int64_t{0}, durin::limits::duration_ms_max));
  on_chosen(run, c, [](cli& c) {
    return run_command(c.data_dir, c.flow, c.input, c.timeout_ms);
  });
}

// durin serve: a node with the HTTP API (alone, or in a cluster).
void add_serve_command(CLI::App& app, cli& c) {
  auto* serve = app.add_subcommand(
      "serve", "run a node with the HTTP API until SIGTERM or SIGINT");
  serve->add_option("--data-dir", c.data_dir, "where the node keeps its store");
  serve->add_option("--listen", c.listen,
                    "HOST:PORT to listen on (port 0: any free port)");
  serve->add_option("--read-timeout-ms", c.limits.read_timeout_ms,
                    "a request must arrive within this (default 10000)");
  serve->add_option("--drain-timeout-ms", c.limits.drain_timeout_ms,
                    "at SIGTERM, how long requests in flight may take to be "
                    "answered (default 30000)");
  // Checked as signed numbers: "-1" would wrap to "no limit" as a size.
  serve
      ->add_option("--max-connections", c.limits.connections_max,
                   "open connections at most; one more is answered 503 "
                   "too-many-connections (default: half the descriptor "
                   "limit, at most 10000)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1'000'000}));
  serve
      ->add_option("--max-polls-per-tenant", c.limits.tenant_polls_max,
                   "long polls one tenant may have waiting; one more is 429 "
                   "too-many-polls (default 256)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1'000'000}));
  serve->add_flag("--metrics-open", c.limits.metrics_open,
                  "answer GET /metrics without a key (default: admin key)");
  serve->add_option("--webhook-keep-header", c.limits.webhook_kept_headers,
                    "hand this credential-like header (dropped by default: "
                    "authorization, proxy-authorization, cookie, x-api-key, "
                    "x-auth-token) to webhook runs; repeatable");
  serve
      ->add_option("--shards", c.limits.shards,
                   "shards of the node's data, 1 to 1024 (fixed when the "
                   "data dir is made)")
      ->capture_default_str();
  serve->add_flag("--bench-flows", c.bench_flows,
                  "also register bench.noop and bench.ten-steps");
  serve->add_option("--etcd", c.cluster.etcd,
                    "etcd client URLs (comma-separated): join a cluster");
  serve->add_option("--cluster", c.cluster.cluster, "the cluster's name");
  serve->add_option("--node-id", c.cluster.node_id,
                    "this node's id in the cluster (unique, stable)");
  serve->add_option("--peer-listen", c.cluster.peer_listen,
                    "HOST:PORT for the other nodes (port 0: any free port)");
  serve->add_option("--peer-advertise", c.cluster.peer_advertise,
                    "HOST:PORT the other nodes reach this node's peer "
                    "endpoint at, when not --peer-listen's (a proxy, a NAT; "
                    "default: --peer-listen's host and the port bound)");
  serve
      ->add_option("--lease-ttl-s", c.cluster.lease_ttl_s,
                   "the node lease's TTL in etcd, 2 to 60 s; the node stops "
                   "serving before it could expire")
      ->capture_default_str();
  serve
      ->add_option("--replication-timeout-ms", c.cluster.replication_timeout_ms,
                   "a backup that does not answer a write this long is "
                   "dropped from its shard's in-sync set")
      ->capture_default_str();
  serve
      ->add_option("--forward-timeout-ms", c.cluster.forward_timeout_ms,
                   "a request forwarded to another node that has not "
                   "answered this long gets 503 forward-outcome-unknown "
                   "(below 25000 it also cuts waited starts short)")
      ->capture_default_str();
  serve
      ->add_option("--replication-log-bytes", c.cluster.replication_log_bytes,
                   "recent writes kept per shard for backups that catch up; "
                   "one further behind re-copies a checkpoint")
      ->capture_default_str();
  on_chosen(serve, c, [](cli& c) {
    return serve_command(c.data_dir, c.listen, c.limits, c.bench_flows,
                         c.cluster);
  });
}

// durin cluster: a cluster's config in etcd, and its operator commands.
void add_cluster_commands(CLI::App& app, cli& c) {
  auto* cluster = app.add_subcommand("cluster", "a cluster's config in etcd");
  cluster->require_subcommand(1);
  auto* init = cluster->add_subcommand(
      "init", "write a cluster's config once (shard count, hash version)");
  auto* status = cluster->add_subcommand(
      "status", "the cluster's nodes and shards, as etcd holds them");
  for (auto* sub : {init, status}) {
    sub->add_option("--etcd", c.cluster.etcd, "etcd client URLs")->required();
    sub->add_option("--cluster", c.cluster.cluster, "the cluster's name")
        ->required();
  }
  init->add_option("--shards", c.cluster.shards,
                   "shards of the cluster, 1 to 1024 (fixed)")
      ->capture_default_str();
  init->add_option("--nodes", c.cluster.nodes,
                   "node ids to place the shards over now (rendezvous "
                   "hashing); without it, over the nodes that join")
      ->delimiter(',');
  init->add_option("--replicas", c.cluster.replicas,
                   "copies of each shard, 1 to 3: its primary and backups on "
                   "other nodes (default 2, or 1 when --nodes names one "
                   "node)");
  auto* move = cluster->add_subcommand(
      "move",
      "move a shard to another node at a higher epoch (with --replicas 2 or "
      "more online: the node catches up as a backup, then takes over; with "
      "one copy offline: the shard answers 503 while its data is copied)");
  move->add_option("shard", c.cluster.shard, "the shard's number")->required();
  move->add_option("--to", c.cluster.to, "the node it goes to")->required();
  auto* drain = cluster->add_subcommand(
      "drain", "move every shard of a node to the others, one at a time");
  drain->add_option("node", c.cluster.node, "the node to empty")->required();
  drain->add_flag("--remove", c.cluster.remove,
                  "the node is taken out for good: its backup copies move "
                  "to other nodes too (each catches up before the node's "
                  "copy goes)");
  auto* accept_loss = cluster->add_subcommand(
      "accept-loss",
      "let a shard no node serves be served although no copy in step is "
      "live: by its owner, whose copy lost the shard's history (its data "
      "directory was deleted), or by a backup (--to), whose copy lacks the "
      "writes made since it left the in-sync set; what is missing is gone "
      "for good");
  accept_loss->add_option("shard", c.cluster.shard, "the shard's number")
      ->required();
  accept_loss->add_option(
      "--to", c.cluster.to,
      "a live backup to take the shard with what its copy holds, when no "
      "copy in step is left (see the replicas' positions in `durin cluster "
      "status`); the owner when not given");
  for (auto* sub : {move, drain, accept_loss}) {
    sub->add_option("--etcd", c.cluster.etcd, "etcd client URLs")->required();
    sub->add_option("--cluster", c.cluster.cluster, "the cluster's name")
        ->required();
    sub->add_option("--timeout-s", c.cluster.timeout_s,
                    "how long to wait for each shard (default 120)");
  }
  on_chosen(move, c,
            [](cli& c) { return cluster_move_command(c.cluster, false); });
  on_chosen(drain, c,
            [](cli& c) { return cluster_move_command(c.cluster, true); });
  on_chosen(accept_loss, c,
            [](cli& c) { return cluster_accept_loss_command(c.cluster); });
  on_chosen(init, c, [](cli& c) { return cluster_init_command(c.cluster); });
  on_chosen(status, c,
            [](cli& c) { return cluster_status_command(c.cluster); });
}

// durin admin: offline maintenance of a stopped node.
void add_admin_commands(CLI::App& app, cli& c) {
  auto* admin = app.add_subcommand("admin", "offline maintenance of a node");
  admin->require_subcommand(1);
  auto* reset_key = admin->add_subcommand(
      "reset-key",
      "with the node stopped: a new admin key in DATA_DIR/admin.key");
  reset_key->add_option("--data-dir", c.data_dir, "the node's data dir");
  on_chosen(reset_key, c, [](cli& c) { return reset_key_command(c.data_dir); });
}

// run, serve, admin reset-key: commands on a local data dir; cluster: etcd.
void add_local_commands(CLI::App& app, cli& c) {
  add_run_local_command(app, c);
  add_serve_command(app, c);
  add_cluster_commands(app, c);
  add_admin_commands(app, c);
}

std::optional<durin::json> start_body(cli& c) {
  auto parsed = parse_json_option("--input", c.input);
  if (!parsed) {
    return std::nullopt;
  }
  durin::json body = {{"flow", c.flow}, {"input", *parsed}};
  if (c.no_wait) {
    body["wait"] = false;
  }
  if (!c.min_retention.empty() && c.hook_token.empty()) {
    // A retention is the start token's: alone it would be dropped.
    std::cerr << "invalid-argument: --min-retention needs --hook-token\n";
    return std::nullopt;
  }
  if (!c.hook_token.empty()) {
    body["hook"] = {{"token", c.hook_token}};
    if (!c.min_retention.empty()) {
      body["hook"]["minRetention"] = c.min_retention;
    }
  }
  if (!c.instance_id.empty()) {
    body["instanceId"] = c.instance_id;
  }
  if (!c.on_duplicate.empty()) {
    body["onDuplicate"] = c.on_duplicate;
  }
  if (!c.command_id.empty()) {
    body["commandId"] = c.command_id;
  }
  auto add_json = [&body](const char* option, const std::string& text,
                          const char* field) {
    if (text.empty()) {
      return true;
    }
    auto value = parse_json_option(option, text);
    if (value) {
      body[field] = std::move(*value);
    }
    return value.has_value();
  };
  if (!add_json("--memo", c.memo, "memo") ||
      !add_json("--search-attributes", c.search_attributes,
                "searchAttributes")) {
    return std::nullopt;
  }
  return body;
}

std::string list_target(const cli& c) {
  std::string query;
  auto add = [&query](const std::string& key, const std::string& value) {
    if (!value.empty()) {
      query += (query.empty() ? "?" : "&") + key + "=" + percent_encode(value);
    }
  };
  add("status", c.status_filter);
  add("flow", c.flow_filter);
  add("scheduleId", c.schedule_filter);
  add("query", c.run_query);
  add("limit", c.limit > 0 ? std::to_string(c.limit) : "");
  add("cursor", c.cursor);
  return "/v1/runs" + query;
}

// The body of a cancel or a terminate.
std::optional<durin::json> stop_body(cli& c) {
  durin::json body = durin::json::object();
  if (!c.reason.empty()) {
    body["reason"] = c.reason;
  }
  if (!c.command_id.empty()) {
    body["commandId"] = c.command_id;
  }
  return body;
}

// runs message|update|query: talking to a running flow.
void add_message_commands(CLI::App* runs, cli& c) {
  auto* message =
      runs->add_subcommand("message", "send a run (or an instance) a message");
  message->add_option("id", c.id, "run id (instance id with --instance)")
      ->required();
  message->add_option("name", c.name, "the message's name")->required();
  message->add_option("--payload", c.payload, "the payload, as JSON");
  message->add_option("--key", c.message_key,
                      "idempotency key: a repeat records nothing");
  message->add_flag("--instance", c.by_instance, "id is an instance id");
  message->add_option("--start-flow", c.start_flow,
                      "with --instance: start this flow when no run holds it");
  message->add_option("--start-input", c.start_input,
                      "the started run's input, as JSON");
  add_client_options(message, c.client, true);
  request_command(
      message, c, "POST",
      [](const cli& c) {
        return std::string(c.by_instance ? "/v1/instances/" : "/v1/runs/") +
               percent_encode(c.id) + "/messages/" + percent_encode(c.name);
      },
      [](cli& c) -> std::optional<durin::json> {
        auto payload = parse_json_option("--payload", c.payload);
        if (!payload) {
          return std::nullopt;
        }
        durin::json body = {{"payload", *payload}};
        if (!c.message_key.empty()) {
          body["idempotencyKey"] = c.message_key;
        }
        if (!c.start_flow.empty()) {
          auto input = parse_json_option("--start-input", c.start_input);
          if (!input) {
            return std::nullopt;
          }
          body["start"] = {{"flow", c.start_flow}, {"input", *input}};
        }
        return body;
      });

  auto* update = runs->add_subcommand(
      "update", "send a run an update and wait for its result");
  update->add_option("id", c.id, "run id")->required();
  update->add_option("name", c.name, "the update's name")->required();
  update->add_option("--args", c.args, "its arguments, as JSON");
  update->add_option("--update-id", c.update_id,
                     "a repeat gets the first update's handle or result");
  update->add_option("--wait-for", c.wait_for, "accepted or completed");
  add_client_options(update, c.client, true);
  request_command(
      update, c, "POST",
      [](const cli& c) {
        return "/v1/runs/" + percent_encode(c.id) + "/updates/" +
               percent_encode(c.name);
      },
      [](cli& c) -> std::optional<durin::json> {
        auto args = parse_json_option("--args", c.args);
        if (!args) {
          return std::nullopt;
        }
        durin::json body = {{"args", *args}, {"waitFor", c.wait_for}};
        if (!c.update_id.empty()) {
          body["updateId"] = c.update_id;
        }
        return body;
      });

  auto* query = runs->add_subcommand("query", "read a run's state");
  query->add_option("id", c.id, "run id")->required();
  query->add_option("name", c.name, "the query's name")->required();
  query->add_option("--args", c.args, "its arguments, as JSON");
  add_client_options(query, c.client, false);
  request_command(
      query, c, "GET",
      [](const cli& c) {
        return "/v1/runs/" + percent_encode(c.id) + "/queries/" +
               percent_encode(c.name) + "?args=" + percent_encode(c.args);
      },
      nullptr);
}

// runs start|get|list|history|describe|cancel|terminate|message|update|query.
void add_run_commands(CLI::App& app, cli& c) {
  auto* runs = app.add_subcommand("runs", "start and inspect runs");
  runs->require_subcommand(1);
  auto* start = runs->add_subcommand("start", "start a run");
  start->add_option("--flow", c.flow, "flow name")->required();
  start->add_option("--input", c.input, "the flow's input, as JSON");
  start->add_flag("--no-wait", c.no_wait, "answer once admitted");
  start->add_option("--hook-token", c.hook_token, "start hook token");
  start->add_option("--min-retention", c.min_retention,
                    "how long the start hook's token stays held");
  start->add_option("--instance-id", c.instance_id,
                    "the business process; one active run each");
  start->add_option("--on-duplicate", c.on_duplicate,
                    "reject-duplicate (default) or return-existing-active");
  start->add_option("--command-id", c.command_id,
                    "a repeat gets the run the first start admitted");
  start->add_option("--memo", c.memo, "the run's memo, as JSON");
  start->add_option("--search-attributes", c.search_attributes,
                    "the run's search attributes, a JSON object");
  add_client_options(start, c.client, true);
  request_command(start, c, "POST", fixed("/v1/runs"), start_body);

  auto run_target = [](std::string suffix) {
    return [suffix](const cli& c) {
      return "/v1/runs/" + percent_encode(c.id) + suffix;
    };
  };
  auto* get = runs->add_subcommand("get", "the run now");
  get->add_option("id", c.id, "run id")->required();
  add_client_options(get, c.client, false);
  request_command(get, c, "GET", run_target(""), nullptr);

  auto* list = runs->add_subcommand("list", "runs, newest first");
  list->add_option("--status", c.status_filter, "only this status");
  list->add_option("--flow", c.flow_filter, "only this flow");
  list->add_option("--schedule-id", c.schedule_filter,
                   "only runs this schedule started");
  list->add_option("--query", c.run_query,
                   "only runs it matches, e.g. \"priority > 3 AND status = "
                   "'running'\"");
  list->add_option("--limit", c.limit, "page size, 1 to 1000")
      ->check(CLI::Range(1, 1000));
  list->add_option("--cursor", c.cursor, "from a previous nextCursor");
  add_client_options(list, c.client, false);
  request_command(list, c, "GET", list_target, nullptr);

  auto* history = runs->add_subcommand("history", "recorded events");
  history->add_option("id", c.id, "run id")->required();
  add_client_options(history, c.client, false);
  request_command(history, c, "GET", run_target("/history"), nullptr);

  auto* describe = runs->add_subcommand(
      "describe", "each step's recorded outcomes beside its attempts");
  describe->add_option("id", c.id, "run id")->required();
  add_client_options(describe, c.client, false);
  on_chosen(describe, c,
            [](cli& c) { return describe_command(c.client, c.id); });

  auto* cancel = runs->add_subcommand("cancel", "cancel a run");
  cancel->add_option("id", c.id, "run id")->required();
  cancel->add_option("--reason", c.reason, "why");
  cancel->add_option("--command-id", c.command_id,
                     "a repeat answers the cancelled run again");
  add_client_options(cancel, c.client, true);
  request_command(cancel, c, "POST", run_target("/cancel"), stop_body);

  auto* terminate = runs->add_subcommand(
      "terminate", "stop a run at once, running none of its code");
  terminate->add_option("id", c.id, "run id")->required();
  terminate->add_option("--reason", c.reason, "why");
  terminate->add_option("--command-id", c.command_id,
                        "a repeat answers the terminated run again");
  add_client_options(terminate, c.client, true);
  request_command(terminate, c, "POST", run_target("/terminate"), stop_body);

  add_message_commands(runs, c);
}

// hooks get|resume.
void add_hook_commands(CLI::App& app, cli& c) {
  auto* hooks = app.add_subcommand("hooks", "hooks by token");
  hooks->require_subcommand(1);
  auto hook_target = [](std::string suffix) {
    return [suffix](const cli& c) {
      return "/v1/hooks/" + percent_encode(c.id) + suffix;
    };
  };
  auto* get = hooks->add_subcommand("get", "the hook on a token");
  get->add_option("token", c.id, "hook token")->required();
  add_client_options(get, c.client, false);
  request_command(get, c, "GET", hook_target(""), nullptr);

  auto* resume = hooks->add_subcommand("resume", "deliver a payload");
  resume->add_option("token", c.id, "hook token")->required();
  resume->add_option("--payload", c.payload, "the payload, as JSON");
  resume->add_option("--command-id", c.command_id,
                     "a repeat is not delivered again");
  add_client_options(resume, c.client, true);
  request_command(resume, c, "POST", hook_target("/resume"),
                  [](cli& c) -> std::optional<durin::json> {
                    auto parsed = parse_json_option("--payload", c.payload);
                    if (!parsed) {
                      return std::nullopt;
                    }
                    durin::json body = {{"payload", *parsed}};
                    if (!c.command_id.empty()) {
                      body["commandId"] = c.command_id;
                    }
                    return body;
                  });
}

// api-keys create|list|revoke, tenants create.
void add_key_commands(CLI::App& app, cli& c) {
  auto* api_keys = app.add_subcommand("api-keys", "the tenant's API keys");
  api_keys->require_subcommand(1);
  auto* create = api_keys->add_subcommand("create", "a new key");
  create->add_option("--name", c.name, "a label");
  create->add_option(
      "--role", c.role,
      "read-only, worker, operator (default) or admin; at most the caller's");
  add_client_options(create, c.client, true);
  request_command(create, c, "POST", fixed("/v1/api-keys"), [](cli& c) {
    durin::json body = durin::json::object();
    if (!c.name.empty()) {
      body["name"] = c.name;
    }
    if (!c.role.empty()) {
      body["role"] = c.role;
    }
    return std::optional<durin::json>(body);
  });

  auto* list = api_keys->add_subcommand("list", "the keys");
  add_client_options(list, c.client, false);
  request_command(list, c, "GET", fixed("/v1/api-keys"), nullptr);

  auto* revoke = api_keys->add_subcommand("revoke", "revoke a key");
  revoke->add_option("id", c.id, "key id")->required();
  add_client_options(revoke, c.client, true);
  request_command(
      revoke, c, "DELETE",
      [](const cli& c) { return "/v1/api-keys/" + percent_encode(c.id); },
      nullptr);

  auto* tenants = app.add_subcommand("tenants", "tenants (admin key)");
  tenants->require_subcommand(1);
  auto* tenants_create =
      tenants->add_subcommand("create", "a tenant with its first key");
  tenants_create->add_option("--name", c.name, "the tenant's name")->required();
  add_client_options(tenants_create, c.client, true);
  request_command(tenants_create, c, "POST", fixed("/v1/tenants"), [](cli& c) {
    return std::optional<durin::json>(durin::json{{"name", c.name}});
  });
}

// The body of `schedules create` from its options.
std::optional<durin::json> schedule_body(cli& c) {
  const auto& f = c.schedule;
  auto input = parse_json_option("--input", c.input);
  if (!input) {
    return std::nullopt;
  }
  durin::json spec = durin::json::object();
  auto put = [](durin::json& into, const char* field, const std::string& v) {
    if (!v.empty()) {
      into[field] = v;
    }
  };
  put(spec, "cron", f.cron);
  put(spec, "timezone", f.timezone);
  put(spec, "interval", f.interval);
  put(spec, "jitter", f.jitter);
  put(spec, "startAt", f.start_at);
  put(spec, "endAt", f.end_at);
  durin::json body = {{"scheduleId", c.id},
                      {"spec", spec},
                      {"action", {{"flow", c.flow}, {"input", *input}}}};
  put(body, "overlap", f.overlap);
  put(body, "catchupWindow", f.catchup_window);
  put(body, "note", f.note);
  if (f.paused) {
    body["paused"] = true;
  }
  return body;
}

// schedules create|get|list|pause|unpause|trigger|backfill|delete.
// durin schedules create: every field of a schedule as a flag.
void add_schedule_create(CLI::App* schedules, cli& c) {
  auto& f = c.schedule;
  auto* create = schedules->add_subcommand("create", "a new schedule");
  create->add_option("id", c.id, "schedule id, unique in the tenant")
      ->required();
  create->add_option("--cron", f.cron, "5-field cron, e.g. \"30 2 * * *\"");
  create->add_option("--timezone", f.timezone, "IANA zone of the cron");
  create->add_option("--interval", f.interval, "instead of a cron: \"1m\"");
  create->add_option("--jitter", f.jitter, "delay each firing up to this");
  create->add_option("--start-at", f.start_at, "RFC 3339: no firing before");
  create->add_option("--end-at", f.end_at, "RFC 3339: no firing after");
  create->add_option("--flow", c.flow, "the flow each firing starts")
      ->required();
  create->add_option("--input", c.input, "the flow's input, as JSON");
  create->add_option("--overlap", f.overlap,
                     "skip (default), buffer_one, buffer_all, allow_all, "
                     "cancel_other, terminate_other");
  create->add_option("--catchup-window", f.catchup_window,
                     "missed occurrences younger than this fire (default 1m)");
  create->add_option("--note", f.note, "why");
  create->add_flag("--paused", f.paused, "create it paused");
  add_client_options(create, c.client, true);
  request_command(create, c, "POST", fixed("/v1/schedules"), schedule_body);
}

void add_schedule_commands(CLI::App& app, cli& c) {
  auto* schedules =
      app.add_subcommand("schedules", "start runs on a cron or an interval");
  schedules->require_subcommand(1);
  auto target = [](std::string suffix) {
    return [suffix](const cli& c) {
      return "/v1/schedules/" + percent_encode(c.id) + suffix;
    };
  };
  auto& f = c.schedule;
  add_schedule_create(schedules, c);

  auto* get = schedules->add_subcommand("get", "the schedule and its firings");
  get->add_option("id", c.id, "schedule id")->required();
  add_client_options(get, c.client, false);
  request_command(get, c, "GET", target(""), nullptr);

  auto* list = schedules->add_subcommand("list", "the tenant's schedules");
  list->add_option("--limit", c.limit, "page size, 1 to 1000")
      ->check(CLI::Range(1, 1000));
  list->add_option("--cursor", c.cursor, "from a previous nextCursor");
  add_client_options(list, c.client, false);
  request_command(
      list, c, "GET",
      [](const cli& c) {
        std::string query;
        if (c.limit > 0) {
          query = "?limit=" + std::to_string(c.limit);
        }
        if (!c.cursor.empty()) {
          query += (query.empty() ? "?" : "&") + std::string("cursor=") +
                   percent_encode(c.cursor);
        }
        return "/v1/schedules" + query;
      },
      nullptr);

  for (const char* verb : {"pause", "unpause"}) {
    auto* change = schedules->add_subcommand(
        verb, std::string(verb) + " a schedule, with a note");
    change->add_option("id", c.id, "schedule id")->required();
    change->add_option("--note", f.note, "why");
    add_client_options(change, c.client, true);
    request_command(change, c, "POST", target(std::string("/") + verb),
                    [](cli& c) {
                      durin::json body = durin::json::object();
                      if (!c.schedule.note.empty()) {
                        body["note"] = c.schedule.note;
                      }
                      return std::optional<durin::json>(body);
                    });
  }

  auto* trigger = schedules->add_subcommand("trigger", "fire once, now");
  trigger->add_option("id", c.id, "schedule id")->required();
  add_client_options(trigger, c.client, true);
  request_command(trigger, c, "POST", target("/trigger"), [](cli&) {
    return std::optional<durin::json>(durin::json::object());
  });

  auto* backfill = schedules->add_subcommand(
      "backfill", "fire every occurrence of a past time range");
  backfill->add_option("id", c.id, "schedule id")->required();
  backfill->add_option("--start-at", f.start_at, "RFC 3339")->required();
  backfill->add_option("--end-at", f.end_at, "RFC 3339")->required();
  add_client_options(backfill, c.client, true);
  request_command(backfill, c, "POST", target("/backfill"), [](cli& c) {
    return std::optional<durin::json>(durin::json{
        {"startAt", c.schedule.start_at}, {"endAt", c.schedule.end_at}});
  });

  auto* remove =
      schedules->add_subcommand("delete", "delete a schedule (its runs stay)");
  remove->add_option("id", c.id, "schedule id")->required();
  add_client_options(remove, c.client, true);
  request_command(remove, c, "DELETE", target(""), nullptr);
}

// tasks list, worker.
void add_task_commands(CLI::App& app, cli& c) {
  auto* tasks = app.add_subcommand("tasks", "step attempts and leases");
  tasks->require_subcommand(1);
  auto* list = tasks->add_subcommand(
      "list", "live attempts, queues, stuck leases, redeliveries");
  add_client_options(list, c.client, false);
  request_command(list, c, "GET", fixed("/v1/tasks"), nullptr);

  auto* worker = app.add_subcommand(
      "worker", "run the example steps of a task queue against a node");
  worker->add_option("--queue", c.queue, "task queue to poll");
  worker
      ->add_option("--concurrency", c.concurrency,
                   "tasks in hand at once, 1 to 256")
      ->check(CLI::Range(1, 256));
  worker->add_option("--worker-id", c.worker_id, "default HOST-PID");
  add_client_options(worker, c.client, false);
  on_chosen(worker, c, [](cli& c) {
    return worker_command(c.client, c.queue, c.concurrency, c.worker_id);
  });
}

}  // namespace

// CLI11 answers a word that names no command (`durin bogus`, `durin runs
// lst`) with only "A subcommand is required": this names the word and the
// commands there are instead. False when the error is another.
bool said_unknown_command(const CLI::App& app) {
  const CLI::App* at = &app;
  for (auto chosen = at->get_subcommands(); !chosen.empty();
       chosen = at->get_subcommands()) {
    at = chosen.front();
  }
  const auto rest = at->remaining(false);
  if (rest.empty()) {
    return false;
  }
  std::string commands;
  for (const auto* command :
       at->get_subcommands([](const CLI::App*) { return true; })) {
    commands += (commands.empty() ? "" : ", ") + command->get_name();
  }
  const auto where =
      at == &app ? std::string("durin") : "durin " + at->get_name();
  std::cerr << "invalid-argument: '" << rest.front() << "' is no command of "
            << where << "; its commands: " << commands << "\n";
  return true;
}

int main(int argc, char** argv) {
  CLI::App app{"durin: durable workflows for C++"};
  app.require_subcommand(1);
  cli c;
  add_local_commands(app, c);
  add_run_commands(app, c);
  add_hook_commands(app, c);
  add_key_commands(app, c);
  add_task_commands(app, c);
  add_schedule_commands(app, c);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RequiredError& e) {
    if (said_unknown_command(app)) {
      return 2;
    }
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return c.exit_code;
}
