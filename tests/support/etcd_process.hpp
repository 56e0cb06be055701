// A real etcd member (/usr/bin/etcd, Debian's etcd-server) as a child
// process of a test, alone or one of a cluster (start_members): its own temp
// dir (data in data/, log and stderr in etcd.log), a client and a peer port on
// 127.0.0.1 that were free when it started, fast elections (heartbeat 100 ms,
// election timeout 1000 ms, so the minimum lease TTL is 2 s). The constructor
// returns once etcd has a leader and answers; it throws std::runtime_error when
// etcd does not come up. Every stop is by the child's pid; the destructor stops
// it. restart() keeps ports and data, so what was written survives, as after a
// crash of a real member (a cluster's member rejoins the others). Not
// thread-safe: one test thread drives it.
#pragma once

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/http_client.hpp"
#include "durin/json.hpp"
#include "tests/support/child_process.hpp"
#include "tests/support/free_port.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin::testing {

class etcd_process {
 public:
  static constexpr const char* program = "/usr/bin/etcd";

  // `flags` are appended to etcd's command line (e.g. {"--auto-compaction-
  // retention", "1"}).
  explicit etcd_process(std::vector<std::string> flags = {})
      : flags_(std::move(flags)) {
    if (::access(program, X_OK) != 0) {
      throw std::runtime_error(std::string(program) +
                               " is missing: scripts/install-deps installs "
                               "etcd-server");
    }
    // A port seen free may be taken before etcd binds it: new ports, again.
    for (int attempt = 0; attempt < 5; ++attempt) {
      client_port_ = free_port();
      peer_port_ = free_port();
      if (launch(std::chrono::seconds(15))) {
        return;
      }
      kill();
      std::error_code ignored;
      std::filesystem::remove_all(data_dir(), ignored);
    }
    throw std::runtime_error("etcd did not come up; its log ends:\n" +
                             log_tail());
  }

  // `count` members of one etcd cluster, each on free ports, returned once
  // every one of them sees a leader; throws std::runtime_error when they do
  // not come up. One member is the plain constructor's etcd.
  static std::vector<std::unique_ptr<etcd_process>> start_members(int count) {
    std::vector<std::unique_ptr<etcd_process>> members;
    if (count <= 1) {
      members.push_back(std::make_unique<etcd_process>());
      return members;
    }
    for (int attempt = 0; attempt < 5; ++attempt) {
      members.clear();  // a failed attempt's members stop
      std::string initial;
      for (int i = 0; i < count; ++i) {
        std::unique_ptr<etcd_process> member(new etcd_process(
            std::vector<std::string>{}, "n" + std::to_string(i + 1)));
        initial +=
            (i == 0 ? "" : ",") + member->name_ + "=" + member->peer_url();
        members.push_back(std::move(member));
      }
      for (auto& member : members) {
        member->initial_cluster_ = initial;
        member->spawn();
      }
      bool up = true;
      for (auto& member : members) {
        up = up && member->wait_for_leader(std::chrono::seconds(30));
      }
      if (up) {
        return members;
      }
    }
    throw std::runtime_error("an etcd cluster of " + std::to_string(count) +
                             " members did not come up");
  }

  ~etcd_process() { stop(); }

  etcd_process(const etcd_process&) = delete;
  etcd_process& operator=(const etcd_process&) = delete;

  // "http://127.0.0.1:PORT", for etcd_client::make and etcd_watch::start.
  std::string endpoint() const {
    return "http://127.0.0.1:" + std::to_string(client_port_);
  }
  int client_port() const { return client_port_; }
  pid_t pid() const { return process_ ? process_->pid() : -1; }
  bool running() const { return process_ && process_->running(); }
  std::string data_dir() const { return dir_.path() + "/data"; }
  std::string log_path() const { return dir_.path() + "/etcd.log"; }

  // SIGKILL, as a crash; returns once the process is reaped.
  void kill() {
    if (process_) {
      process_->kill9();
      process_.reset();
    }
  }

