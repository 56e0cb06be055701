// The HTTP API of a node, independent of sockets: one `http_request` in, one
// answer out through a reply callback. Routes, bodies, limits and error codes
// are listed in README.md ("HTTP API"); gateway/README.md follows a start
// from the socket to the fsync and back.
//
// One pipeline serves every request (dispatch): the target is parsed, the
// caller authenticated and the body parsed once; the route table (method,
// path pattern, access, keyed, may it block, handler) picks the handler;
// a keyed mutating request's Idempotency-Key is decided once
// (gateway/idempotency.hpp), its replay answered at once and its outcome
// kept before the answer leaves. Each route is one asynchronous handler:
// one that may block runs on a gateway worker (the `offload`), one that
// never blocks on the io thread, answering from whichever thread learns its
// outcome (a start: the committer's, or the run's actor once the run
// settles). Bad input of any kind is answered with {"code", "message"} and
// changes nothing.
//
// Thread-safety: dispatch is called on the server's io threads and never
// blocks; handle may be called from any thread and blocks until the answer
// (tests, fuzzing). Neither may be called from an actor.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "client/http_message.hpp"
#include "durin/limits.hpp"
#include "durin/runtime.hpp"
#include "gateway/auth.hpp"
#include "gateway/http_server.hpp"
#include "gateway/idempotency.hpp"
#include "gateway/metrics.hpp"
#include "gateway/placement.hpp"
#include "gateway/wire_format.hpp"
#include "services/due_list.hpp"
#include "services/run_events.hpp"

namespace durin::gateway {

using wire::http_request;
using wire::http_response;

class worker_routing;

struct api_options {
  // A waited start answers at the latest after this, with the run as it is.
  std::int64_t wait_ms_max = 25'000;
  std::size_t json_depth_max = 64;
  std::size_t path_bytes_max = 2048;
  std::size_t id_bytes_max = limits::path_segment_bytes_max;
  // GET /metrics without a key (its counters are node-wide: else it needs
  // an admin key).
  bool metrics_open = false;
  // Headers a webhook delivery does not hand to its run (lower-case):
  // credentials a sender's proxy or browser may attach.
  std::set<std::string> webhook_dropped_headers = {
      "authorization", "proxy-authorization", "cookie", "x-api-key",
      "x-auth-token"};
  // Long polls one tenant may have waiting at once (429 too-many-polls).
  std::size_t tenant_polls_max = 256;
  // In a cluster: how long a change of API keys or tenants waits for every
  // other live node to apply it (else 503 keys-not-propagated), and an
  // exchange of key tables for every node's (gateway/key_sync.hpp).
  std::int64_t key_spread_ms = 5000;
  // How long a node asked for its key table waits for its routing table to
  // list the asker (else 503: the asker asks again).
  std::int64_t key_table_wait_ms = 3000;
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

  // The one entry. Never blocks: `reply` is called exactly once, from any
  // thread; work that may block is handed to `offload`.
  void dispatch(http_request request, reply_fn reply,
                const offload_fn& offload);

  // The blocking form of dispatch: waits for the answer (jobs that would be
  // offloaded run on the calling thread).
  http_response handle(const http_request& request);

  // In a cluster: where each request's shard is served (gateway/
  // placement.hpp), and the worker routes that span nodes (gateway/
  // worker_routing.hpp). Set before the first dispatch; null (the default)
  // serves every shard here.
  void set_placement(placement* where);
  runtime& node() { return node_; }

  // A request another node forwarded here, from a caller it authenticated:
  // the pipeline of dispatch without authentication. Answered 421
  // not-owner when this node does not serve the request's shard (it is
  // never forwarded again).
  void dispatch_forwarded(http_request request, principal caller,
                          reply_fn reply, const offload_fn& offload);

  // Long polls of a run's end (GET /v1/runs/{id}?waitMs=) answer now,
  // with the run as it is, and new ones at once (the gateway drains).
  void release_run_waits();

  // Waited starts still waiting `after` from now answer the run as it is
  // then (the gateway drains: by then it has answered them 503, and the
  // node's exit waits for the workers they hold).
  void end_waited_starts_after(std::chrono::milliseconds after);

  // Hands no more waited starts over to an offload (call once the gateway
  // has stopped, before it is destroyed).
  void close();

