// A real cluster for process-level tests: an etcd of one member, or of
// `etcd_members` (tests/support/etcd_process.hpp), on free ports, `durin
// cluster init`, and N `durin serve
// --etcd` nodes on 127.0.0.1 (ports picked by the kernel), each with its
// own data dir; kill -9, SIGSTOP/SIGCONT and restart by pid; waits for the
// routing to settle, read from GET /v1/cluster. The node lease TTL is 2 s
// (etcd's floor with the harness's election timeout), so a lost node's
// shards are free within about 2 s. Every process the harness starts is
// stopped by it, by its pid. Not thread-safe: one test thread drives it
// (api_clients may run on other threads).
//
// Partitions: each node reaches etcd through a proxy of its own (its
// --etcd is etcd_proxy(i)), and the other nodes reach its peer endpoint
// through another (it listens on a free port and advertises peer_proxy(i)
// with --peer-advertise); tests/support/tcp_proxy.hpp cuts and heals them.
// Cutting etcd_proxy(i) cuts node i from etcd alone; cutting peer_proxy(i)
// cuts every connection to node i's peer endpoint, from whichever node
// (CAF carries both directions on a connection, so with two nodes cutting
// both peer proxies cuts them from each other). The test client, the CLI
// and the test's own etcd calls reach etcd and the nodes directly. A
// proxy outlives restarts of its node: a node restarted while cut stays
// cut. The destructor heals every proxy before it stops the nodes. With
// several etcd members there are no etcd proxies: every node's --etcd lists
// every member, and its client moves to the next when one fails.
#pragma once

#include <signal.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "tests/support/child_process.hpp"
#include "tests/support/etcd_process.hpp"
#include "tests/support/free_port.hpp"
#include "tests/support/proc_stat.hpp"
#include "tests/support/serve_process.hpp"
#include "tests/support/tcp_proxy.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin::testing {

struct cluster_setup {
  int nodes = 3;
  std::uint32_t shards = 8;
  std::int64_t lease_ttl_s = 2;
  // Place the shards over the nodes at init (--nodes); else they are
  // placed over the nodes that join.
  bool place_at_init = true;
  // Copies of each shard (--replicas), and how long a primary waits for
  // a backup's answer before it drops it (--replication-timeout-ms).
  std::uint32_t replicas = 1;
  std::int64_t replication_timeout_ms = 1000;
  // Environment of every node ("NAME=value"), and flags of its serve.
  std::vector<std::string> env;
  std::vector<std::string> flags;
  int etcd_members = 1;
};

class cluster_harness {
 public:
  explicit cluster_harness(cluster_setup setup = {})
      : setup_(setup),
        name_("t" + std::to_string(std::random_device{}())),
        etcd_(etcd_process::start_members(setup.etcd_members)) {
    std::vector<std::string> init = {
        "cluster",    "init",
        "--etcd",     etcd_endpoints(),
        "--cluster",  name_,
        "--shards",   std::to_string(setup.shards),
        "--replicas", std::to_string(setup.replicas)};
    if (setup.place_at_init) {
      std::string ids;
      for (int i = 0; i < setup.nodes; ++i) {
        ids += (i == 0 ? "" : ",") + node_id(i);
      }
      init.push_back("--nodes");
      init.push_back(ids);
    }
    if (run_cli(init) != 0) {
      throw std::runtime_error("durin cluster init failed");
    }
    for (int i = 0; i < setup.nodes; ++i) {
      if (etcd_.size() == 1) {
        etcd_proxies_.push_back(
            std::make_unique<tcp_proxy>(etcd_.front()->client_port()));
      }
      peer_proxies_.push_back(std::make_unique<tcp_proxy>(0));
      nodes_.push_back(nullptr);
      start(i);
    }
  }

