// The HTTP API of a node, independent of sockets: one `http_request` in, one
// `http_response` out. Routes, bodies, limits and error codes are listed in
// README.md ("HTTP API"). Every mutating route honours `Idempotency-Key`
// (gateway/idempotency.hpp). Bad input of any kind is answered with
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

#include "client/http_message.hpp"
#include "durin/runtime.hpp"
#include "gateway/auth.hpp"
#include "gateway/http_server.hpp"
#include "gateway/idempotency.hpp"
#include "gateway/metrics.hpp"
#include "services/due_list.hpp"

namespace durin::gateway {

using wire::http_request;
using wire::http_response;

struct api_options {
  // A waited start answers at the latest after this, with the run as it is.
  std::int64_t wait_ms_max = 25'000;
  std::size_t json_depth_max = 64;
  std::size_t path_bytes_max = 2048;
  std::size_t id_bytes_max = 256;
};

// Events per page of GET /v1/runs/{id}/history?after=&limit=.
inline constexpr std::uint64_t history_page_max = 1000;
// GET /v1/run-counts counts at most this many runs (the newest).
inline constexpr std::uint64_t count_runs_max = 10'000;

class api {
 public:
  // REQUIRES: every argument outlives the api.
  api(runtime& node, auth& keys, idempotency& requests, metrics& counters,
      std::function<std::string()> extra_metrics, api_options options = {});

  ~api();  // close()

  http_response handle(const http_request& request);

  // Hands no more waited starts over to an offload (call once the gateway
  // has stopped, before it is destroyed).
  void close();

  // Never blocks: the kept answer (or its refusal) of a keyed mutating
  // request whose key already finished, without acting; nullopt for anything
  // else (then call handle, off the io thread). Counts the answer in the
  // metrics like handle does.
  std::optional<http_response> try_replay(const http_request& request);

  // Never blocks: takes a plain start (POST /v1/runs with "flow", "input"
  // and "wait" only, keyed or not) off the worker pool, so no thread waits
  // for its writes. Answers false having done nothing for any other
  // request, or one it would refuse (then call handle). Otherwise `reply`
  // is called exactly once: at once for a replay or refusal of its key;
  // for "wait": false once the admission is durable or refused, from the
  // committer's thread; for a waited start once the write that records the
  // run waiting or ended is durable, from the run's actor. A waited start
  // not settled within about a second (a long step, a run reactivated from
  // storage) is handed to `offload` and answered like handle would.
  // Counts like handle does.
  bool try_start_async(const http_request& request,
                       std::function<void(http_response)> reply,
                       const offload_fn& offload);

  // Never blocks: takes an authenticated worker route
  // (gateway/worker_api.hpp) that needs no waiting thread: every one but a
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
  // GET /v1/run-counts?flow=: the caller's runs by status.
  http_response count_runs(context& ctx);
  http_response cancel_run(context& ctx, const std::string& id);
  http_response get_hook(context& ctx, const std::string& token);
  http_response resume_hook(context& ctx, const std::string& token);
  http_response webhook(context& ctx, const std::string& token);
  http_response create_key(context& ctx);
  http_response list_keys(context& ctx);
  http_response revoke_key(context& ctx, const std::string& id);
  http_response create_tenant(context& ctx);

  http_response run_response(unsigned status, const run_info& run);
  // What a waited start's run did with the answer it adds to the batch that
  // first records it waiting or ended (kept there for a keyed start).
  struct settle_answer;
  // The records a start adds to its admission batch: with a key (`address`)
  // the key's record; `kept` receives the kept answer when one is written
  // (a start without wait). A waited start's answer rides in the run's
  // settling batch instead (`settled`).
  std::shared_ptr<detail::admission_records> admission_for(
      const persistence::request_address* address,
      const std::string& fingerprint, bool wait,
      std::shared_ptr<std::optional<http_response>> kept,
      std::shared_ptr<settle_answer> settled = nullptr);
  // A waited start's answer once its run `run_id` is admitted: the answer
  // its settling batch kept, once durable (then `stored` becomes answer);
  // else the run as it first waits or ends, or as it is at `deadline`.
  // Blocks up to the deadline.
  http_response answer_waited(const std::string& run_id,
                              const std::string& tenant, settle_answer* settled,
                              std::chrono::steady_clock::time_point deadline,
                              idempotency::stored& stored);
  // A start taken by try_start_async, answered from whichever thread learns
  // its outcome first.
  struct async_start;
  void answer(async_start& start, http_response response,
              idempotency::stored already);
  void on_settled(async_start& start);
  void hand_over(std::shared_ptr<async_start> start);

  runtime& node_;
  auth& keys_;
  idempotency& requests_;
  metrics& metrics_;
  std::function<std::string()> extra_metrics_;
  api_options options_;
  // Waited starts taken on the io thread, handed over to an offload when
  // still unanswered one to two ticks later.
  std::unique_ptr<services::due_list<std::shared_ptr<async_start>>> unsettled_;
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

}  // namespace durin::gateway
