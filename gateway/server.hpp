// `durin serve`: one node with the HTTP gateway. Opens the runtime on
// `data_dir`; the gateway keeps requests, tenants and API keys in the same
// store, through the same committer (services::services_of), so a keyed
// start's record rides in its run's admission batch. Bootstraps tenant
// `default` with an admin key in `data_dir/admin.key`, sweeps expired
// idempotency keys every `sweep_interval_ms`, and serves until `stop` is called
// or SIGTERM/SIGINT arrives.
//
// Shutdown order: stop accepting, answer in-flight requests (their keys are
// kept or freed durably), stop the sweeper, close the runtime.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>

#include "durin/registry.hpp"
#include "gateway/api.hpp"
#include "gateway/http_server.hpp"

namespace durin::gateway {

struct serve_options {
  std::string data_dir = "./durin-data";
  std::uint32_t shards = 1;  // runtime_options::shards
  http_server_options http;
  api_options api;
  idempotency_options idempotency;
  std::int64_t sweep_interval_ms = 60'000;
};

// Runs a node until SIGTERM or SIGINT. Prints "listening on HOST:PORT" and
// where the admin key is to `out` once serving. Answers 0 on a clean stop,
// non-zero (after printing "code: message" to `err`) when it cannot start.
int serve(serve_options options, registry flows, std::ostream& out,
          std::ostream& err);

}  // namespace durin::gateway
