// durin::runtime is one durin node embedded in a process: a RocksDB store in
// `data_dir`, a CAF actor system (its own, or the embedding application's),
// the flows and steps of a registry, and the actors that run them.
//
// Thread-safety: every method may be called from any thread, concurrently.
// Blocking methods (start, wait, cancel) must not be called from inside an
// actor of the same actor system; actors use start_async / notify_on_finish.
// Durability: a method that changes state returns only after the change is
// fsync'd. Errors are values (durin::result); a bad request never affects
// another run.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <caf/fwd.hpp>

#include "durin/clock.hpp"
#include "durin/error.hpp"
#include "durin/json.hpp"
#include "durin/registry.hpp"
#include "durin/run.hpp"

namespace durin {

struct runtime_options {
  std::string data_dir;  // created when missing
  // Threads running step bodies; bounds how many steps run at once.
  std::size_t step_threads = 8;
  // Steps queued beyond this are refused to the run as retryable overload.
  std::size_t step_queue_max = 100'000;
  // Scheduler threads when the runtime creates its own actor system.
  std::size_t actor_threads = 0;  // 0: CAF's default, max(cores, 4)
  // A run waiting on a timer due later than this stops its actor (it is
  // re-activated from storage when the timer fires).
  std::chrono::milliseconds passivate_after{2000};
  // Time source; null means the system clock.
  std::shared_ptr<durin::clock> clock;
  // The spec version new runs record; 0: this build's. Lower values make
  // the node behave as an older release would (tests of mixed versions).
  std::uint32_t spec_version = 0;
  // The longest min_retention a hook may ask for.
  std::chrono::milliseconds retention_max{30LL * 24 * 3600 * 1000};
  // How long a plain start's command id is remembered after admission.
  std::chrono::milliseconds command_retention{24LL * 3600 * 1000};
  // The limits of one run's history. A write that would take the history
  // beyond either is not made: the run fails instead, with error code
  // history-limit-exceeded and a message naming the limit, recorded as its
  // last event. An event counts its payload, names and messages plus 64
  // bytes. The run's end (completion, failure, cancellation) has room kept
  // for it: 1 event and 4096 bytes. Temporal's limits are 51,200 events and
  // 50 MB; durin's defaults are 50,000 events and 50 MiB. At least 2 events
  // and 8192 bytes.
  std::uint64_t history_events_max = 50'000;
  std::uint64_t history_bytes_max = 50ULL << 20;
  // The lease of a remote step's attempt when the step has neither a
  // heartbeat nor a start-to-close timeout: each heartbeat moves its expiry
  // to now + this; an attempt without a heartbeat or an outcome for this
  // long is delivered again (timeout-heartbeat). 1 ms to 1 day.
  std::chrono::milliseconds task_lease{30'000};
  // Shards of the node's data (1..1024): each is a RocksDB of its own, with
  // its committer, timers and actors; every run, token and request key lives
  // in exactly one (services/shard_map.hpp). Fixed when the data directory
  // is made: opening it with another count is invalid-argument.
  std::uint32_t shards = 1;
  // Every duration above is 0..limits::duration_ms_max (durin/limits.hpp), else
  // open() is invalid-argument.
};

// Runs belong to a tenant; another tenant's run answers as run-not-found.
// Embedding applications that have no tenants use the default one.
inline constexpr std::string_view default_tenant = "default";

// A start hook: the run is admitted together with a hook on `token`, in one
// atomic write, so the token is an idempotency key for whole runs.
struct start_hook {
  std::string token;  // 1..256 bytes, from the caller's domain
  // How long the token stays held after the run ends, counted from start:
  // a duration string ("30 days", "2h", "500ms"), a number of milliseconds,
  // or an absolute RFC 3339 time. Null: released when the run ends.
  json min_retention;
  json metadata;  // returned by get_hook_by_token
};

// What a start does when its instance id is held by an active run.
enum class duplicate_policy : std::uint8_t {
  reject_duplicate,        // hook-conflict naming the active run (default)
  return_existing_active,  // answer the active run; nothing new is started
};
struct start_options {
  std::string tenant = std::string(default_tenant);
  std::optional<start_hook> hook;
  // The business process this run is (1..200 bytes; empty: the run's own
  // id). At most one active run holds an instance id; it is free again when
  // that run ends. Not combined with `hook`, which already names the run.
  std::string instance_id;
  duplicate_policy on_duplicate = duplicate_policy::reject_duplicate;
  // Names this start as a command (1..200 bytes): a repeat gets the run the
  // first one admitted and starts nothing. Kept for command_retention after
  // a plain start; with a hook or instance id, as long as that token is held.
  std::string command_id;
  // The run's memo (null: none), returned with the run; the flow replaces
  // it with ctx.set_memo. At most limits::memo_bytes_max encoded.
  json memo;
  // The run's search attributes (durin/search.hpp); the flow adds to them
  // with ctx.upsert_search_attributes. A type other than the one the
  // tenant's attribute has is invalid-argument naming it.
  search_attributes search;
};

struct resume_options {
  std::string tenant = std::string(default_tenant);
  // A resume carrying an id already recorded for the token is not recorded
  // again; the first resume's answer is returned.
  std::string resume_id;
  // The command id of a resume is its resume id (set either, or both equal).
  std::string command_id;
};

struct cancel_options {
  std::string tenant = std::string(default_tenant);
  std::string reason;
  // A repeat of the cancel that ended the run answers that run again
  // instead of run-finished, and records nothing.
  std::string command_id;
};

// A message for a run (send_message, send_message_to_instance).
struct message_options {
  std::string tenant = std::string(default_tenant);
  // 1..200 bytes; empty: none. Recorded once per run (per instance, for a
  // message sent by instance id) and message name: a repeat records
  // nothing and gets the first one's receipt, also after the run ended.
  std::string idempotency_key;
};

// Message-with-start: the run of `flow` started with `input` for the
// instance when no run holds it, its first event the message.
struct message_start {
  std::string flow;
  json input;
};

// Where a message was recorded.
struct message_receipt {
  std::string run_id;
  std::uint64_t sequence = 0;  // its place in the run's history
  bool started = false;        // it started its run (message-with-start)

