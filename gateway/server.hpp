// `durin serve`: one node with the HTTP gateway. Opens the runtime on
// `data_dir`; the gateway keeps requests, tenants and API keys in the same
// store, through the same committer (runtime_access::services), so a keyed
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
#include <memory>
#include <string>
#include <vector>

#include "durin/registry.hpp"
#include "gateway/api.hpp"
#include "gateway/http_server.hpp"
#include "gateway/placement.hpp"
#include "persistence/fence.hpp"

namespace durin::gateway {

// A node in a cluster (cluster/node.hpp makes one): what serve needs of
// it. Its shards are guarded by its fences; it joins once the api and the
// HTTP server are up, and leaves before the runtime closes.
class cluster_member {
 public:
  virtual ~cluster_member() = default;
  virtual std::uint32_t shards() const = 0;
  virtual std::vector<std::shared_ptr<persistence::fence>> fences() const = 0;
  // The cluster's admin key, which every node bootstraps with.
  virtual std::string admin_key() const = 0;
  // Where the api's requests are served; made for `routes`, before the
  // HTTP server starts.
  virtual placement& attach(api& routes) = 0;
  // Listens for peers, registers with `http_address`, acquires its shards.
  virtual status join(const std::string& http_address) = 0;
  virtual void leave() = 0;
};

struct serve_options {
  std::string data_dir = "./durin-data";
  std::uint32_t shards = 1;  // runtime_options::shards
  http_server_options http;
  api_options api;
  idempotency_options idempotency;
  std::int64_t sweep_interval_ms = 60'000;
  // Null: one node on its own, every shard its own.
  std::shared_ptr<cluster_member> cluster;
};

// Runs a node until SIGTERM or SIGINT. Prints "listening on HOST:PORT" and
// where the admin key is to `out` once serving. Answers 0 on a clean stop,
// non-zero (after printing "code: message" to `err`) when it cannot start.
int serve(serve_options options, registry flows, std::ostream& out,
          std::ostream& err);

}  // namespace durin::gateway
