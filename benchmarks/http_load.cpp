// HTTP load generator for `durin serve` (or any server speaking the same
// API): N keep-alive connections on loopback, each sending requests back to
// back for a fixed time; prints throughput and p50/p99 latency.
//
//   http_load --server http://127.0.0.1:7070 --api-key KEY
//             --workload keyed-start|replay|get-run [--connections 64]
//             [--seconds 10] [--flow acme.review-order]
//
// keyed-start: POST /v1/runs {"wait": false} with a fresh Idempotency-Key
//   per request; replay: the same keyed start again and again (answered
//   from the kept response); get-run: GET /v1/runs/{id} of one run;
// raw-keyed: POST --path with --body and a fresh Idempotency-Key per
//   request (any server: the side-by-side comparison with a peer).
// Every non-2xx answer counts as an error and is reported.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>
#include <vector>

#include "cluster/http_client.hpp"
#include "durin/json.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct worker_result {
  std::vector<std::int64_t> latencies_us;
  std::uint64_t errors = 0;
  std::string first_error;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"HTTP load generator for durin serve"};
  std::string server = "http://127.0.0.1:7070";
  std::string api_key;
  std::string workload = "keyed-start";
  std::string flow = "acme.review-order";
  int connections = 64;
  double seconds = 10;
  app.add_option("--server", server, "server URL");
  std::string path = "/v1/runs";
  std::string raw_body;
  app.add_option("--api-key", api_key, "API key (none: no Authorization)");
  app.add_option("--path", path, "raw-keyed: the route");
  app.add_option("--body", raw_body, "raw-keyed: the JSON body");
  app.add_option("--workload", workload, "keyed-start, replay or get-run");
  app.add_option("--flow", flow, "flow for starts");
  app.add_option("--connections", connections, "keep-alive connections");
  app.add_option("--seconds", seconds, "duration");
  CLI11_PARSE(app, argc, argv);

  auto address = durin::cluster::parse_server_url(server);
  if (!address) {
    std::cerr << address.error().to_string() << "\n";
    return 2;
  }
  std::vector<std::pair<std::string, std::string>> auth = {
      {"Content-Type", "application/json"}};
  if (!api_key.empty()) {
    auth.emplace_back("Authorization", "Bearer " + api_key);
  }
  const std::string start_body = durin::json{
      {"flow", flow},
      {"input", {{"orderId", "bench"}}},
      {"wait", false}}.dump();
  std::string run_id;
  if (workload == "replay" || workload == "get-run") {
    durin::cluster::http_connection setup(*address);
    auto headers = auth;
    headers.emplace_back("Idempotency-Key", "bench-replay-key");
    auto first = setup.send("POST", "/v1/runs", headers, start_body);
    if (!first || first->status >= 300) {
      std::cerr << "setup start failed: "
                << (first ? first->body : first.error().to_string()) << "\n";
      return 1;
    }
    run_id = durin::json::parse(first->body).at("id").get<std::string>();
  } else if (workload != "keyed-start" && workload != "raw-keyed") {
    std::cerr << "unknown workload '" << workload << "'\n";
    return 2;
  }
  const auto run_tag =
      std::to_string(clock_type::now().time_since_epoch().count());
  std::vector<worker_result> results(static_cast<std::size_t>(connections));
  std::atomic<bool> go{false};
  auto deadline = clock_type::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < connections; ++i) {
    threads.emplace_back([&, i] {
      durin::cluster::http_connection connection(*address);
      auto& mine = results[static_cast<std::size_t>(i)];
      mine.latencies_us.reserve(200'000);
      while (!go.load()) {
        std::this_thread::yield();
      }
      std::uint64_t sequence = 0;
      while (clock_type::now() < deadline) {
        auto headers = auth;
        std::string method = "POST";
        std::string target = "/v1/runs";
        std::string body = start_body;
        if (workload == "raw-keyed") {
          target = path;
          body = raw_body;
          headers.emplace_back("Idempotency-Key",
                               "bench-" + run_tag + "-" + std::to_string(i) +
                                   "-" + std::to_string(sequence++));
        } else if (workload == "keyed-start") {
          headers.emplace_back("Idempotency-Key",
                               "bench-" + run_tag + "-" + std::to_string(i) +
                                   "-" + std::to_string(sequence++));
        } else if (workload == "replay") {
          headers.emplace_back("Idempotency-Key", "bench-replay-key");
        } else {
          method = "GET";
          target = "/v1/runs/" + run_id;
          body.clear();
        }
        auto began = clock_type::now();
        auto answer = connection.send(method, target, headers, body);
        auto took = std::chrono::duration_cast<std::chrono::microseconds>(
                        clock_type::now() - began)
                        .count();
        if (!answer || answer->status >= 300) {
          if (mine.errors++ == 0) {
            mine.first_error =
                answer ? answer->body : answer.error().to_string();
          }
          continue;
        }
        mine.latencies_us.push_back(took);
      }
    });
  }
  auto began = clock_type::now();
  deadline = began + std::chrono::milliseconds(
                         static_cast<std::int64_t>(seconds * 1000));
  go.store(true);
  for (auto& thread : threads) {
    thread.join();
  }
  double elapsed =
      std::chrono::duration<double>(clock_type::now() - began).count();
  std::vector<std::int64_t> all;
  std::uint64_t errors = 0;
  std::string first_error;
  for (auto& result : results) {
    all.insert(all.end(), result.latencies_us.begin(),
               result.latencies_us.end());
    errors += result.errors;
    if (first_error.empty()) {
      first_error = result.first_error;
    }
  }
  std::sort(all.begin(), all.end());
  auto percentile = [&all](double p) -> double {
    if (all.empty()) {
      return 0;
    }
    auto index =
        static_cast<std::size_t>(p * static_cast<double>(all.size() - 1));
    return static_cast<double>(all[index]) / 1000.0;
  };
  std::printf(
      "workload=%s connections=%d seconds=%.1f ok=%zu errors=%llu "
      "throughput=%.0f/s p50=%.2fms p99=%.2fms\n",
      workload.c_str(), connections, elapsed, all.size(),
      static_cast<unsigned long long>(errors),
      static_cast<double>(all.size()) / elapsed, percentile(0.50),
      percentile(0.99));
  if (errors > 0) {
    std::printf("first error: %s\n", first_error.c_str());
  }
  return 0;
}