  json to_json() const;
};

struct update_options {
  std::string tenant = std::string(default_tenant);
  // 1..200 bytes; empty: one is drawn (no repeat can name it). A repeated
  // id records nothing and gets the first update's handle or result.
  std::string update_id;
  // Answer once the flow completed the update (else once it is accepted,
  // durably); a wait longer than `timeout` answers the update accepted.
  bool wait_completed = true;
  std::chrono::milliseconds timeout{25'000};
};

struct update_receipt {
  std::string run_id;
  std::string update_id;
  std::uint64_t sequence = 0;
  bool completed = false;  // else accepted
  json result;             // when completed

  json to_json() const;
};

struct hook_info {
  std::string token;
  std::string owner_run_id;
  json metadata;
  std::int64_t created_at_ms = 0;
  std::string state;                 // "active" or "retained"
  std::int64_t retain_until_ms = 0;  // 0: no retention

  json to_json() const;
};

class runtime_impl;

class runtime {
 public:
  // Opens `options.data_dir` (creating it), recovers every unfinished run,
  // and starts serving. The runtime creates and owns its actor system.
  static result<std::unique_ptr<runtime>> open(runtime_options options,
                                               registry flows);
  // The same on the embedding application's actor system, which must outlive
  // the runtime and whose config registered durin's message types
  // (durin::add_message_types, durin/caf.hpp); invalid-argument otherwise.
  static result<std::unique_ptr<runtime>> open(runtime_options options,
                                               registry flows,
                                               caf::actor_system& system);

  // Stops admitting work, lets in-flight commits finish, stops the actors.
  // Runs resume from their history at the next open.
  ~runtime();

  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;

  // Admits a run of `flow` with `input`: returns once the admission is
  // durable (status pending). flow-not-found, invalid-input otherwise.
  result<run_info> start(std::string_view flow, json input,
                         const start_options& options = {});

  // The same without blocking: `done` runs on an internal thread once the
  // admission is durable or refused. It must not block.
  void start_async(std::string_view flow, json input,
                   const start_options& options,
                   std::function<void(result<run_info>)> done);

  // Delivers `payload` to the run owning `token`; answers once the payload is
  // durable, with the owner's run id. hook-not-found when no running run
  // owns the token (none, or a finished owner retaining it).
  result<std::string> resume_hook(std::string_view token, json payload,
                                  const resume_options& options = {});