  ~cluster_harness() {
    // A node cut off stops slowly (its lease revoke, its peers' calls wait
    // for their deadlines).
    for (auto& proxy : etcd_proxies_) {
      proxy->heal();
    }
    for (auto& proxy : peer_proxies_) {
      proxy->heal();
    }
    for (auto& node : nodes_) {
      if (node && node->running()) {
        ::kill(node->pid(), SIGCONT);  // a paused node cannot stop
      }
      node.reset();  // SIGTERM, by its pid
    }
  }

  cluster_harness(const cluster_harness&) = delete;
  cluster_harness& operator=(const cluster_harness&) = delete;

  const std::string& name() const { return name_; }
  // The first etcd member (the only one unless etcd_members says more).
  etcd_process& etcd() { return *etcd_.front(); }
  etcd_process& etcd(int member) { return *etcd_.at(member); }
  int etcd_members() const { return static_cast<int>(etcd_.size()); }
  // The member that leads now; -1 when none answers as leader.
  int etcd_leader() const {
    for (std::size_t m = 0; m < etcd_.size(); ++m) {
      if (etcd_[m]->leader()) {
        return static_cast<int>(m);
      }
    }
    return -1;
  }
  // Every member's client URL, comma-separated (for --etcd).
  std::string etcd_endpoints() const {
    std::string out;
    for (const auto& member : etcd_) {
      out += (out.empty() ? "" : ",") + member->endpoint();
    }
    return out;
  }
  int size() const { return static_cast<int>(nodes_.size()); }
  static std::string node_id(int i) { return "n" + std::to_string(i); }
  std::string data_dir(int i) const { return dir_.path() + "/" + node_id(i); }
  serve_process& node(int i) { return *nodes_.at(i); }
  // What node `i` reaches etcd through, and what the other nodes reach
  // its peer endpoint through.
  tcp_proxy& etcd_proxy(int i) { return *etcd_proxies_.at(i); }
  tcp_proxy& peer_proxy(int i) { return *peer_proxies_.at(i); }
  // Every node's data dir holds the cluster's one admin key.
  const std::string& admin_key() const { return nodes_.front()->admin_key(); }
  api_client client(int i, std::int64_t timeout_ms = 30'000) {
    return api_client(node(i).address(), admin_key(), timeout_ms);
  }

