// The run engine drives one run's flow coroutine against its history. It is
// plain state with no I/O and no actor: the run actor feeds it inputs (commit
// outcomes, step outcomes, timers, cancel) and carries out what it asks for in
// `engine_output` (one durable write at a time, steps to dispatch, timers to
// hand to the timer service). That keeps every rule testable on its own.
//
// Replay: the flow's N-th durable call consumes the events recorded for call
// N. A call whose kind or name differs from the record, or a flow that ends
// before the recorded calls do, blocks the run: the engine writes nothing more
// and reports why; the run continues when code that matches runs it again.
//
// Durability: a call's outcome reaches the flow only after the events that
// record it are durable. Values (now, random, side effects) are staged and go
// to disk with the next write, which always precedes any effect depending on
// them (a step is dispatched only once everything before it is durable).
//
// Limits: a write that would take the history past history_events_max or
// history_bytes_max is dropped before it is submitted and replaced by the
// run's failure (history-limit-exceeded). Calls with durations or retry
// policies out of range throw invalid_argument_error before they are
// numbered, so replay refuses them at the same place.
//
// Invariants: at most one write in flight; at most one outcome recorded per
// call and attempt; nothing is staged or written once the run is finished,
// cancelled, ending or blocked (cancellation itself excepted).
#pragma once

#include <array>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "actors/messages.hpp"
#include "durin/clock.hpp"
#include "durin/error.hpp"
#include "durin/flow.hpp"
#include "durin/registry.hpp"
#include "durin/run.hpp"
#include "persistence/records.hpp"
#include "services/step_executor.hpp"

namespace durin::actors {

// One durable write the engine asks for.
struct commit_plan {
  std::vector<std::pair<std::uint64_t, persistence::event_record>> events;
  std::optional<persistence::run_record> run;
  std::vector<persistence::timer_record> timer_puts;
  std::vector<persistence::timer_record> timer_deletes;
  bool delete_active = false;
  // Idempotency keys of messages this write records: (scope, key, record)
  // as inbox resume records of the run's shard.
  struct message_key {
    std::string scope;
    std::string key;
    persistence::resume_record record;
  };
  std::vector<message_key> message_keys;
  // continue-as-new: the run admitted in the write that ends this one, and
  // its start token's record (owner: the successor), if the run has one.
  struct successor_admission {
    persistence::run_record run;
    std::optional<persistence::token_record> token;  // its start token's
  };
  std::unique_ptr<successor_admission> successor;  // boxed: rare

  bool empty() const {
    return events.empty() && !run && timer_puts.empty() &&
           timer_deletes.empty() && !delete_active && message_keys.empty() &&
           !successor;
  }
};

// A child run to start (ctx.start_child), with the identity recorded for
// its call before it is sent: a replay starts (or finds) that very run.
struct child_start {
  std::uint64_t call = 0;
  std::string run_id;
  std::string flow;
  json input;
  std::string instance_id;
  std::string command_id;  // "child:<parent run id>:<call>"
  std::uint8_t parent_close = 1;
  json memo;
  search_attributes search;
};

// A child whose parent_close asks for its end when this run ends.
struct child_to_close {
  std::string run_id;
  std::uint8_t parent_close = 1;
};

// A step attempt to run: on the executor, or (with a task queue) by a
// remote worker through the task service.
struct step_dispatch {
  std::uint64_t call = 0;
  step_info info;
  std::function<json()> body;
  std::string task_queue;  // empty: in the node
  json args;               // for a remote worker: the step's arguments
  step_timeouts timeouts;
  std::int64_t step_scheduled_at_ms = 0;  // the first attempt's
  // A step of a worker session: the worker it is pinned to (empty: the
  // session is not bound yet) and the session's worker timeout (> 0).
  std::string session_worker;
  std::int64_t worker_timeout_ms = 0;
};

// A message for a token actor (see token_actor.hpp).
struct token_message {
  enum class kind : std::uint8_t { claim, subscribe, dispose, owner_end };
  kind what = kind::claim;
  std::string token;
  hook_claim claim;        // kind::claim
  subscription subscribe;  // kind::subscribe
  owner_notice notice;     // kind::dispose, kind::owner_end
};

// What the run actor must do after an engine call.
// The engine's generator: attempt ids, backoff jitter and ctx.random values
// (recorded, so replay never asks it again). xoshiro256** seeded through
// splitmix64: 32 bytes and a few nanoseconds to seed, where a mt19937_64
// is 2.5 KB and was a few percent of a short run's CPU to seed.
class engine_random {
 public:
  using result_type = std::uint64_t;
  explicit engine_random(std::uint64_t seed) {
    for (auto& word : state_) {
      seed += 0x9e3779b97f4a7c15ULL;
      auto z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      word = z ^ (z >> 31);
    }
  }
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~result_type{0}; }
  result_type operator()() {
    auto result = rotate(state_[1] * 5, 7) * 9;
    auto t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotate(state_[3], 45);
    return result;
  }

