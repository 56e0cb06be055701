// A real `durin serve` child process on 127.0.0.1 with a port the kernel
// picked (--listen 127.0.0.1:0; the port is read from its stdout), and
// helpers to talk to it. For the gateway's end-to-end tests.
#pragma once

#include <gtest/gtest.h>

#include <poll.h>
#include <unistd.h>

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "client/http_client.hpp"
#include "durin/json.hpp"
#include "tests/support/child_process.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin::testing {

// How to start one: flags beyond --data-dir and --listen, the environment,
// the process's descriptor limit.
struct serve_setup {
  std::vector<std::string> env;  // "NAME=value"
  std::int64_t read_timeout_ms = 1000;
  std::vector<std::string> flags;  // e.g. {"--max-connections", "8"}
  rlim_t descriptors_max = 0;      // 0: inherited
};

class serve_process {
 public:
  // Starts `durin serve` on `data_dir` with extra environment `env`
  // ("NAME=value") and waits until it listens. Throws when it does not.
  serve_process(std::string data_dir, std::vector<std::string> env = {},
                std::int64_t read_timeout_ms = 1000)
      : serve_process(std::move(data_dir),
                      serve_setup{std::move(env), read_timeout_ms, {}, 0}) {}

  serve_process(std::string data_dir, serve_setup setup)
      : data_dir_(std::move(data_dir)),
        process_(DURIN_CLI, arguments(data_dir_, setup), std::move(setup.env),
                 true, setup.descriptors_max) {
    constexpr std::string_view listening = "listening on 127.0.0.1:";
    output_ = process_.read_until_line(listening, std::chrono::seconds(60));
    if (auto at = output_.find(listening); at != std::string::npos) {
      port_ = std::atoi(output_.c_str() + at + listening.size());
    }
    if (port_ == 0) {
      kill9();
      throw std::runtime_error("durin serve did not start: " + output_);
    }
    std::ifstream key_file(data_dir_ + "/admin.key");
    std::getline(key_file, admin_key_);
  }

  serve_process(const serve_process&) = delete;
  serve_process& operator=(const serve_process&) = delete;

  int port() const { return port_; }
  const std::string& admin_key() const { return admin_key_; }
  client::server_address address() const {
    return {"127.0.0.1", std::to_string(port_)};
  }

  pid_t pid() const { return process_.pid(); }
  // What it printed on stdout until it listened.
  const std::string& output() const { return output_; }

  void kill9() { process_.kill9(); }
  bool running() const { return process_.running(); }

  // SIGTERM, then the exit code (-1 when it did not exit normally in time).
  int terminate() { return process_.terminate(); }

  // Waits for the process to end on its own (a kill point); true when it
  // died of SIGKILL.
  bool wait_killed() { return process_.wait_killed(); }

 private:
  static std::vector<std::string> arguments(const std::string& data_dir,
                                            const serve_setup& setup) {
    std::vector<std::string> args = {"serve",
                                     "--data-dir",
                                     data_dir,
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--read-timeout-ms",
                                     std::to_string(setup.read_timeout_ms)};
    args.insert(args.end(), setup.flags.begin(), setup.flags.end());
    return args;
  }

  std::string data_dir_;
  child_process process_;
  int port_ = 0;
  std::string output_;
  std::string admin_key_;
};

// One keep-alive connection with a key and convenience calls; a call
// that gets no answer within `timeout_ms` fails (answer::error).
class api_client {
 public:
  api_client(client::server_address address, std::string key,
             std::int64_t timeout_ms = 30'000)
      : connection_(std::move(address), timeout_ms), key_(std::move(key)) {}

  struct answer {
    unsigned status = 0;
    std::string body;
    json value;  // parsed body (null when not JSON)
    std::map<std::string, std::string> headers;
    std::string error;  // transport failure, empty otherwise

    std::string code() const {
      return value.is_object() ? value.value("code", "") : "";
    }
  };

  answer send(const std::string& method, const std::string& target,
              const std::string& body = "",
              std::vector<std::pair<std::string, std::string>> extra = {}) {
    std::vector<std::pair<std::string, std::string>> headers;
    if (!key_.empty()) {
      headers.emplace_back("Authorization", "Bearer " + key_);
    }
    for (auto& header : extra) {
      headers.push_back(std::move(header));
    }
    answer out;
    auto got = connection_.send(method, target, headers, body);
    if (!got) {
      out.error = got.error().to_string();
      return out;
    }
    out.status = got->status;
    out.body = got->body;
    out.value = json::parse(got->body, nullptr, false);
    if (out.value.is_discarded()) {
      out.value = nullptr;
    }
    for (auto& [name, value] : got->headers) {
      out.headers[name] = value;
    }
    return out;
  }

  answer post(const std::string& target, const json& body,
              const std::string& idempotency_key = "") {
    std::vector<std::pair<std::string, std::string>> extra;
    if (!idempotency_key.empty()) {
      extra.emplace_back("Idempotency-Key", idempotency_key);
    }
    return send("POST", target, body.dump(), std::move(extra));
  }

  answer get(const std::string& target) { return send("GET", target); }

 private:
  client::http_connection connection_;
  std::string key_;
};

// Starts `flow` with `input` in the background ("wait": false), expecting
// 202; the run as admitted.
// What `durin ARGS` did: its exit code (-1 when it did not exit) and its
// standard output (add " 2>&1" to ARGS for its errors too).
struct cli_result {
  int code = -1;
  std::string output;
};

// Runs `durin ARGS` through the shell (so quote what needs it) and waits.
inline cli_result run_durin(const std::string& args) {
  cli_result result;
  const std::string command = std::string(DURIN_CLI) + " " + args;
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    return result;
  }
  char chunk[4096];
  while (auto got = std::fread(chunk, 1, sizeof chunk, pipe)) {
    result.output.append(chunk, got);
  }
  const int status = ::pclose(pipe);
  result.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

inline json start_run(api_client& client, const std::string& flow, json input) {
  auto answer = client.post(
      "/v1/runs",
      {{"flow", flow}, {"input", std::move(input)}, {"wait", false}});
  EXPECT_EQ(answer.status, 202u) << answer.body;
  return answer.value;
}

// The run once it has ended (completed, failed or cancelled), or as it was
// last seen when `timeout` passed.
inline json wait_run(
    api_client& client, const std::string& id,
    std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  json last;
  eventually(
      [&] {
        last = client.get("/v1/runs/" + id).value;
        auto status = last.value("status", "");
        return status == "completed" || status == "failed" ||
               status == "cancelled" || status == "terminated";
      },
      timeout);
  return last;
}

// Every run of the node, counted by its input's orderId ("" for none), read
// `page_runs` at a time. A page that is not 200 fails the test: call it under
// ASSERT_NO_FATAL_FAILURE.
inline void count_runs_by_order(api_client& client,
                                std::map<std::string, int>& runs,
                                int page_runs = 1000) {
  std::string cursor;
  do {
    auto page = client.get("/v1/runs?limit=" + std::to_string(page_runs) +
                           (cursor.empty() ? "" : "&cursor=" + cursor));
    ASSERT_EQ(page.status, 200u) << page.body;
    for (auto& run : page.value["runs"]) {
      const auto& order = run["input"]["orderId"];
      runs[order.is_string() ? order.get<std::string>() : ""] += 1;
    }
    const auto& next = page.value["nextCursor"];
    cursor = next.is_string() ? next.get<std::string>() : "";
  } while (!cursor.empty());
}

}  // namespace durin::testing