  // Starts node `i` (again): same id, data dir and proxies, new ports;
  // `env` as "NAME=value" (e.g. DURIN_KILL_AT, persistence/test_points.hpp).
  void start(int i, std::vector<std::string> env = {}) {
    serve_setup node_setup;
    node_setup.env = setup_.env;
    node_setup.env.insert(node_setup.env.end(), env.begin(), env.end());
    node_setup.read_timeout_ms = 10'000;
    // The peer port is picked here, for the proxy to forward to; one taken
    // meanwhile by another process fails the start: another port, again.
    for (int attempt = 0;; ++attempt) {
      const int peer_port = free_port();
      peer_proxies_.at(i)->set_upstream(peer_port);
      node_setup.flags = {
          "--etcd",
          etcd_proxies_.empty() ? etcd_endpoints() : etcd_proxies_.at(i)->url(),
          "--cluster",
          name_,
          "--node-id",
          node_id(i),
          "--peer-listen",
          "127.0.0.1:" + std::to_string(peer_port),
          "--peer-advertise",
          peer_proxies_.at(i)->address(),
          "--lease-ttl-s",
          std::to_string(setup_.lease_ttl_s),
          "--replication-timeout-ms",
          std::to_string(setup_.replication_timeout_ms)};
      node_setup.flags.insert(node_setup.flags.end(), setup_.flags.begin(),
                              setup_.flags.end());
      try {
        nodes_.at(i) = std::make_unique<serve_process>(data_dir(i), node_setup);
        return;
      } catch (const std::runtime_error&) {
        // Whoever held the port (often a connection's ephemeral end, which
        // the kernel draws from the same range) may have let it go by now,
        // so a free port afterwards proves nothing: another port, again.
        if (attempt >= 4) {
          throw;
        }
      }
    }
  }
  void kill9(int i) { node(i).kill9(); }
  void stop(int i) { node(i).terminate(); }
  void restart(int i) {
    if (nodes_.at(i) && nodes_.at(i)->running()) {
      nodes_.at(i)->terminate();
    }
    start(i);
  }
  // SIGSTOP, and back once every thread of the node is stopped: a signal
  // is delivered after kill() returns, and a request sent meanwhile could
  // still be served.
  void pause(int i) {
    const auto pid = node(i).pid();
    ::kill(pid, SIGSTOP);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!proc_all_threads_stopped(pid) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  void resume(int i) { ::kill(node(i).pid(), SIGCONT); }

  // Waits for node `i` to end by itself (a kill point); true when it died
  // of SIGKILL.
  bool wait_killed(int i) { return node(i).wait_killed(); }

  // GET /v1/cluster through node `via`.
  json status(int via = 0) {
    auto answer = client(via).get("/v1/cluster");
    return answer.status == 200 ? answer.value : json();
  }

  // The value of metric `name` (no labels) in node `i`'s /metrics. A node
  // that does not answer, or a metric it does not have, fails the test
  // (and reads 0): an expected 0 must not pass for a node that is gone or
  // a misspelt name.
  std::uint64_t metric(int i, const std::string& name) {
    auto answer = client(i).get("/metrics");
    if (answer.status != 200) {
      ADD_FAILURE() << "node " << i << " answered GET /metrics "
                    << answer.status << ", reading " << name;
      return 0;
    }
    const auto at = answer.body.find("\n" + name + " ");
    if (at == std::string::npos) {
      ADD_FAILURE() << "node " << i << "'s /metrics has no " << name;
      return 0;
    }
    return std::stoull(answer.body.substr(at + name.size() + 2));
  }

  // The node that owns `shard` now (etcd's view), or -1.
  int owner_of(std::uint32_t shard, int via = 0) {
    auto view = status(via);
    if (!view.is_object()) {
      return -1;
    }
    for (const auto& entry : view["shards"]) {
      if (entry["id"] == shard && entry["owner"].is_string()) {
        const auto id = entry["owner"].get<std::string>();
        for (int i = 0; i < size(); ++i) {
          if (node_id(i) == id) {
            return i;
          }
        }
      }
    }
    return -1;
  }

  // Until every shard has a live owner in etcd and is served (its store
  // open) by it: the running nodes together serve every shard.
  bool wait_for_routing(
      std::chrono::milliseconds limit = std::chrono::seconds(20)) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      bool all = true;
      std::uint64_t served = 0;
      for (int i = 0; i < size() && all; ++i) {
        if (!nodes_.at(i) || !nodes_.at(i)->running()) {
          continue;
        }
        auto view = status(i);
        all = view.is_object() && view.contains("shards");
        if (all) {
          for (const auto& entry : view["shards"]) {
            all = all && entry["owner"].is_string();
          }
          served += view["selfShardsServed"].get<std::uint64_t>();
        }
      }
      if (all && served == setup_.shards) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // `durin ARGS...` (words without spaces): its exit code; its output in
  // `output` when given.
  static int run_cli(const std::vector<std::string>& args,
                     std::string* output = nullptr) {
    std::string line;
    for (const auto& arg : args) {
      line += arg + " ";
    }
    auto ran = run_durin(line + "2>&1");
    if (output != nullptr) {
      *output = std::move(ran.output);
    }
    return ran.code;
  }

 private:
  cluster_setup setup_;
  std::string name_;
  temp_dir dir_;
  std::vector<std::unique_ptr<etcd_process>> etcd_;
  // Before the nodes: they are stopped while their proxies still forward.
  std::vector<std::unique_ptr<tcp_proxy>> etcd_proxies_;
  std::vector<std::unique_ptr<tcp_proxy>> peer_proxies_;
  std::vector<std::unique_ptr<serve_process>> nodes_;
};

}  // namespace durin::testing