 private:
  static result_type rotate(result_type x, int k) {
    return (x << k) | (x >> (64 - k));
  }
  std::array<result_type, 4> state_{};
};

// A run whose state to report (on_watched_run): once it ended, or, for a
// run another node serves, its state now.
struct run_watch {
  std::string run_id;
  bool until_end = true;
};

struct engine_output {
  std::optional<commit_plan> commit;              // submit; report on_committed
  std::vector<step_dispatch> dispatches;          // run; report on_step_outcome
  std::vector<persistence::timer_record> timers;  // durable: schedule them
  std::vector<std::function<void()>> replies;     // answers to send now
  std::vector<token_message> token_messages;      // send now
  std::vector<run_watch> watches;                 // runs whose state to report
  // Tokens the run holds as it ends: marked ending (held_tokens) before the
  // commit that records the end is submitted.
  std::vector<std::string> ending_tokens;
  bool finished = false;                     // the run ended, durably
  std::vector<child_start> child_starts;     // start them (once checked absent)
  std::vector<std::uint64_t> child_retries;  // start again after a backoff
  // continue-as-new: ask this start token's actor to hold it still for the
  // end write (answered on_hand_over).
  std::string hand_over;
  // With `finished`: children whose parent_close ends them now.
  std::vector<child_to_close> close_children;
};

struct engine_environment {
  const registry* flows = nullptr;
  durin::clock* clock = nullptr;
  std::chrono::milliseconds passivate_after{2000};
  std::int64_t retention_max_ms = 30LL * 24 * 3600 * 1000;
  // Reads another run of the same tenant: {"id","status","output","error"};
  // nullopt when another node serves its shard (the state is then asked
  // for there: a run_watch with until_end false).
  std::function<std::optional<json>(const std::string& run_id)> read_run;
  std::uint32_t spec_version = persistence::spec_version;
  // The run's history limits (runtime_options): a write that would take
  // the history beyond either is replaced by the run's failure,
  // history-limit-exceeded.
  std::uint64_t history_events_max = 50'000;
  std::uint64_t history_bytes_max = 50ULL << 20;
  // Whether a token lives in the run's own shard (services/shard_map.hpp).
  // A webhook's token, drawn at random, is drawn again until it does, so
  // its claims and payloads stay in the run's shard (on one node, and in a
  // cluster, where another shard may be another node's). Null: any token.
  std::function<bool(std::string_view token)> token_is_home;
  // A run id for a child started with these ids (in their start token's
  // shard), and one in this run's own shard (a successor's, which the
  // end write admits).
  std::function<std::string(const std::string& instance_id,
                            const std::string& command_id)>
      draw_child_run_id;
  std::function<std::string()> draw_run_id_here;
  // Fixes the types of attributes the flow upserts for the run's tenant
  // (services/search_types.hpp): ok when they agree, invalid-argument
  // saying why not, unavailable when the cluster has not agreed them yet
  // (the claim sets that going). Null: no types are kept.
  std::function<status(const search_attributes&)> claim_search_types;
};

// What one event counts towards history_bytes_max: its names, payload and
// messages, plus 64 bytes for its fixed fields and key.
std::uint64_t history_bytes_of(const persistence::event_record& event);

// Room kept below history_bytes_max (and one event below
// history_events_max) for the event that ends the run.
inline constexpr std::uint64_t history_end_reserve_bytes = 4096;

class run_engine final : public detail::driver {
 public:
  // REQUIRES: `history` is the run's complete history, in order.
  run_engine(engine_environment env, persistence::run_record record,
             std::vector<persistence::event_record> history);
  ~run_engine() override;