  // In a cluster, API keys and tenants (gateway/key_sync.hpp, which calls
  // these). One exchange of key tables with every other live node: this
  // node's sent, each one's merged here durably. Once every node answered
  // (or none is live but this one), the table is in step for
  // `registration` and authentication goes on; else unavailable
  // (shutting-down) naming the nodes that did not answer. Blocks (up to
  // key_spread_ms): never from an actor or an io thread.
  status sync_keys(std::int64_t registration);
  // The registration the key table was last in step for (0: none yet).
  std::int64_t keys_in_step_for() const {
    return keys_in_step_for_.load(std::memory_order_acquire);
  }

 private:
  struct request;  // one request as the pipeline read it
  using request_ptr = std::shared_ptr<request>;
  // A route's handler either answers at once (its answer is sent) or
  // takes the reply and calls it exactly once, from any thread.
  using answer_now = http_response (api::*)(request& r);
  using answer_later = void (api::*)(const request_ptr& r, reply_fn reply);

  // Who may use a route: no key, or a key of at least this role
  // (persistence/auth_store.hpp: read-only < worker < operator < admin).
  enum class access : std::uint8_t {
    open,     // no key (health, metrics, webhooks: the token is the secret)
    read,     // any key
    work,     // worker keys and above: task routes
    operate,  // operator keys and above: starts, cancels, resumes, keys
    admin,    // admin keys: tenants
    // Node-wide counters: an admin key, or none with api_options::
    // metrics_open (a scraper on a private network).
    metrics,
    // Only another node of the cluster, in a call (dispatch_forwarded):
    // to a client the route does not exist.
    internal,
  };

  // What a route does with a request, as flags of route::traits.
  static constexpr std::uint8_t json_body = 1;  // the body is a JSON object
  static constexpr std::uint8_t keyed = 2;      // honours Idempotency-Key
  static constexpr std::uint8_t secret = 4;     // its answer is never kept
  static constexpr std::uint8_t blocks = 8;     // runs on a gateway worker
  static constexpr std::uint8_t raw_body = 16;  // the body is bytes, unread
  struct route {
    std::string_view method;
    std::vector<std::string_view> pattern;  // "{}" matches one segment
    metrics::route metric;
    access who;
    std::uint8_t traits;
    answer_now now = nullptr;
    answer_later later = nullptr;
    // Fields of the body the request's fingerprint takes as these values
    // when they are absent (its meaning, not its spelling), as JSON.
    std::string_view defaults = "{}";
    // The query parameters it takes, comma-separated, each at most once;
    // "*" takes any (a webhook's sender, a probe or a scraper adds its own,
    // which the route ignores). Checked for every route before its body.
    std::string_view query = "";

    bool has(std::uint8_t trait) const { return (traits & trait) != 0; }
  };
  static const std::vector<route>& routes();
  static key_role needed_role(access who);
  static const json& defaults_of(const route& chosen);

  // A request read in, its reply made to observe the answer exactly once.
  request_ptr begin_request(http_request http, const offload_fn& offload,
                            reply_fn& reply);
  // The pipeline's steps; each answers a problem itself and returns false.
  bool parse_target(request& r, const reply_fn& reply);
  // The route for the request's method and path (r.matched, r.params; a
  // HEAD takes the GET route and becomes a GET); whether any route has
  // that path.
  bool match_route(request& r);
  // The methods the routes of `path` take, as an Allow header lists them
  // (HEAD with every GET).
  static std::string allowed_methods(const std::vector<std::string>& path);
  // The matched route's handler: inline, or on a worker when it may block.
  void run_handler(const request_ptr& r, reply_fn reply);
  bool authenticate(request& r, const route* matched, const reply_fn& reply);
  bool check_query(const request& r, const route& matched,
                   const reply_fn& reply);
  bool read_body(request& r, const route& matched, const reply_fn& reply);
  // In a cluster: goes on when the request's shard is served here,
  // forwards it to its owner or answers 503 otherwise (false then).
  bool place(const request_ptr& r, reply_fn& reply);
  // A keyed request held here whose effect lives on another node: sent
  // there without its key (its answer is kept here); false otherwise.
  bool run_elsewhere(const request_ptr& r, reply_fn& reply);
  // The shard the request's ids resolve to (a run's, a token's, a key's,
  // an attempt's run's; for a keyed change of keys or tenants, its
  // Idempotency-Key's); nullopt for a route that is not a shard's (health,
  // lists, unkeyed keys, polls, batched reports, the tasks view) or a
  // start that may go to any shard.
  std::optional<std::uint32_t> home_shard(const request& r) const;
  // The rest of the pipeline once the caller is known.
  void dispatch_known(const request_ptr& r, reply_fn reply, bool path_known);
  // Decides a keyed request's key: true to go on (key held, `reply` now
  // keeps the outcome before it answers), false when answered already.
  bool hold_key(const request_ptr& r, reply_fn& reply);
  void observe(metrics::route route, unsigned status,
               std::chrono::steady_clock::time_point began);

