#include "actors/run_actor.hpp"

#include <algorithm>
#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <cstdio>

#include "actors/answers.hpp"
#include "actors/run_engine.hpp"
#include "persistence/keys.hpp"
#include "persistence/test_points.hpp"
#include "services/hook_mail.hpp"
#include "services/node.hpp"
#include "services/start.hpp"
#include "services/task_service.hpp"

namespace durin::actors {

namespace {

struct run_actor_state {
  node* services = nullptr;
  shard* home = nullptr;  // the shard the run lives in
  std::string run_id;
  std::unique_ptr<run_engine> engine;
  bool reloading = false;
  std::int64_t reload_backoff_ms = 50;
  bool blocked_reported = false;
  std::string tenant = "default";
  // Messages handled; a run idle on a hook passivates once a linger of
  // passivate_after has passed with this unchanged.
  std::uint64_t messages = 0;
  bool linger_armed = false;
  // Tokens held as the run ends; those whose deletion rides in the write
  // recording the end (held_tokens::take_release), until it settles; those
  // it deleted, which need no end notice.
  std::vector<std::string> ending_tokens;
  std::vector<std::string> releasing;
  std::vector<std::string> released;
  // The key of a start answered once the run settles: its answer is kept
  // in the batch that first records the run waiting or ended.
  std::optional<persistence::start_key> settle_key;
  // The run as the write in flight records it, when that write makes it wait
  // or end: told to the run-event hub once durable (and whether that write
  // kept the settled start's answer).
  std::optional<persistence::run_record> settling;
  bool settling_kept_answer = false;
  // A fresh run whose admission is not written yet: its first write
  // carries it, and what the engine asked for meanwhile is held until that
  // write is durable (nothing the run does may be seen before it exists).
  struct unwritten_admission {
    persistence::run_record record;
    start_answer answer;
    std::optional<reply_once<run_info>> admitted;
    run_info info;
    bool submitted = false;
    bool with_commit = false;  // the write carries the engine's commit too
    engine_output held;
  };
  // Boxed, as is the successor: most of a run's life has neither, and a
  // run actor's state is paid for by every live run.
  std::unique_ptr<unwritten_admission> admitting;
  // continue-as-new: the run admitted by the end write in flight; the start
  // token's address while its actor holds it still for that write (held),
  // and whether that write is the one to settle it.
  std::unique_ptr<persistence::run_record> successor;
  std::string hand_over_address;
  bool hand_over_held = false;
  bool hand_over_in_write = false;
  // Backoff of a child's start whose outcome was not known.
  std::int64_t child_backoff_ms = 100;
  // A remote watch's ask is out (remote_watch): its answer, whichever
  // engine asked, is the only one awaited.
  bool remote_watch_busy = false;
  // A hook_again message is on its way (the run waits on a token another
  // node serves).
  bool hook_again_armed = false;
  static inline const char* name = "durin.run";
};

using self_pointer = run_actor::stateful_pointer<run_actor_state>;

constexpr std::int64_t reload_backoff_ms_max = 5000;
// Before asking another node again for a watched run whose last ask had no
// answer for certain (its shard without an owner, a forward timed out).
constexpr std::chrono::milliseconds remote_watch_pause{500};
// Between sends again to a token of another node's shard: how late a
// payload that node lost (a restart, a move) arrives at most.
constexpr std::chrono::milliseconds hook_again_period{2000};

// The engine's requests to send again (run_engine::hook_requests_again)
// whose tokens another node serves.
std::vector<token_message> remote_hook_requests(self_pointer self) {
  auto& st = self->state;
  std::vector<token_message> out;
  if (!st.engine || st.services->remote.load() == nullptr) {
    return out;
  }
  for (auto& message : st.engine->hook_requests_again()) {
    auto address = persistence::keys::token(st.tenant, message.token);
    if (st.services->remote_for_token(address) != nullptr) {
      out.push_back(std::move(message));
    }
  }
  return out;
}

// Leaves the directory and stops when nothing more can happen without a
// message from outside: the run ended, could not load, or sleeps long.
void maybe_leave(self_pointer self, bool lingered = false) {
  auto& st = self->state;
  // A run waiting on a token of another node's shard stays, asking again
  // (hook_again): nothing would wake it for a payload that node lost.
  bool idle = !st.reloading && (!st.engine || st.engine->finished() ||
                                st.engine->can_passivate() ||
                                (lingered && st.engine->idle_on_hook() &&
                                 remote_hook_requests(self).empty()));
  if (!idle) {
    if (!st.reloading && st.engine && st.engine->idle_on_hook() &&
        !st.linger_armed) {
      st.linger_armed = true;
      self->delayed_send(self, st.services->options.passivate_after,
                         linger_atom::value, st.messages);
    }
    return;
  }
  auto* actor = self;
  if (st.home->runs->try_passivate(st.run_id, self->address(), [actor] {
        return actor->mailbox().empty();
      })) {
    self->quit();
  }
}

// The write carrying the run's token releases is durable (or failed): the
// token actors learn it from held_tokens, and one that is waiting for it
// is woken.
void settle_releases(self_pointer self, bool ok) {
  auto& st = self->state;
  for (auto& token : st.releasing) {
    auto address = persistence::keys::token(st.tenant, token);
    if (st.services->held.settle_release(address, ok)) {
      st.services->tokens_of(address).deliver(address, reload_atom::value);
    }
    if (ok) {
      st.released.push_back(token);
    }
  }
  st.releasing.clear();
}

// The engine's records of `plan`: events, the run, timers, message keys.
void add_plan_records(persistence::write_batch& batch,
                      const run_actor_state& st, commit_plan& plan) {
  for (auto& [sequence, event] : plan.events) {
    batch.put_event(st.run_id, sequence, event);
  }
  if (plan.run) {
    batch.put_run(*plan.run);
  }
  for (auto& timer : plan.timer_puts) {
    batch.put_timer(timer);
  }
  for (auto& timer : plan.timer_deletes) {
    batch.delete_timer(timer);
  }
  for (auto& key : plan.message_keys) {
    batch.put_resume(st.tenant, key.scope, key.key, key.record);
  }
}

// continue-as-new: the successor is admitted in the write that ends this
// run, with the start token naming it (held still by its actor).
void add_successor(self_pointer self, persistence::write_batch& batch,
                   commit_plan::successor_admission& successor) {
  auto& st = self->state;
  auto info = describe_run(successor.run);
  add_admission(batch, {.run = successor.run,
                        .info = info,
                        .token = successor.token ? &*successor.token : nullptr,
                        .now_ms = st.services->clock->now_ms()});
  st.successor =
      std::make_unique<persistence::run_record>(std::move(successor.run));
  DURIN_TEST_KILL_POINT("run.before_continue_write");
}

// The write that records the end also frees the tokens whose actors offered
// that. Only tokens of the run's own shard: another shard's token is freed
// by its actor on the owner-end message (a write of that shard).
void add_end(self_pointer self, persistence::write_batch& batch) {
  auto& st = self->state;
  if (st.hand_over_held) {
    st.hand_over_in_write = true;
  }
  batch.delete_active(st.run_id);
  for (auto& token : st.ending_tokens) {
    auto address = persistence::keys::token(st.tenant, token);
    if (&st.services->shard_of_token(address) == st.home &&
        st.services->held.take_release(address, st.run_id)) {
      batch.delete_token(st.tenant, token);
      st.releasing.push_back(token);
    }
  }
}

// Submits the engine's commit `plan`, with the run's admission when that is
// not written yet (then `plan` may be empty).
void submit_commit(self_pointer self, commit_plan plan) {
  auto& st = self->state;
  auto batch = st.home->store->batch();
  if (st.admitting) {
    auto& admitting = *st.admitting;
    add_admission(batch, {.run = admitting.record,
                          .info = admitting.info,
                          .answer = &admitting.answer,
                          .now_ms = st.services->clock->now_ms(),
                          .run_in_batch = plan.run.has_value()});
  }
  add_plan_records(batch, st, plan);
  if (plan.run && (plan.run->status == run_status::waiting ||
                   is_terminal(plan.run->status))) {
    st.settling_kept_answer =
        st.settle_key &&
        add_settled_answer(batch, *st.settle_key, st.services->clock->now_ms(),
                           describe_run(*plan.run));
    st.settle_key.reset();
    st.settling = std::move(plan.run);
  }
  if (plan.successor) {
    add_successor(self, batch, *plan.successor);
  }
  if (plan.delete_active) {
    add_end(self, batch);
  }
  auto handle = caf::actor_cast<run_actor>(self);
  st.home->committer->submit(std::move(batch), [handle](const status& outcome) {
    caf::anon_send(handle, committed_atom::value, outcome);
  });
}

// Every attempt is a task of the node's task service: a remote one waits on
// its queue for a worker; an in-node one is leased to the executor at once
// (in memory only) and its outcome passes the service's fencing.
void dispatch_step(self_pointer self, step_dispatch dispatch) {
  auto& st = self->state;
  auto* service = st.services->tasks.get();
  auto handle = caf::actor_cast<run_actor>(self);
  auto call = dispatch.call;
  auto attempt_id = dispatch.info.attempt_id;
  auto refuse = [&](std::string message) {
    step_outcome overloaded;
    overloaded.result = step_outcome::kind::retryable;
    overloaded.message = std::move(message);
    caf::anon_send(handle, step_done_atom::value,
                   step_report{call, attempt_id, std::move(overloaded)});
  };
  if (dispatch.task_queue.empty() && !dispatch.timeouts.any()) {
    // Fast path: nothing can expire, so no lease to track. The engine
    // fences the outcome by attempt id; a heartbeat only asks whether the
    // run was cancelled (the body's own metadata names the run).
    step_task task{std::move(dispatch.info), std::move(dispatch.body),
                   [handle, call, attempt_id](step_outcome outcome) {
                     caf::anon_send(
                         handle, step_done_atom::value,
                         step_report{call, attempt_id, std::move(outcome)});
                   },
                   [service](const step_progress&) {
                     return !service->run_cancelled(step_metadata().run_id);
                   }};
    if (!st.services->executor->submit(std::move(task))) {
      refuse("the step executor's queue is full");
    }
    return;
  }
  services::task_spec spec{
      .tenant = st.tenant,
      .run_id = st.run_id,
      .instance_id = dispatch.info.instance_id,
      .step_id = dispatch.info.step_id,
      .step_name = dispatch.info.step_name,
      .attempt_id = attempt_id,
      .attempt = dispatch.info.attempt,
      .call = call,
      .task_queue = dispatch.task_queue,
      .args = std::move(dispatch.args),
      .timeouts = dispatch.timeouts,
      .step_scheduled_at_ms = dispatch.step_scheduled_at_ms,
      .session_worker = std::move(dispatch.session_worker),
      .worker_timeout_ms = dispatch.worker_timeout_ms};
  if (!spec.task_queue.empty()) {
    if (!service->enqueue(std::move(spec))) {
      refuse("task queue '" + dispatch.task_queue + "' is full");
    }
    return;
  }
  auto tenant = st.tenant;
  service->start_local(std::move(spec));
  step_task task{
      std::move(dispatch.info), std::move(dispatch.body),
      [service, tenant, attempt_id](step_outcome outcome) {
        (void)service->report(tenant, attempt_id, "node", std::move(outcome),
                              nullptr);
      },
      [service, tenant, attempt_id](const step_progress& progress) {
        return service->heartbeat(tenant, attempt_id, "node", progress).go_on;
      }};
  if (!st.services->executor->submit(std::move(task))) {
    service->cancel_attempt(attempt_id);
    refuse("the step executor's queue is full");
  }
}

// A token another node serves gets the message as hook mail
// (services/hook_mail.hpp), and the run asks again every few seconds while
// it waits on it.
void mail_to_token(self_pointer self, services::remote_runs& port,
                   const token_message& message) {
  auto& st = self->state;
  using kind = services::hook_mail::kind;
  static_assert(static_cast<int>(kind::owner_end) ==
                static_cast<int>(token_message::kind::owner_end));
  const auto what = static_cast<kind>(message.what);  // the same order
  switch (message.what) {
    case token_message::kind::claim:
      port.post(services::make_hook_mail(what, st.tenant, message.token,
                                         message.claim));
      break;
    case token_message::kind::subscribe:
      port.post(services::make_hook_mail(what, st.tenant, message.token,
                                         message.subscribe));
      break;
    case token_message::kind::dispose:
    case token_message::kind::owner_end:
      port.post(services::make_hook_mail(what, st.tenant, message.token,
                                         message.notice));
      break;
  }
  if (!st.hook_again_armed &&
      (message.what == token_message::kind::claim ||
       message.what == token_message::kind::subscribe)) {
    st.hook_again_armed = true;
    self->delayed_send(self, hook_again_period, hook_again_atom::value);
  }
}

void send_to_token(self_pointer self, token_message message) {
  auto& st = self->state;
  auto address = persistence::keys::token(st.tenant, message.token);
  if (message.what == token_message::kind::owner_end &&
      std::find(st.released.begin(), st.released.end(), message.token) !=
          st.released.end()) {
    return;  // its end write deleted the token
  }
  if (auto* port = st.services->remote_for_token(address)) {
    mail_to_token(self, *port, message);
    return;
  }
  auto& tokens = st.services->tokens_of(address);
  switch (message.what) {
    case token_message::kind::claim:
      tokens.deliver(address, claim_atom::value, std::move(message.claim));
      break;
    case token_message::kind::subscribe:
      tokens.deliver(address, subscribe_atom::value,
                     std::move(message.subscribe));
      break;
    case token_message::kind::dispose:
      tokens.deliver(address, dispose_atom::value, std::move(message.notice));
      break;
    case token_message::kind::owner_end:
      tokens.deliver(address, owner_end_atom::value, std::move(message.notice));
      break;
  }
}

// A run's state as a flow's run handle sees it (recorded in its history).
json run_state_of(const run_info& info) {
  json out = {{"id", info.id},
              {"status", std::string(to_string(info.status))},
              {"output", info.output},
              {"error", nullptr}};
  if (info.error) {
    out["error"] = {{"code", info.error->code},
                    {"message", info.error->message}};
  }
  return out;
}

// nullopt when another node serves the run's shard: its state is asked for
// there (remote_watch).
std::optional<json> run_state(const node& services, const std::string& tenant,
                              const std::string& run_id) {
  if (services.remote_for(run_id) != nullptr) {
    return std::nullopt;
  }
  auto record = services.shard_of_run(run_id).store->get_run(run_id);
  if (!record || !*record || (*record)->tenant != tenant) {
    return json{{"id", run_id}, {"status", "not-found"}};
  }
  return run_state_of(describe_run(**record));
}

// Asks the node that serves `watch.run_id` for its state (a long poll when
// it is to end). A poll that came back with the run going on, or with no
// answer for certain, is asked again (at once, or after a pause).
void remote_watch(self_pointer self, const run_watch& watch) {
  auto& st = self->state;
  if (st.remote_watch_busy) {
    return;  // one ask at a time (an earlier engine's answers this one)
  }
  st.remote_watch_busy = true;
  auto* services = st.services;
  auto* port = services->remote.load(std::memory_order_acquire);
  auto me = st.run_id;
  port->read(
      st.tenant, watch.run_id, watch.until_end,
      [services, me, watch](result<run_info> state) {
        auto& runs = services->runs_of(me);
        if (!state && state.error().code == errc::run_not_found) {
          run_info none;
          none.id = watch.run_id;
          runs.deliver(me, watched_atom::value, std::move(none), true);
        } else if (state && (!watch.until_end || is_terminal(state->status))) {
          runs.deliver(me, watched_atom::value, std::move(*state), false);
        } else {
          runs.deliver(me, watched_atom::value, watch.run_id, !state.ok());
        }
      });
}

// Reports the end of `watch.run_id` to this run, at once if it has ended
// (told by the run-event hub: subscribed before the state is read), or
// its state now for one that another node serves.
void watch_run(self_pointer self, const run_watch& watch) {
  auto& st = self->state;
  auto* services = st.services;
  const auto& run_id = watch.run_id;
  if (services->remote_for(run_id) != nullptr) {
    remote_watch(self, watch);
    return;
  }
  if (!watch.until_end) {
    // Asked of another node, whose shard this one serves now: read here.
    auto record = services->shard_of_run(run_id).store->get_run(run_id);
    if (!record) {
      self->send(self, watched_atom::value, run_id, true);  // ask again
    } else if (!*record || (*record)->tenant != st.tenant) {
      run_info none;
      none.id = run_id;
      self->send(self, watched_atom::value, std::move(none), true);
    } else {
      self->send(self, watched_atom::value, describe_run(**record), false);
    }
    return;
  }
  auto me = st.run_id;
  auto subscription = services->events.subscribe(
      run_id, services::run_events::until::ended,
      [services, me](const services::run_event& event) {
        services->runs_of(me).deliver(me, watched_atom::value, event.run,
                                      false);
      });
  // The engine saw it unfinished; if it ended since, no event will come.
  auto record = services->shard_of_run(run_id).store->get_run(run_id);
  if (record && *record && is_terminal((*record)->status)) {
    services->events.unsubscribe(run_id, subscription);
    self->send(self, watched_atom::value, describe_run(**record), false);
  }
}

// A message or update for the run. A key recorded before (in the store, by
// this run or, for an instance's stream, by an earlier run of it) is
// answered as it was first; a key of this activation, once its write is
// durable; anything else goes to the engine.
void handle_message(self_pointer self, message_request request,
                    const reply_once<message_receipt>& reply) {
  auto& st = self->state;
  if (!st.engine) {
    reply(make_error(errc::storage_error,
                     "run " + st.run_id +
                         " cannot be loaded right now; send the message "
                         "again with the same idempotency key"));
    return;
  }
  if (request.key.empty()) {
    st.engine->on_message(std::move(request), reply);
    return;
  }
  if (st.engine->answer_repeat(request, reply)) {
    return;
  }
  auto seen = st.home->store->get_resume(st.tenant, request.scope, request.key);
  if (!seen) {
    reply(seen.error());
    return;
  }
  if (!*seen) {
    st.engine->on_message(std::move(request), reply);
    return;
  }
  message_receipt receipt{(*seen)->owner_run, (*seen)->sequence};
  if (receipt.run_id != st.run_id || !request.update) {
    reply(std::move(receipt));
    return;
  }
  if (st.engine->finished()) {
    // An ended run's engine holds no history: the result is read from it.
    auto history = st.home->store->load_history(st.run_id);
    if (!history) {
      reply(history.error());
      return;
    }
    if (auto done = recorded_update_result(*history, receipt.sequence)) {
      receipt.completed = true;
      receipt.result = std::move(*done);
    } else if (request.wait_completed) {
      reply(make_error(errc::run_finished,
                       "run " + st.run_id +
                           " ended before completing update '" + request.key +
                           "'"));
      return;
    }
    reply(std::move(receipt));
    return;
  }
  st.engine->answer_recorded(request, std::move(receipt), reply);
}

void handle_query(self_pointer self, const query_request& request,
                  const reply_once<std::string>& reply) {
  auto& st = self->state;
  if (!st.engine) {
    reply(make_error(errc::storage_error,
                     "run " + st.run_id + " cannot be loaded right now"));
    return;
  }
  json args;
  try {
    args = decode_payload(request.args);
  } catch (const json::exception&) {
    reply(make_error(errc::invalid_argument, "the query's args do not decode"));
    return;
  }
  auto answer = st.engine->query(request.name, args);
  if (!answer) {
    reply(answer.error());
    return;
  }
  reply(encode_payload(*answer));
}

// The start token's actor held the token still for a continue-as-new: the
// end write settled (or the run ended otherwise), so it reads the token
// again, finding the successor as owner if that write landed.
void settle_hand_over(self_pointer self) {
  auto& st = self->state;
  if (!st.hand_over_held) {
    return;
  }
  st.hand_over_held = false;
  st.hand_over_in_write = false;
  auto address = std::move(st.hand_over_address);
  if (st.services->held.settle_release(address, false)) {
    st.services->tokens_of(address).deliver(address, reload_atom::value);
  }
}

// The end write that admitted a successor settled: it starts (or, when the
// outcome is unknown, activates from storage if it was admitted).
void start_successor(self_pointer self, bool ok) {
  auto& st = self->state;
  if (!st.successor) {
    return;
  }
  auto record = std::move(*st.successor);
  st.successor.reset();
  if (ok) {
    auto info = describe_run(record);
    services::activate_fresh(*st.services, {std::move(record), {}, info});
  } else {
    st.home->runs->activate(record.id);
  }
}

// What a child's start answered, as its parent's actor hears it.
std::function<void(result<run_info>)> child_answer(node* services,
                                                   std::string parent,
                                                   std::uint64_t call) {
  return
      [services, parent = std::move(parent), call](result<run_info> outcome) {
        child_started answer{call};
        if (outcome) {
          // Admitted durably; the parent has not recorded it yet.
          DURIN_TEST_KILL_POINT("run.after_child_admitted");
          answer.child_run_id = outcome->id;
        } else {
          const auto& why = outcome.error();
          answer.code = std::string(to_code(why.code));
          answer.message = why.message;
          answer.indefinite = why.code == errc::storage_error ||
                              why.code == errc::start_outcome_unknown ||
                              why.code == errc::shutting_down;
          if (why.code == errc::hook_conflict) {
            answer.owner_run_id = why.run_id;
          }
        }
        services->runs_of(parent).deliver(parent, child_atom::value,
                                          std::move(answer));
      };
}

// Starts a child run with the identity its parent recorded. A replay may
// send a start whose run was admitted before a crash: then that run is the
// answer (its start token refuses a second admission anyway). A child in a
// shard another node serves is started there, with the same identity.
void start_child(self_pointer self, const child_start& start) {
  auto& st = self->state;
  auto* services = st.services;
  auto parent = st.run_id;
  auto call = start.call;
  auto* port = services->remote_for(start.run_id);
  if (port == nullptr) {
    auto existing =
        services->shard_of_run(start.run_id).store->get_run(start.run_id);
    if (existing && *existing) {
      self->send(self, child_atom::value, child_started{call, start.run_id});
      return;
    }
    if (!existing) {
      child_started unknown{call};
      unknown.indefinite = true;
      self->send(self, child_atom::value, std::move(unknown));
      return;
    }
  }
  // The child's identity is durable; its start is not sent yet.
  DURIN_TEST_KILL_POINT("run.before_child_start");
  services::start_request request;
  request.flow = start.flow;
  request.input = start.input;
  request.options.tenant = st.tenant;
  request.options.instance_id = start.instance_id;
  request.options.command_id = start.command_id;
  request.options.memo = start.memo;
  request.options.search = start.search;
  request.run_id = start.run_id;
  request.parent_run_id = parent;
  request.parent_close = start.parent_close;
  auto answer = child_answer(services, parent, call);
  if (port != nullptr) {
    port->start(request, std::move(answer));
    return;
  }
  services::start_run(*services, std::move(request), std::move(answer));
}

// The run ended: its children whose parent_close says so end too
// (terminated or cancelled: see durin/run_handle.hpp). A crash before they
// hear it is covered by the children themselves, which look at their
// parent as they activate (end_if_orphaned).
void close_children(self_pointer self, const std::vector<child_to_close>& all) {
  auto& st = self->state;
  for (const auto& child : all) {
    cancel_request request{"the parent run " + st.run_id + " ended",
                           "parent-close:" + st.run_id,
                           child.parent_close == 1};
    if (auto* port = st.services->remote_for(child.run_id)) {
      // Not answered for certain: the child asks after its parent as it
      // activates (end_if_orphaned).
      port->cancel(st.tenant, child.run_id, request, [](result<run_info>) {});
      continue;
    }
    st.services->runs_of(child.run_id)
        .deliver(child.run_id, cancel_atom::value, std::move(request));
  }
}

// The child's parent ended: the child ends too (parent_close 1 terminates
// it, 2 cancels it).
void close_as_orphan(self_pointer self, const std::string& parent_run_id,
                     std::uint8_t parent_close) {
  auto& st = self->state;
  if (!st.engine || st.engine->finished()) {
    return;
  }
  st.engine->cancel(
      "the parent run " + parent_run_id + " ended",
      "parent-close:" + parent_run_id, [](result<run_info>) {},
      parent_close == 1);
}

// A child whose parent ended while no one could tell it (a crash between
// the parent's end and its notice, or a start still in flight as the
// parent ended) ends itself as it activates, unless abandoned. A parent
// that another node serves is asked there; its answer comes as a message.
void end_if_orphaned(self_pointer self, const std::string& parent_run_id,
                     std::uint8_t parent_close) {
  auto& st = self->state;
  if (parent_run_id.empty() || parent_close == 3 || !st.engine ||
      st.engine->finished()) {
    return;
  }
  if (auto* port = st.services->remote_for(parent_run_id)) {
    auto* services = st.services;
    auto me = st.run_id;
    port->read(
        st.tenant, parent_run_id, false,
        [services, me, parent_run_id, parent_close](result<run_info> parent) {
          if (services::has_ended(parent)) {
            services->runs_of(me).deliver(me, orphan_atom::value, parent_run_id,
                                          parent_close);
          }
        });
    return;
  }
  auto parent =
      st.services->shard_of_run(parent_run_id).store->get_run(parent_run_id);
  if (!parent || (*parent && !is_terminal((*parent)->status))) {
    return;
  }
  close_as_orphan(self, parent_run_id, parent_close);
}

// A write failed and may or may not have landed (or the flow cannot go on
// now): drop the engine and reload the truth from the store after a backoff.
void reload_later(self_pointer self) {
  auto& st = self->state;
  std::fprintf(stderr,
               "durin: run %s: reloading in %lld ms (a write failed, or a "
               "search attribute's type is being agreed)\n",
               st.run_id.c_str(), static_cast<long long>(st.reload_backoff_ms));
  st.engine.reset();
  st.reloading = true;
  self->delayed_send(self, std::chrono::milliseconds(st.reload_backoff_ms),
                     reload_atom::value);
  st.reload_backoff_ms =
      std::min(st.reload_backoff_ms * 2, reload_backoff_ms_max);
}

void carry_out(self_pointer self, engine_output& out);

// Carries out what the engine asked for, then looks whether to stop.
void drain(self_pointer self) {
  auto& st = self->state;
  ++st.messages;
  if (!st.engine) {
    maybe_leave(self);
    return;
  }
  if (st.engine->must_reload()) {
    reload_later(self);
    return;
  }
  if (st.admitting && st.admitting->submitted) {
    return;  // the engine's requests wait for the admission's write
  }
  auto out = st.engine->take_output();
  // Before the end can be read from the store (see held_tokens).
  for (auto& token : out.ending_tokens) {
    st.services->held.mark_ending(persistence::keys::token(st.tenant, token),
                                  st.run_id);
  }
  if (!out.ending_tokens.empty()) {
    st.ending_tokens = std::move(out.ending_tokens);
  }
  if (st.admitting) {
    // The first turn of a run not yet written: one write for both.
    auto& admission = *st.admitting;
    admission.submitted = true;
    admission.with_commit = out.commit.has_value();
    submit_commit(self, out.commit ? std::move(*out.commit) : commit_plan{});
    out.commit.reset();
    admission.held = std::move(out);
    return;
  }
  carry_out(self, out);
  maybe_leave(self);
}

// What the engine asked for in `out`, in order: answers, its commit, then
// the effects that may follow it at once.
void carry_out(self_pointer self, engine_output& out) {
  auto& st = self->state;
  for (auto& reply : out.replies) {
    reply();
  }
  if (out.commit) {
    submit_commit(self, std::move(*out.commit));
  }
  for (auto& dispatch : out.dispatches) {
    dispatch_step(self, std::move(dispatch));
  }
  for (auto& timer : out.timers) {
    st.home->timers->schedule(timer);
  }
  for (auto& message : out.token_messages) {
    send_to_token(self, std::move(message));
  }
  for (auto& watched : out.watches) {
    watch_run(self, watched);
  }
  for (auto& start : out.child_starts) {
    start_child(self, start);
  }
  for (auto call : out.child_retries) {
    self->delayed_send(self, std::chrono::milliseconds(st.child_backoff_ms),
                       child_atom::value, call);
    st.child_backoff_ms =
        std::min<std::int64_t>(st.child_backoff_ms * 2, reload_backoff_ms_max);
  }
  if (!out.hand_over.empty()) {
    st.hand_over_address = persistence::keys::token(st.tenant, out.hand_over);
    st.services->tokens_of(st.hand_over_address)
        .deliver(st.hand_over_address, hand_over_atom::value,
                 hand_over_request{st.run_id});
  }
  if (out.finished) {
    close_children(self, out.close_children);
  }
  if (st.engine->blocked() != st.blocked_reported) {
    st.blocked_reported = st.engine->blocked();
    if (st.blocked_reported) {
      std::fprintf(stderr, "durin: run %s is blocked: %s\n", st.run_id.c_str(),
                   st.engine->blocked_reason().c_str());
      st.home->runs->set_blocked(st.run_id, st.engine->blocked_reason());
    } else {
      st.home->runs->clear_blocked(st.run_id);
    }
  }
}

// The write in flight is durable: a run that now waits or ended tells the
// hub (only when someone listens: a later subscriber reads the store).
void publish_settled(self_pointer self) {
  auto& st = self->state;
  auto record = std::move(st.settling);
  st.settling.reset();
  if (!record || !st.services->events.listening(record->id)) {
    return;
  }
  st.services->events.publish({.run = describe_run(*record),
                               .ended = is_terminal(record->status),
                               .answer_kept = st.settling_kept_answer});
}

void activate(self_pointer self, std::optional<persistence::run_record> fresh,
              std::vector<persistence::event_record> first_events = {}) {
  auto& st = self->state;
  st.reloading = false;
  persistence::run_record record;
  std::vector<persistence::event_record> history;
  if (fresh) {
    record = std::move(*fresh);
    history = std::move(first_events);  // written with its admission
    st.tenant = record.tenant;
  } else {
    auto loaded = st.home->store->get_run(st.run_id);
    if (!loaded) {
      std::fprintf(stderr, "durin: run %s cannot be activated: %s\n",
                   st.run_id.c_str(), loaded.error().to_string().c_str());
      drain(self);
      return;
    }
    if (!*loaded) {
      drain(self);  // a stray message for a run that does not exist
      return;
    }
    record = std::move(**loaded);
    st.tenant = record.tenant;
    // A write reported failed may have landed: what the store holds now is
    // durable, and whoever waits for it must hear it from here.
    if (record.status == run_status::waiting || is_terminal(record.status)) {
      st.settling = record;
      st.settling_kept_answer = false;
      publish_settled(self);
    }
    if (!is_terminal(record.status)) {
      auto events = st.home->store->load_history(st.run_id);
      if (!events) {
        std::fprintf(stderr, "durin: run %s cannot be replayed: %s\n",
                     st.run_id.c_str(), events.error().to_string().c_str());
        drain(self);
        return;
      }
      history = std::move(*events);
    }
  }
  // Captures are pointers (the state outlives its engine), so each fits a
  // std::function's own buffer: no allocation per activation.
  auto* services = st.services;
  const auto* tenant = &st.tenant;
  const auto* state = &st;
  engine_environment env{
      &st.services->flows,
      st.services->clock.get(),
      st.services->options.passivate_after,
      st.services->options.retention_max.count(),
      [services, tenant](const std::string& run_id) {
        return run_state(*services, *tenant, run_id);
      },
      persistence::spec_version,
      st.services->options.history_events_max,
      st.services->options.history_bytes_max,
      [state](std::string_view token) {
        return state->services->map.of_token(persistence::keys::token(
                   state->tenant, token)) == state->home->index;
      },
      [services, tenant](const std::string& instance_id,
                         const std::string& command_id) {
        services::start_request start;
        start.options.tenant = *tenant;
        start.options.instance_id = instance_id;
        start.options.command_id = command_id;
        return services::draw_run_id(*services, start);
      },
      [state] { return state->services->new_run_id(state->home->index); },
      [services, tenant](const search_attributes& attributes) {
        return services->search.claim(*tenant, attributes);
      }};
  auto parent_run_id = record.parent_run_id;
  auto parent_close = record.parent_close;
  st.engine = std::make_unique<run_engine>(std::move(env), std::move(record),
                                           std::move(history));
  st.engine->start();
  end_if_orphaned(self, parent_run_id, parent_close);
  // A timer that fired while no engine listened would be lost otherwise;
  // firing twice is harmless.
  if (auto timer = st.engine->waiting_timer()) {
    st.home->timers->schedule(*timer);
  }
  drain(self);
}

// Starts a run admitted just now; `admitted`, when set, is answered once the
// run's first write (which carries its admission) is durable.
// `run` is the message's own (CAF copies a shared one on mutable access):
// its record and history move into the engine.
void activate_fresh(self_pointer self, fresh_run& run,
                    std::optional<reply_once<run_info>> admitted) {
  auto& st = self->state;
  if (st.engine) {
    if (admitted) {
      (*admitted)(make_error(errc::internal,
                             "run " + run.record.id + " is active already"));
    }
    return;
  }
  if (run.answer.when_settled && run.answer.key) {
    st.settle_key = run.answer.key;
  }
  if (admitted) {
    st.admitting = std::make_unique<run_actor_state::unwritten_admission>(
        run.record, run.answer, std::move(admitted), run.info);
  }
  activate(self, std::move(run.record), std::move(run.history));
}

run_actor::behavior_type run_actor_behavior(self_pointer self, shard* home,
                                            std::string run_id) {
  self->state.services = home->owner;
  self->state.home = home;
  self->state.run_id = std::move(run_id);
  return {
      // Activation happens once per actor: a second activate (a recovery
      // racing a message that spawned the actor) must not replace the
      // engine while its write is in flight.
      [self](activate_atom) {
        if (!self->state.engine && !self->state.reloading) {
          activate(self, std::nullopt);
        }
      },
      [self](activate_atom, fresh_run& run) {
        activate_fresh(self, run, std::nullopt);
      },
      [self](admit_atom,
             fresh_run& run) -> caf::typed_response_promise<run_info> {
        auto promise = self->make_response_promise<run_info>();
        reply_once<run_info> admitted(
            promise, make_error(errc::storage_error,
                                "the admission of run " + run.record.id +
                                    " may or may not be durable"));
        activate_fresh(self, run, admitted);
        return promise;
      },
      [self](committed_atom, const status& outcome) {
        auto& st = self->state;
        std::unique_ptr<run_actor_state::unwritten_admission> admission;
        if (st.admitting && st.admitting->submitted) {
          admission = std::move(st.admitting);
          if (outcome) {
            (*admission->admitted)(admission->info);
          } else {
            (*admission->admitted)(make_error(
                errc::storage_error,
                "the admission of run " + st.run_id +
                    " may or may not be durable: " + outcome.error().message));
          }
        }
        settle_releases(self, outcome.ok());
        if (st.successor) {
          DURIN_TEST_KILL_POINT("run.after_continue_write");
        }
        start_successor(self, outcome.ok());
        if (st.hand_over_in_write) {
          settle_hand_over(self);
        }
        if (outcome) {
          publish_settled(self);  // at most one write in flight
        } else {
          st.settling.reset();
        }
        if (admission && outcome && st.engine) {
          carry_out(self, admission->held);  // as if it followed the write
        }
        if (st.engine && (!admission || admission->with_commit)) {
          st.engine->on_committed(outcome);
        } else if (st.engine && !outcome) {
          reload_later(self);  // the run may not exist: ask the store
          return;
        }
        drain(self);
      },
      [self](step_done_atom, const step_report& report)
          -> caf::typed_response_promise<report_answer> {
        auto promise = self->make_response_promise<report_answer>();
        // Only a reporter that asked is told (the in-node path does not); a
        // dropped answer leaves the report indefinite to it.
        std::function<void(report_answer)> reply;
        if (promise.pending()) {
          reply_once<report_answer> once(
              promise,
              make_error(errc::storage_error, "the outcome was not confirmed"));
          reply = [once](report_answer answer) { once(std::move(answer)); };
        }
        if (self->state.engine) {
          self->state.engine->on_step_outcome(report.call, report.attempt_id,
                                              report.outcome, reply);
        } else if (reply) {
          reply(report_answer{false, "stale_attempt"});
        }
        drain(self);
        return promise;
      },
      [self](timer_atom, const persistence::timer_record& timer) {
        if (self->state.engine) {
          self->state.engine->on_timer(timer);
        }
        drain(self);
      },
      [self](cancel_atom, const cancel_request& request)
          -> caf::typed_response_promise<run_info> {
        auto promise = self->make_response_promise<run_info>();
        reply_once<run_info> reply(
            promise,
            make_error(errc::storage_error,
                       "the cancel of run " + self->state.run_id +
                           " was not confirmed (the run reloads after a "
                           "failed write); it may still apply"));
        if (self->state.engine) {
          self->state.engine->cancel(request.reason, request.command_id, reply,
                                     request.terminate);
          // Reports of the run's attempt are refused run_cancelled from now.
          self->state.services->tasks->cancel_run(self->state.run_id);
        } else {
          reply(
              make_error(errc::storage_error,
                         "run " + self->state.run_id +
                             " cannot be loaded right now; retry the cancel"));
        }
        drain(self);
        return promise;
      },
      [self](message_atom, message_request& request)
          -> caf::typed_response_promise<message_receipt> {
        auto promise = self->make_response_promise<message_receipt>();
        reply_once<message_receipt> reply(
            promise,
            make_error(errc::storage_error,
                       "the message to run " + self->state.run_id +
                           " was not confirmed (the run reloads after a "
                           "failed write); send it again with the same "
                           "idempotency key"));
        handle_message(self, std::move(request), reply);
        drain(self);
        return promise;
      },
      [self](query_atom, const query_request& request)
          -> caf::typed_response_promise<std::string> {
        auto promise = self->make_response_promise<std::string>();
        reply_once<std::string> reply(
            promise, make_error(errc::storage_error, "the query of run " +
                                                         self->state.run_id +
                                                         " was not answered"));
        handle_query(self, request, reply);
        drain(self);
        return promise;
      },
      [self](claimed_atom, const claim_outcome& outcome) {
        if (self->state.engine) {
          self->state.engine->on_claim_outcome(outcome);
        }
        drain(self);
      },
      [self](payload_atom, const hook_delivery& delivery) {
        if (self->state.engine) {
          self->state.engine->on_hook_payload(delivery);
        }
        drain(self);
      },
      [self](lost_atom, const hook_loss& loss) {
        if (self->state.engine) {
          self->state.engine->on_hook_lost(loss);
        }
        drain(self);
      },
      [self](hook_again_atom) {
        auto& st = self->state;
        st.hook_again_armed = false;
        for (auto& message : remote_hook_requests(self)) {
          send_to_token(self, std::move(message));  // arms the next one
        }
        maybe_leave(self);
      },
      [self](watched_atom, const run_info& run, bool not_found) {
        self->state.remote_watch_busy = false;
        if (self->state.engine) {
          auto state = not_found ? json{{"id", run.id}, {"status", "not-found"}}
                                 : run_state_of(run);
          self->state.engine->on_watched_run(run.id, state);
        }
        drain(self);
      },
      [self](watched_atom, const std::string& run_id, bool pause) {
        // A remote watch to ask again: after a pause when the last ask had
        // no answer for certain.
        auto& st = self->state;
        if (pause) {
          self->delayed_send(self, remote_watch_pause, watched_atom::value,
                             run_id, false);
          return;
        }
        st.remote_watch_busy = false;
        if (st.engine) {
          if (auto watch = st.engine->pending_watch();
              watch && watch->run_id == run_id) {
            watch_run(self, *watch);  // its shard may be served here now
          }
        }
      },
      [self](orphan_atom, const std::string& parent_run_id,
             std::uint8_t parent_close) {
        close_as_orphan(self, parent_run_id, parent_close);
        drain(self);
      },
      [self](child_atom, const child_started& started) {
        if (!started.indefinite) {
          self->state.child_backoff_ms = 100;
        }
        if (self->state.engine) {
          self->state.engine->on_child_started(started);
        }
        drain(self);
      },
      [self](child_atom, std::uint64_t call) {
        if (self->state.engine) {
          self->state.engine->retry_child(call);
        }
        drain(self);
      },
      [self](hand_over_atom, const hand_over_ready& ready) {
        auto& st = self->state;
        if (ready.ok) {
          st.hand_over_held = true;
          st.hand_over_address =
              persistence::keys::token(st.tenant, ready.token);
        }
        if (!st.engine || !st.engine->on_hand_over(ready)) {
          settle_hand_over(self);  // nothing will write it now
        }
        drain(self);
      },
      [self](reload_atom) {
        if (self->state.reloading) {
          activate(self, std::nullopt);
        }
      },
      [self](linger_atom, std::uint64_t seen) {
        auto& st = self->state;
        st.linger_armed = false;
        maybe_leave(self, seen == st.messages);
      },
  };
}

}  // namespace

run_actor spawn_run_actor(caf::actor_system& system, shard& home,
                          const std::string& run_id) {
  return system.spawn(run_actor_behavior, &home, run_id);
}

}  // namespace durin::actors