  run_engine(const run_engine&) = delete;
  run_engine& operator=(const run_engine&) = delete;

  // Replays the flow from its history, then goes on live.
  void start();

  // The write asked for last is durable (or failed: indefinite).
  void on_committed(const status& outcome);

  // A step attempt ended. Ignored unless the run still waits on exactly this
  // attempt (late and duplicate reports change nothing). `reply`, when set,
  // learns whether the outcome was recorded, once that is durable.
  void on_step_outcome(std::uint64_t call, const std::string& attempt_id,
                       step_outcome outcome,
                       std::function<void(report_answer)> reply = nullptr);

  // A timer fired. Ignored unless the run waits on it.
  void on_timer(const persistence::timer_record& timer);

  // From token actors: a claim's answer, a payload, the loss of a token.
  void on_claim_outcome(const claim_outcome& outcome);
  void on_hook_payload(const hook_delivery& delivery);
  void on_hook_lost(const hook_loss& loss);

  // Ends the run as cancelled (with `terminate`: as terminated, a forced
  // stop); `reply` gets the final state once durable, or run-finished when
  // the run had ended already. Neither runs any of the flow's code.
  void cancel(std::string reason, std::string command_id,
              std::function<void(result<run_info>)> reply,
              bool terminate = false);

  // A message or an update from outside (run_engine_messages.cpp). An update
  // is validated first (a rejection records nothing). `reply` gets the
  // receipt once the message is durable (an update waiting for completion:
  // once its result is), or why not. REQUIRES: its key, if any, is not
  // recorded in the store (the run actor looked).
  void on_message(message_request request,
                  std::function<void(result<message_receipt>)> reply);
  // The receipt of a message this activation recorded (or is recording)
  // under `scope` and `key`; `reply` is then answered as the first was.
  // False when this activation knows no such key.
  bool answer_repeat(const message_request& request,
                     const std::function<void(result<message_receipt>)>& reply);
  // The receipt of the message at history `sequence`, as a repeat of it is
  // answered (an update: with its result once completed).
  void answer_recorded(const message_request& request, message_receipt receipt,
                       std::function<void(result<message_receipt>)> reply);
  // Answers a query from the flow's handler; records nothing. query-refused
  // when the handler makes a durable call.
  result<json> query(const std::string& name, const json& args);
  // True while callers wait for an update's completion.
  bool has_update_waiters() const {
    return talk_ && !talk_->update_waiters.empty();
  }

  engine_output take_output();

  run_info info() const;
  bool finished() const { return finished_; }
  bool blocked() const { return !blocked_reason_.empty(); }
  const std::string& blocked_reason() const { return blocked_reason_; }
  // True when the actor must drop this engine and reload the run from
  // storage: a write failed, or the flow could not go on now (a type the
  // cluster could not agree) and no write is in flight.
  bool must_reload() const {
    return storage_failed_ || (reload_wanted_ && !in_flight_);
  }
  // True while idle on a timer due later than the passivation threshold.
  bool can_passivate() const;
  // True while idle on a hook it owns and has subscribed to: its payloads
  // (and a force-claim) reach the run through messages that re-activate it,
  // and replay subscribes again from the last payload recorded.
  bool idle_on_hook() const;
  // What the run would send its tokens again: the claims not answered yet,
  // and the subscription of the hook read it waits on. For tokens another
  // node serves, whose node may have lost them (a restart, a move).
  std::vector<token_message> hook_requests_again() const;
  // The durable timer the run waits on, if any.
  std::optional<persistence::timer_record> waiting_timer() const;

  // detail::driver, called by the flow's awaitables.
  bool begin_step(detail::step_call call, detail::call_outcome* out) override;
  std::uint32_t open_session(std::string task_queue,
                             std::int64_t worker_timeout_ms) override;
  bool begin_sleep(std::int64_t duration_ms, std::int64_t absolute_ms,
                   detail::call_outcome* out) override;
  void park(std::coroutine_handle<> handle) override;
  json record_value(detail::value_kind kind, std::string_view name,
                    const std::function<json()>& produce) override;
  std::size_t hook_create(detail::hook_request request) override;
  const std::string& hook_token(std::size_t hook) const override;
  bool hook_conflict(std::size_t hook, detail::call_outcome* out) override;
  bool hook_next(std::size_t hook, detail::call_outcome* out) override;
  void hook_dispose(std::size_t hook) override;
  bool begin_watch(const std::string& run_id, bool until_end,
                   detail::call_outcome* out) override;
  bool message_read(const std::vector<std::string>& names,
                    detail::call_outcome* out) override;
  void update_validator(
      std::string name,
      std::function<std::string(const json&)> validate) override;
  void query_handler(std::string name,
                     std::function<json(const json&)> answer) override;
  void update_complete(std::uint64_t sequence, json result) override;
  const std::string& run_id() const override { return record_.id; }

