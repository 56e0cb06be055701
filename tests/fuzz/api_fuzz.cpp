// Fuzz target for the gateway's request handling: the request target
// (path segments, percent-decoding, query), header values, and JSON body
// decoding (UTF-8, depth, types, unknown fields), through gateway::api on a
// real runtime in a temporary directory, with a valid admin key, so every
// route is reachable. Any crash, sanitizer report or non-JSON error body is
// a finding.
//
// Input layout: byte 0 picks the method, then the target up to the first
// '\n', the Idempotency-Key up to the next '\n', the rest is the body.
//
// With clang: -fsanitize=fuzzer (libFuzzer provides main). Otherwise
// (g++), DURIN_FUZZ_STANDALONE builds a driver that runs the corpus files
// given on the command line and then random mutations of them for
// DURIN_FUZZ_SECONDS (default 10): the bounded CI run.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "bin/example_flows.hpp"
#include "durin/json.hpp"
#include "durin/runtime.hpp"
#include "gateway/api.hpp"
#include "gateway/auth.hpp"
#include "gateway/idempotency.hpp"
#include "gateway/metrics.hpp"
#include "persistence/auth_store.hpp"
#include "persistence/committer.hpp"
#include "persistence/requests.hpp"
#include "persistence/store.hpp"
#include "services/node.hpp"
#include "services/runtime_access.hpp"