  // The same without blocking: `done` runs once, on an internal thread, when
  // the payload is durable or refused (a runtime closing meanwhile may drop
  // it). It must not block.
  void resume_hook_async(std::string_view token, json payload,
                         const resume_options& options,
                         std::function<void(result<std::string>)> done);

  // The hook on `token` now (advisory: it may change right after).
  result<hook_info> get_hook_by_token(
      std::string_view token, std::string_view tenant = default_tenant) const;

  // The run now: the durable record, or `blocked` while held for replay.
  result<run_info> get(std::string_view run_id,
                       std::string_view tenant = default_tenant) const;

  // Waits until the run ends (completed, failed, cancelled); timeout when it
  // has not within `timeout` (the run goes on).
  result<run_info> wait(std::string_view run_id,
                        std::chrono::milliseconds timeout,
                        std::string_view tenant = default_tenant) const;

  // Like wait, but also answers once the run waits for something (status
  // waiting: a hook, a sleep, a step's retry), durably. Event-driven: it
  // sleeps until the run's record changes to one of those states.
  result<run_info> wait_settled(std::string_view run_id,
                                std::chrono::milliseconds timeout,
                                std::string_view tenant = default_tenant) const;

  result<run_page> list(const run_filter& filter) const;

  // The recorded events of the run, in order.
  result<std::vector<history_event>> history(
      std::string_view run_id, std::string_view tenant = default_tenant) const;

  // Cancels the run: it ends as cancelled, its pending step results and
  // timers are ignored. run-finished when it had already ended.
  result<run_info> cancel(std::string_view run_id, std::string reason = {},
                          std::string_view tenant = default_tenant);
  result<run_info> cancel(std::string_view run_id,
                          const cancel_options& options);

  // Terminates the run: a forced stop that runs none of the flow's code; it
  // ends as terminated. run-finished when it had ended already; a repeat
  // of the command that terminated it answers the run again.
  result<run_info> terminate(std::string_view run_id,
                             const cancel_options& options);

  // Messages, updates and queries (durin/message.hpp; services/
  // runtime_messages.cpp). A message is answered once durable in the run's
  // history; invalid-argument for a bad name (1..128 bytes of letters,
  // digits, "._:-"), key or payload (payload_bytes_max); run-finished for
  // a run that ended (unless its key was recorded: then the receipt).
  result<message_receipt> send_message(std::string_view run_id,
                                       std::string_view name, json payload,
                                       const message_options& options = {});
  // To the active run holding `instance_id` (run-not-found when none
  // does); with `start`, a run is started for it first when none holds it,
  // the message its first event, in one write: no message is lost and no
  // second run starts, and a repeat of its key gets the first receipt,
  // also after that run ended.
  result<message_receipt> send_message_to_instance(
      std::string_view instance_id, std::string_view name, json payload,
      const message_options& options = {},
      std::optional<message_start> start = std::nullopt);
  // An update: validated by the flow's handler (update-rejected records
  // nothing; handler-not-found without one), recorded, then completed by
  // the flow with a result.
  result<update_receipt> update(std::string_view run_id, std::string_view name,
                                json args, const update_options& options = {});
  // A query of the run's current state (an active or passivated run, which
  // is replayed): records nothing; query-refused when its handler tries a
  // durable call; run-finished for a run that ended.
  result<json> query(std::string_view run_id, std::string_view name,
                     json args = nullptr,
                     std::string_view tenant = default_tenant);

  // The active run holding `instance_id`; run-not-found when none does.
  result<run_info> get_instance(std::string_view instance_id,
                                std::string_view tenant = default_tenant) const;

  // Sends `listener` a message (durin::run_finished_atom, durin::run_info)
  // when the run ends, or at once if it has. See durin/caf.hpp.
  void notify_on_finish(std::string_view run_id, const caf::actor& listener);

  // Run actors alive now (runs passivated on a far timer have none).
  std::size_t active_run_actors() const;

  caf::actor_system& system();
  std::int64_t now_ms() const;

 private:
  friend class runtime_access;  // services/runtime_access.hpp
  explicit runtime(std::unique_ptr<runtime_impl> impl);
  result<run_info> cancel_or_terminate(std::string_view run_id,
                                       const cancel_options& options,
                                       bool terminate);
  result<run_info> cancel_once(std::string_view run_id,
                               const cancel_options& options, bool terminate);
  std::unique_ptr<runtime_impl> impl_;
};

}  // namespace durin