  // A watched run's state: it ended, or (read on another node) its state
  // now when only that was asked for.
  void on_watched_run(const std::string& run_id, const json& state);
  // The watch the run waits on, if it waits on one.
  std::optional<run_watch> pending_watch() const;

  bool begin_child(detail::child_request request,
                   detail::call_outcome* out) override;
  int version(std::string_view change_id, int min_supported,
              int max_supported) override;
  void set_memo(json memo) override;
  void upsert_search_attributes(search_attributes attributes) override;
  void remove_search_attributes(std::vector<std::string> names) override;
  // A child's start was decided; indefinite ones are asked again
  // (output child_retries, then retry_child).
  void on_child_started(const child_started& started);
  void retry_child(std::uint64_t call);
  // The start token's actor holds the token still for the end write of a
  // run that continues as new. False when the run no longer needs it (it
  // was cancelled meanwhile): the actor must release the token at once.
  bool on_hand_over(const hand_over_ready& ready);

 private:
  enum class call_kind : std::uint8_t {
    none,
    step,
    sleep,
    value,
    hook_create,
    hook_next,
    hook_dispose,
    hook_conflict,  // waiting on a claim: not a call of its own
    watch,
    message_read,
    child,
    memo,           // ctx.set_memo
    search,         // ctx.upsert_search_attributes
    search_remove,  // ctx.remove_search_attributes
  };

  struct hook_entry {
    std::string token;
    std::uint64_t call = 0;  // of create_hook; 0 for the start hook
    enum class claim : std::uint8_t {
      pending,
      owned,
      conflict
    } state = claim::pending;
    std::string owner;  // conflicting owner
    bool disposed = false;
    bool subscribed = false;
    std::uint64_t consumed = 0;  // last payload sequence recorded
    std::string lost_to;         // force-claimed by
    std::uint64_t lost_after = 0;
    hook_claim claim;  // as sent, so a retry asks for exactly the same
  };

  struct pending_call {
    // The flow parked on call `number` of `kind`, its value due in `out`.
    static pending_call of(call_kind kind, std::uint64_t number,
                           detail::call_outcome* out) {
      pending_call parked;
      parked.kind = kind;
      parked.call = number;
      parked.out = out;
      return parked;
    }
    call_kind kind = call_kind::none;
    std::uint64_t call = 0;
    detail::call_outcome* out = nullptr;
    // step
    std::string name;
    retry_policy retry;
    std::function<json()> body;
    std::uint32_t attempt = 0;
    std::string attempt_id;
    bool dispatched = false;
    bool waiting_retry = false;
    std::string task_queue;  // empty: in the node
    json args;               // remote steps: the arguments as sent
    step_timeouts timeouts;
    std::int64_t first_scheduled_ms = 0;  // schedule-to-close counts from it
    std::uint32_t session = 0;            // its worker session; 0: none
    // sleep, or the retry timer of a step
    std::int64_t due_ms = 0;
    // hook_next, hook_conflict
    std::size_t hook = 0;
    // watch
    std::string watched;
    bool watched_until_end = true;  // else its state now (another node's)
    // message_read
    std::vector<std::string> names;
    // child
    std::optional<child_start> child;
  };

  // A worker session the flow opened (ctx.session), as its steps' history
  // and outcomes have made it so far.
  struct session_state {
    std::string task_queue;
    std::int64_t worker_timeout_ms = 0;
    std::string worker;   // bound to; empty until a step's first report
    std::string failure;  // why it failed; empty while it has not
  };

  // Recorded events of one call, for replay.
  struct recorded_call {
    std::vector<const persistence::event_record*> events;
    std::uint64_t first_sequence = 0;
  };