  // SIGTERM, then SIGKILL if it has not exited within `limit`.
  void stop(std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    if (process_ && process_->pid() > 0) {
      process_->terminate(limit);
    }
    process_.reset();
  }

  // Stops it if it runs, then starts it again on the same ports and data.
  void restart() {
    stop();
    if (!launch(std::chrono::seconds(30))) {
      kill();
      throw std::runtime_error("etcd did not come back; its log ends:\n" +
                               log_tail());
    }
  }

  // Whether this member is its cluster's leader now (false when it does not
  // answer).
  bool leader() const {
    client::http_connection status({"127.0.0.1", std::to_string(client_port_)},
                                   500);
    auto answer = status.send("POST", "/v3/maintenance/status", {}, "{}");
    if (!answer || answer->status != 200) {
      return false;
    }
    auto body = json::parse(answer->body, nullptr, false);
    if (!body.is_object() || !body.contains("header") ||
        !body.contains("leader")) {
      return false;
    }
    return body["header"].value("member_id", std::string()) ==
           body["leader"].get<std::string>();
  }

  // The last `bytes` of etcd's log, for a failing test's message.
  std::string log_tail(std::size_t bytes = 4000) const {
    std::ifstream file(log_path());
    std::string text((std::istreambuf_iterator<char>(file)),
                     std::istreambuf_iterator<char>());
    return text.size() > bytes ? text.substr(text.size() - bytes) : text;
  }

 private:
  // A member of a cluster: ports picked now, started by start_members.
  etcd_process(std::vector<std::string> flags, std::string name)
      : flags_(std::move(flags)),
        name_(std::move(name)),
        client_port_(free_port()),
        peer_port_(free_port()) {}

  std::string peer_url() const {
    return "http://127.0.0.1:" + std::to_string(peer_port_);
  }

  std::vector<std::string> arguments() const {
    auto client_url = endpoint();
    auto peer_url = this->peer_url();
    std::vector<std::string> args = {
        "--name",
        name_,
        "--data-dir",
        data_dir(),
        "--listen-client-urls",
        client_url,
        "--advertise-client-urls",
        client_url,
        "--listen-peer-urls",
        peer_url,
        "--initial-advertise-peer-urls",
        peer_url,
        "--initial-cluster",
        initial_cluster_.empty() ? name_ + "=" + peer_url : initial_cluster_,
        "--initial-cluster-state",
        "new",
        "--initial-cluster-token",
        "durin-test",
        "--heartbeat-interval",
        "100",
        "--election-timeout",
        "1000",
        "--logger",
        "zap",
        "--log-outputs",
        log_path()};
    args.insert(args.end(), flags_.begin(), flags_.end());
    return args;
  }

  // Starts etcd and waits until it has a leader; false when it exited or did
  // not answer within `limit`.
  bool launch(std::chrono::milliseconds limit) {
    spawn();
    return wait_for_leader(limit);
  }

  void spawn() {
    // etcd's gateway logs to stderr whatever --log-outputs does not take.
    process_.emplace(program, arguments(), std::vector<std::string>{}, false, 0,
                     log_path());
  }

  bool wait_for_leader(std::chrono::milliseconds limit) {
    client::http_connection status({"127.0.0.1", std::to_string(client_port_)},
                                   500);
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (!process_->running()) {
        return false;
      }
      auto answer = status.send("POST", "/v3/maintenance/status", {}, "{}");
      if (answer && answer->status == 200) {
        auto body = json::parse(answer->body, nullptr, false);
        // A member answers before it has elected itself; writes need that.
        auto leader = body.find("leader");
        if (leader != body.end() && leader->is_string() && *leader != "0") {
          return true;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  std::vector<std::string> flags_;
  std::string name_ = "n1";
  // --initial-cluster of every member; empty: this member alone.
  std::string initial_cluster_;
  temp_dir dir_;
  int client_port_ = 0;
  int peer_port_ = 0;
  std::optional<child_process> process_;  // empty while stopped
};

}  // namespace durin::testing