namespace {

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct fuzz_node {
  std::string dir;
  std::unique_ptr<durin::runtime> node;
  std::unique_ptr<durin::persistence::request_store> requests;
  std::unique_ptr<durin::persistence::auth_store> key_store;
  std::unique_ptr<durin::gateway::auth> keys;
  std::unique_ptr<durin::gateway::idempotency> held;
  durin::gateway::metrics counters;
  std::unique_ptr<durin::gateway::api> routes;
  std::string admin_secret;

  fuzz_node() {
    char pattern[] = "/tmp/durin-fuzz-XXXXXX";
    dir = ::mkdtemp(pattern);
    durin::registry flows;
    durin::examples::register_examples(flows);
    node = std::move(durin::runtime::open({.data_dir = dir}, flows).value());
    auto& services = durin::runtime_access::services(*node);
    requests = std::make_unique<durin::persistence::request_store>(
        *services.first().store, *services.first().committer);
    key_store = std::make_unique<durin::persistence::auth_store>(
        *services.first().store, *services.first().committer);
    keys = std::make_unique<durin::gateway::auth>(*key_store, wall_ms);
    (void)keys->bootstrap(dir + "/admin.key").value();
    std::FILE* file = std::fopen((dir + "/admin.key").c_str(), "r");
    char line[256] = {};
    if (file != nullptr && std::fgets(line, sizeof line, file) != nullptr) {
      admin_secret = line;
      while (!admin_secret.empty() && admin_secret.back() == '\n') {
        admin_secret.pop_back();
      }
    }
    if (file != nullptr) {
      std::fclose(file);
    }
    held = std::make_unique<durin::gateway::idempotency>(*requests, "fuzz",
                                                         wall_ms);
    durin::gateway::api_options options;
    options.wait_ms_max = 50;  // a waited start must not stall the fuzzer
    routes = std::make_unique<durin::gateway::api>(*node, *keys, *held,
                                                   counters, nullptr, options);
  }
  ~fuzz_node() {
    routes.reset();
    node.reset();
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
};

// Created on first use and destroyed explicitly (standalone driver) or
// never (libFuzzer exits): destroying it during static destruction would
// run the runtime's teardown after CAF's own statics are gone.
fuzz_node* node_instance = nullptr;

fuzz_node& shared_node() {
  if (node_instance == nullptr) {
    node_instance = new fuzz_node();
  }
  return *node_instance;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  if (size == 0) {
    return 0;
  }
  static const char* methods[] = {"GET", "POST", "DELETE", "PUT"};
  auto& node = shared_node();
  std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  durin::wire::http_request request;
  request.method = methods[data[0] % 4];
  auto newline = text.find('\n');
  request.target = text.substr(0, newline);
  std::string rest =
      newline == std::string::npos ? "" : text.substr(newline + 1);
  auto second = rest.find('\n');
  std::string key = rest.substr(0, second);
  request.body = second == std::string::npos ? "" : rest.substr(second + 1);
  request.headers.emplace_back("authorization", "Bearer " + node.admin_secret);
  if (!key.empty()) {
    request.headers.emplace_back("idempotency-key", key);
  }
  auto response = node.routes->handle(request);
  if (response.status >= 400 && !response.body.empty()) {
    auto body = durin::json::parse(response.body, nullptr, false);
    if (body.is_discarded() || !body.contains("code") ||
        !body.contains("message")) {
      std::abort();  // every error must be {code, message}
    }
  }
  return 0;
}

#if defined(DURIN_FUZZ_STANDALONE)
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <vector>

// `input` after one to eight random edits: inserted dictionary words or
// bytes, erased or overwritten bytes.
std::string mutate(std::string input, std::mt19937_64& random) {
  static const std::string dictionary[] = {"/v1/runs",
                                           "/v1/runs/",
                                           "/history",
                                           "/cancel",
                                           "/v1/api-keys",
                                           "/v1/tenants",
                                           "/v1/hooks/",
                                           "/resume",
                                           "/v1/webhooks/wh_",
                                           "%2e",
                                           "%2F",
                                           "%",
                                           "..",
                                           "?limit=",
                                           "&status=",
                                           "{",
                                           "}",
                                           "[",
                                           "]",
                                           "\"flow\":",
                                           "\"input\":",
                                           "\"wait\":",
                                           "\"hook\":",
                                           "\"token\":",
                                           "\"payload\":",
                                           "\"acme.review-order\"",
                                           "\xff",
                                           "\xc3\xa9",
                                           "\xed\xa0\x80",
                                           "null",
                                           "1e999",
                                           "-0",
                                           "\n",
                                           "\"name\":"};
  auto edits = 1 + random() % 8;
  for (std::size_t e = 0; e < edits; ++e) {
    auto at = input.empty() ? 0 : random() % (input.size() + 1);
    switch (random() % 4) {
      case 0:
        input.insert(at, dictionary[random() % std::size(dictionary)]);
        break;
      case 1:
        if (at < input.size()) {
          input.erase(at, 1 + random() % 4);
        }
        break;
      case 2:
        if (at < input.size()) {
          input[at] = static_cast<char>(random());
        }
        break;
      default:
        input.insert(at, 1, static_cast<char>(random()));
    }
  }
  return input;
}

int main(int argc, char** argv) {
  std::vector<std::string> corpus;
  for (int i = 1; i < argc; ++i) {
    std::ifstream file(argv[i], std::ios::binary);
    corpus.emplace_back(std::istreambuf_iterator<char>(file),
                        std::istreambuf_iterator<char>());
  }
  if (corpus.empty()) {
    corpus.push_back(std::string("\x01/v1/runs\nk\n{\"flow\":\"acme.sleep\"}"));
  }
  for (auto& input : corpus) {
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(input.data()),
                           input.size());
  }
  const char* seconds_text = std::getenv("DURIN_FUZZ_SECONDS");
  double seconds = seconds_text != nullptr ? std::atof(seconds_text) : 10.0;
  const char* seed_text = std::getenv("DURIN_FUZZ_SEED");
  std::uint64_t seed = seed_text != nullptr
                           ? std::strtoull(seed_text, nullptr, 10)
                           : std::random_device{}();
  std::cout << "fuzz seed " << seed << " (DURIN_FUZZ_SEED)" << std::endl;
  std::mt19937_64 random(seed);
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<long>(seconds * 1000));
  std::size_t runs = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    std::string input = mutate(corpus[random() % corpus.size()], random);
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(input.data()),
                           input.size());
    ++runs;
  }
  std::cout << "fuzz: " << runs << " inputs, no finding" << std::endl;
  delete node_instance;
  node_instance = nullptr;
  return 0;
}
#endif