  std::int64_t now() const { return env_.clock->now_ms(); }
  const recorded_call* recorded(std::uint64_t call) const;
  bool check_replay(std::uint64_t call, call_kind kind, std::string_view name);
  void block(std::string reason);
  bool stopped() const {
    return finished_ || cancelled_ || ending_ || blocked() || reload_wanted_;
  }
  // Why the commit staged now would take the history beyond its limits;
  // empty when it fits.
  std::string history_overflow() const;
  // Stages the deletion of the durable timer the run waits on, if any.
  void delete_pending_timer();
  // Replaces the staged commit by the run's failure for `message`.
  void fail_for_history_limit(std::string message);

  void stage(persistence::event_record event);
  // A memo or search attributes changed in record_ by call `call`: staged
  // as one event of `kind` with the run's record, written at once.
  void record_change(persistence::event_kind kind, std::uint64_t call,
                     std::string name, const json& data);
  void stage_status(run_status status);
  void flush_then(std::function<void()> continuation);
  void emit_commit();

  bool try_next_payload(hook_entry& entry, detail::call_outcome* out);
  void send(token_message message);
  // Asks the token's actor for the hook's payloads, once.
  // `again`: also when subscribed already (a gap in what was pushed).
  void subscribe(hook_entry& entry, bool again = false);
  void send_claim(const hook_entry& entry);
  void notify_tokens_of_end();
  // The tokens the run holds when it ends (its start token, unless disposed,
  // and the hooks it owns and has not disposed).
  std::set<std::string> tokens_held_at_end() const;
  // Called as the run's end is staged, before its commit.
  void announce_end();
  void dispatch_step();
  void dispatch_when_durable();
  // Records the step's final failure for `code` and resumes the flow.
  void fail_step(std::string code, std::string message,
                 std::function<void()> after = nullptr);
  // The flow's view of the step's final failure, in pending_.out.
  void set_step_failure(std::string code, const std::string& message);
  // A recorded outcome of the step call being begun: true (and the outcome
  // in `out`) when it ended; otherwise it waits for its retry timer.
  bool replay_step(const recorded_call& rec, detail::call_outcome* out);
  // Binds the registered step of pending_.name (its policy, queue, timeouts
  // and body); false, with its failure staged, when none is registered.
  bool bind_registered_step(detail::step_call& call);
  // Fails the step being begun for good before any attempt (attempt 0),
  // and resumes the flow once that is durable.
  void fail_unstarted_step(std::string code, std::string message);
  // The worker session of the step being begun or waited on; null: none.
  session_state* pending_session();
  // What a recorded (or just staged) event of a session step tells of its
  // session: the worker it bound to, or that the session failed.
  void learn_session(const persistence::event_record& event);
  // Records a failed attempt with attempts left and arms its retry timer,
  // or fails the step when no retry fits its schedule-to-close timeout.
  void schedule_step_retry(persistence::event_record event,
                           const step_outcome& outcome,
                           std::function<void()> recorded);
  void resume_parked();
  void after_resume();
  void complete();
  // The flow called continue_as_new: ends the run, admitting its successor
  // in the same write (after the start token's hand-over, if it has one).
  void continue_as_new();
  void finish();

  engine_environment env_;
  persistence::run_record record_;
  std::vector<persistence::event_record> history_;
  std::vector<recorded_call> calls_;  // index: call number
  std::uint64_t recorded_calls_max_ = 0;
  bool has_run_started_ = false;

  std::optional<context> context_;
  std::optional<durin::flow<json>> flow_;
  std::coroutine_handle<> parked_;
  pending_call pending_;
  std::vector<session_state> sessions_;  // session n at n - 1
  std::uint64_t next_call_ = 1;
  std::uint64_t next_sequence_ = 1;

  commit_plan staged_;
  bool run_dirty_ = false;
  std::vector<std::function<void()>> staged_after_;
  std::vector<std::function<void()>> in_flight_after_;
  bool in_flight_ = false;
  // Recorded values (now, random, side effects) not yet durable: a step
  // waits for them, since its arguments may depend on them.
  std::size_t staged_values_ = 0;
  bool values_in_flight_ = false;

