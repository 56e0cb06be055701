// The HTTP API of a node, independent of sockets: one `http_request` in, one
// `http_response` out. Routes, bodies, limits and error codes are listed in
// README.md ("HTTP API"). Every mutating route honours `Idempotency-Key`
// (cluster/idempotency.hpp). Bad input of any kind is answered with
// {"code", "message"} and changes nothing.
//
// Thread-safety: `handle` may be called from many threads at once. It blocks
// (durable writes, a waited start up to `wait_ms_max`): call it from gateway
// worker threads, never from an actor.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "cluster/auth.hpp"
#include "cluster/http_message.hpp"
#include "cluster/idempotency.hpp"
#include "cluster/metrics.hpp"
#include "durin/runtime.hpp"

namespace durin::cluster {

struct api_options {
  // A waited start answers at the latest after this, with the run as it is.
  std::int64_t wait_ms_max = 25'000;
  std::size_t json_depth_max = 64;
  std::size_t path_bytes_max = 2048;
  std::size_t id_bytes_max = 256;
};

class api {
 public:
  // REQUIRES: every argument outlives the api.
  api(runtime& node, auth& keys, idempotency& requests, metrics& counters,
      std::function<std::string()> extra_metrics, api_options options = {});

  http_response handle(const http_request& request);

  // Never blocks: the kept answer (or its refusal) of a keyed mutating
  // request whose key already finished, without acting; nullopt for anything
  // else (then call handle, off the io thread). Counts the answer in the
  // metrics like handle does.
  std::optional<http_response> try_replay(const http_request& request);

  // Never blocks: takes a plain background start (POST /v1/runs with
  // "wait": false and no hook, keyed or not) off the worker pool, so no
  // thread waits for its fsync. Answers false having done nothing for any
  // other request, or one it would refuse (then call handle). Otherwise
  // `reply` is called exactly once: at once for a replay or refusal of its
  // key, else once the admission is durable or refused, from the
  // committer's thread (it must not block). Counts like handle does.
  bool try_start_async(const http_request& request,
                       std::function<void(http_response)> reply);

  // Never blocks: takes an authenticated worker route
  // (cluster/worker_api.hpp) that needs no waiting thread: every one but a
  // poll of an empty queue that may wait. Reports are answered once their
  // outcomes are durable, from the run actor's thread. False having done
  // nothing otherwise (then call handle). Counts like handle does.
  bool try_worker_async(const http_request& request,
                        std::function<void(http_response)> reply);

 private:
  struct context;
  std::optional<http_response> parse_target(context& ctx);
  // The io thread's fast paths (replays, background starts, worker reports)
  // take a request only when its route is `wanted`, its caller known and
  // its body well formed; fills ctx.caller and ctx.body. Anything to
  // explain goes the blocking way, which answers the problem.
  bool accept_on_io_thread(context& ctx,
                           const std::function<bool(const context&)>& wanted);
  void observe(metrics::route route, unsigned status,
               std::chrono::steady_clock::time_point began);
  static std::string fingerprint_of(const context& ctx);
  http_response route(context& ctx);
  http_response mutate(context& ctx, bool carries_secret,
                       const std::function<http_response()>& act);

  http_response start_run(context& ctx);
  http_response get_run(context& ctx, const std::string& id);
  http_response list_runs(context& ctx);
  http_response run_history(context& ctx, const std::string& id);
  http_response cancel_run(context& ctx, const std::string& id);
  http_response get_hook(context& ctx, const std::string& token);
  http_response resume_hook(context& ctx, const std::string& token);
  http_response webhook(context& ctx, const std::string& token);
  http_response create_key(context& ctx);
  http_response list_keys(context& ctx);
  http_response revoke_key(context& ctx, const std::string& id);
  http_response create_tenant(context& ctx);

  http_response run_response(unsigned status, const run_info& run);
  // What a waited keyed start's run did with the kept answer it adds to the
  // batch that first records it waiting or ended.
  struct settle_answer;
  // The records a keyed start adds to its admission batch; `kept` receives
  // the kept answer when one is written (a start without wait). A waited
  // start's answer rides in the run's settling batch instead (`settled`).
  std::shared_ptr<detail::admission_records> admission_for(
      const persistence::request_address& address,
      const std::string& fingerprint, bool wait,
      std::shared_ptr<std::optional<http_response>> kept,
      std::shared_ptr<settle_answer> settled = nullptr);

  runtime& node_;
  auth& keys_;
  idempotency& requests_;
  metrics& metrics_;
  std::function<std::string()> extra_metrics_;
  api_options options_;
};

// The HTTP status of a runtime error code.
unsigned http_status_of(errc code);
// {"code", "message"} of a runtime error (adds "runId" / "conflictingRunId").
http_response error_response(const error& err);
// A JSON answer; invalid UTF-8 in strings is replaced, never thrown on.
http_response json_response(unsigned status, const json& body);
// 400 invalid-argument with `message`.
http_response bad_request(std::string_view message);

// True when `text` is well-formed UTF-8.
bool valid_utf8(std::string_view text);

}  // namespace durin::cluster