  // Routes that answer at once (gateway/routes.cpp).
  http_response health(request& r);
  http_response readiness(request& r);  // gateway/readiness.hpp
  http_response prometheus(request& r);
  http_response cluster_view(request& r);  // gateway/placement.cpp
  http_response list_runs(request& r);
  http_response run_history(request& r);
  // GET /v1/run-counts?flow=: the caller's runs by status.
  http_response count_runs(request& r);
  http_response cancel_run(request& r);
  http_response terminate_run(request& r);
  // Both: the run ends as cancelled, or (terminate) as terminated.
  http_response stop_run(request& r, bool terminate);
  // Messages, updates, queries (gateway/message_routes.cpp).
  http_response send_message(request& r);
  http_response update_run(request& r);
  http_response query_run(request& r);
  http_response get_instance(request& r);
  http_response get_hook(request& r);
  http_response resume_hook(request& r);
  http_response webhook(request& r);
  http_response create_key(request& r);
  http_response list_keys(request& r);
  http_response revoke_key(request& r);
  http_response create_tenant(request& r);
  // Schedules (gateway/schedule_routes.cpp).
  http_response create_schedule(request& r);
  http_response get_schedule(request& r);
  http_response list_schedules(request& r);
  // pause, unpause, trigger, backfill: the path's last segment says which.
  http_response change_schedule(request& r);
  http_response delete_schedule(request& r);
  // Internal routes (gateway/key_sync.cpp).
  http_response merge_key_records(request& r);
  http_response exchange_key_table(request& r);
  // Hook mail another node posted (services/remote_runs.hpp).
  http_response take_hook_mail(request& r);
  // Routes that answer later, from the thread that learns the outcome.
  void start_run(const request_ptr& r, reply_fn reply);  // start_route.cpp
  // GET /v1/runs/{id}, with waitMs a long poll for its end
  // (gateway/remote_runs.cpp).
  void get_run(const request_ptr& r, reply_fn reply);
  void worker_route(const request_ptr& r, reply_fn reply);

  // The same request's answers from every other node that serves a shard,
  // each a JSON object holding `field`, appended to `pages`; nullopt then.
  // Else the first answer that is not 200 (a node that did not answer: no
  // merged answer with a hole), or 502 when one is not such an object.
  std::optional<http_response> gather_other_nodes(const request& r,
                                                  std::string_view field,
                                                  std::vector<json>& pages);

  http_response run_response(unsigned status, const run_info& run);

  // API keys and tenants in a cluster (gateway/key_sync.cpp).
  // Whether authentication may go on: outside a cluster always; in one,
  // while the lease is live and the key table is in step for it.
  bool keys_in_step() const;
  // 503 keys-not-synced when keys_in_step() is false.
  std::optional<http_response> keys_not_in_step() const;
  // What a change of keys or tenants was: a new key goes (is withdrawn)
  // when some node did not get it; a revocation stays.
  enum class key_change : std::uint8_t { created, revoked };
  // Sends `change`, durable here, to every other live node and waits for
  // each to make it durable: nullopt when every one did (or none is
  // live, or no cluster), else the 503 keys-not-propagated to answer.
  std::optional<http_response> spread_keys(const auth::key_table& change,
                                           key_change kind,
                                           const principal& caller);