  engine_output output_;
  std::string blocked_reason_;
  bool finished_ = false;
  bool cancelled_ = false;
  // The run's failure (history limit) is staged or in flight.
  bool ending_ = false;
  bool storage_failed_ = false;
  bool reload_wanted_ = false;
  // history_bytes_of every event durable or in flight.
  std::uint64_t history_bytes_ = 0;
  engine_random random_;
  std::vector<hook_entry> hooks_;
  // Payloads delivered but not yet read, by token and sequence: the payload
  // and whether a subscription's scan read it (hook_delivery::scanned).
  struct arrived_payload {
    std::string bytes;
    bool scanned = false;
  };
  std::map<std::string, std::map<std::uint64_t, arrived_payload>> arrived_;

  // Messages, updates and queries (run_engine_messages.cpp), made at their
  // first use: a run that has none carries one pointer (every live run's
  // engine is paid for in memory).
  struct conversation {
    // Recorded and not yet read, by history sequence (the event is in
    // history_ or staged).
    struct arrival {
      std::string name;
      std::string payload;    // MessagePack
      std::string update_id;  // non-empty for an update
    };
    std::map<std::uint64_t, arrival> unread;
    // Keys this activation recorded (or is recording): scope + 0x1F + key
    // to the message's sequence.
    std::map<std::string, std::uint64_t> message_keys;
    // Updates: completed ones' results (MessagePack), by their sequence;
    // callers waiting for a completion.
    std::map<std::uint64_t, std::string> update_results;
    std::map<std::uint64_t,
             std::vector<std::function<void(result<message_receipt>)>>>
        update_waiters;
    std::map<std::string, std::function<std::string(const json&)>> validators;
    std::map<std::string, std::function<json(const json&)>> queries;
    // Update ids by their message's sequence.
    std::map<std::uint64_t, std::string> update_ids;
  };
  std::unique_ptr<conversation> talk_;
  conversation& talk() {
    if (!talk_) {
      talk_ = std::make_unique<conversation>();
    }
    return *talk_;
  }
  // Set while a query's handler (or an update's validation) runs: every
  // durable call refuses then, and marks the query refused.
  bool in_query_ = false;
  mutable bool query_changed_state_ = false;
  void refuse_in_query(std::string_view call) const;
  // Runs `handler` with every durable call refused: its answer, or what it
  // threw; `changed_state` tells whether it tried a durable call.
  std::string read_only(const std::function<std::string()>& handler,
                        bool& changed_state);
  bool try_next_message(detail::call_outcome* out);
  void index_messages();
  // Answers every caller still waiting on an update (the run ended).
  void drop_update_waiters();
  // Callers waiting for completions are bounded (a flow may never complete
  // an update): beyond update_waiters_max, an update is answered accepted.
  static constexpr std::size_t update_waiters_max = 1024;
  bool may_wait() const;
  // Children started (recorded), for parent_close at the run's end.
  std::vector<child_to_close> children_;
  // continue-as-new: the successor's input, once the flow asked for it;
  // the start token's record as its actor handed it over.
  std::optional<json> continue_input_;
  std::unique_ptr<hand_over_ready> handed_over_;  // boxed: rare
};

// When a token is held after its run ends: `spec` is null (not at all), a
// duration ("30 days", "2h", "500ms"), a number of milliseconds, or an
// RFC 3339 time; durations count from `from_ms`. Returns 0 for none, the
// absolute time otherwise; invalid-argument beyond `cap_ms` from `from_ms`.
result<std::int64_t> retain_until(const json& spec, std::int64_t from_ms,
                                  std::int64_t cap_ms);

// The user-facing form of a recorded event (history API, CLI).
history_event describe_event(const std::string& run_id, std::uint64_t sequence,
                             const persistence::event_record& event);

// The result recorded for the update at history `sequence` (MessagePack),
// if its completion is in `history`.
std::optional<std::string> recorded_update_result(
    const std::vector<persistence::event_record>& history,
    std::uint64_t sequence);

// The user-facing form of a run record.
run_info describe_run(const persistence::run_record& record);

// MessagePack helpers. decode_payload returns null for empty bytes and
// throws json::exception for bytes that are not MessagePack.
std::string encode_payload(const json& value);
json decode_payload(const std::string& bytes);

// A memo as stored (empty for null) in `encoded`; "" when it fits
// limits::memo_bytes_max, else what is wrong, naming `what` ("memo",
// "ctx.set_memo: the memo", "action.memo"). Every place that takes a memo
// measures it so.
std::string encode_memo(const json& memo, std::string_view what,
                        std::string& encoded);

}  // namespace durin::actors