  // The start's parts (gateway/start_route.cpp).
  struct start_request;
  struct async_start;
  static std::optional<http_response> read_start(const json& body,
                                                 const std::string& tenant,
                                                 start_request& out);
  // A start whose key's marker names a run (r->recorded_run_id): answers
  // that run, here or through its node, and returns true; false when the
  // run was never admitted (start_run then admits that very id).
  bool answer_recorded_run(const std::shared_ptr<async_start>& start,
                           bool wait);
  // The admission's outcome; then a waited start waits for its run's event.
  void on_admitted(const std::shared_ptr<async_start>& start, bool wait,
                   result<run_info> started);
  // The run first waits or ends, durably (told by the run-event hub).
  void on_settled(const std::shared_ptr<async_start>& start,
                  const services::run_event& event);
  void on_unsettled(std::shared_ptr<async_start> start);
  // A waited start answered by a worker: the run as it first waits or ends,
  // or as it is at `deadline`. Blocks up to the deadline.
  http_response answer_waited(const std::string& run_id,
                              const std::string& tenant,
                              std::chrono::steady_clock::time_point deadline);
  void answer(async_start& start, http_response response,
              idempotency::stored already);
  void hand_over(std::shared_ptr<async_start> start);
  // A keyed start whose run lives on another node (gateway/start_route.cpp).
  void start_elsewhere(const std::shared_ptr<async_start>& start,
                       const persistence::start_key& key);
  void forward_start(const std::shared_ptr<async_start>& start);
  void on_started_elsewhere(const std::shared_ptr<async_start>& start,
                            http_response response);
  void resume_elsewhere(const std::shared_ptr<async_start>& start, bool wait);

  // Runs across nodes (gateway/remote_runs.cpp): the long polls of
  // GET /v1/runs/{id}?waitMs=, and the port through which this node's runs
  // reach runs other nodes serve (services/remote_runs.hpp).
  struct run_wait;
  class remote_port;
  void on_run_wait_tick(std::shared_ptr<run_wait>& wait);
  // Answers `wait` unless it was (the run's end and the tick may race).
  void answer_wait(run_wait& wait, http_response response);
  void set_remote_port();    // with placement_
  void clear_remote_port();  // at close()

  runtime& node_;
  placement* placement_ = nullptr;
  std::unique_ptr<worker_routing> worker_routing_;  // with placement_ only
  auth& keys_;
  idempotency& requests_;
  metrics& metrics_;
  std::function<std::string()> extra_metrics_;
  api_options options_;
  // The registration the key table is in step for (gateway/key_sync.cpp).
  std::atomic<std::int64_t> keys_in_step_for_{0};
  // Waited starts still unanswered one to two ticks after their admission,
  // handed over to an offload then.
  std::unique_ptr<services::due_list<std::shared_ptr<async_start>>> unsettled_;
  // Long polls of a run's end, looked at every tick until their deadline.
  std::unique_ptr<services::due_list<std::shared_ptr<run_wait>>> run_waits_;
  std::atomic<bool> run_waits_released_{false};
  // When waited starts stop waiting (steady clock, ns); none before a drain.
  std::atomic<std::int64_t> waited_starts_end_ns_{
      std::numeric_limits<std::int64_t>::max()};
  // Set with placement_; kept until the api goes (after the runtime's
  // actors, which may be using it).
  std::shared_ptr<remote_port> remote_;  // shared: deleted where complete
};

// One request as the pipeline read it; shared by its handler and its reply.
struct api::request {
  http_request http;
  std::chrono::steady_clock::time_point began;
  offload_fn offload;
  const route* matched = nullptr;
  std::vector<std::string> path;    // decoded segments
  std::string path_text;            // the normalised path
  std::vector<std::string> params;  // the segments the pattern's {} matched
  std::multimap<std::string, std::string> query;
  principal caller;
  bool forwarded = false;  // by another node, which authenticated it
  // A keyed request held here but carried out in this shard (placement).
  std::optional<std::uint32_t> execute_at;
  json body;  // parsed when the route takes JSON; {} when empty
  // Set while a keyed request runs.
  std::optional<persistence::request_address> key;
  std::string fingerprint;
  std::uint64_t generation = 0;
  std::string recorded_run_id;  // see idempotency::decision
  // What the request made durable for its key before it answers.
  idempotency::stored stored = idempotency::stored::nothing;
};

}  // namespace durin::gateway
