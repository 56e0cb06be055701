#include "actors/token_actor.hpp"

#include "actors/identity.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <cstdio>
#include <deque>
#include <type_traits>

#include "actors/answers.hpp"
#include "actors/messages.hpp"
#include "actors/run_engine.hpp"
#include "persistence/assert.hpp"
#include "persistence/keys.hpp"
#include "persistence/test_points.hpp"
#include "services/hook_mail.hpp"
#include "services/node.hpp"
#include "services/start.hpp"

namespace durin::actors {

namespace {

using persistence::token_record;
using persistence::token_state;

// Resume writes of one token in flight at once (group commit merges them).
constexpr std::size_t pipelined_writes_max = 256;
// Payloads handed to a subscribing run in one go; it asks again for more.
constexpr std::size_t subscription_batch_max = 1000;

struct token_actor_state {
  node* services = nullptr;
  shard* home = nullptr;  // the shard the token lives in
  std::string address;
  std::string tenant;
  std::string token;
  bool loaded = false;
  std::optional<token_record> record;
  std::size_t in_flight = 0;  // writes not yet answered by the committer
  // What to do once each write in flight is durable or failed, in
  // submission order (the committer answers in that order), by ticket.
  struct continuation {
    std::uint64_t ticket = 0;
    std::function<void(bool)> then;
  };
  std::deque<continuation> committing;
  std::uint64_t next_ticket = 1;
  // Writes in flight that may change the owner; while there are any, the
  // shared held_tokens entry stays erased.
  std::size_t owner_writes = 0;
  // Requests in arrival order; `pipelined` ones (resumes without a resume
  // id) may go while other resumes' writes are in flight: they only append
  // payloads, and the committer keeps their writes in order.
  struct request {
    bool pipelined = false;
    std::function<void()> run;
  };
  std::deque<request> waiting;
  std::uint64_t requests_served = 0;  // tells a lingering actor it was used
  bool linger_armed = false;
  static inline const char* name = "durin.token";
};

using self_pointer = token_actor::stateful_pointer<token_actor_state>;

std::int64_t now_ms(self_pointer self) {
  return self->state.services->clock->now_ms();
}

bool is_free(self_pointer self) {
  auto& record = self->state.record;
  return !record || (record->state == token_state::retained &&
                     record->retain_until_ms <= now_ms(self));
}

void run_waiting(self_pointer self);

// Shows the durable owner (if any) in the node's held_tokens, or nothing
// while a write that may change it is in flight or the state is unknown.
void publish(self_pointer self) {
  auto& st = self->state;
  auto& held = st.services->held;
  if (!st.loaded || st.owner_writes > 0) {
    held.erase(st.address);
    return;
  }
  auto& record = st.record;
  if (record && record->state == token_state::active) {
    held.set(st.address, record->owner_run,
             services::held_tokens::while_active);
  } else if (record && record->retain_until_ms > now_ms(self)) {
    held.set(st.address, record->owner_run, record->retain_until_ms);
  } else {
    held.erase(st.address);
  }
}

// Writes `batch`; `then(ok)` runs on this actor once it is durable or
// failed. While in flight, other requests wait (but pipelined resumes). A
// failed write leaves the token's state unknown: it is loaded again before
// the next request. Only a write that `keeps_owner` (a payload append)
// leaves the token's held_tokens entry in place meanwhile.
void write(self_pointer self, persistence::write_batch batch,
           std::function<void(bool)> then, bool keeps_owner = false) {
  auto& st = self->state;
  ++st.in_flight;
  if (!keeps_owner) {
    ++st.owner_writes;
    st.services->held.erase(st.address);
  }
  auto ticket = st.next_ticket++;
  st.committing.push_back(
      {ticket, [self, keeps_owner, then = std::move(then)](bool ok) {
         if (!keeps_owner) {
           DURIN_ASSERT(self->state.owner_writes > 0,
                        "an owner write ends that was never counted");
           --self->state.owner_writes;
         }
         then(ok);
       }});
  auto handle = caf::actor_cast<token_actor>(self);
  st.home->committer->submit(
      std::move(batch), [handle, ticket](const status& outcome) {
        caf::anon_send(handle, committed_atom::value, outcome, ticket);
      });
}

// The write with `ticket` is durable (`outcome` ok) or failed: its
// continuation runs, then whatever waited for it.
void on_committed(self_pointer self, const status& outcome,
                  std::uint64_t ticket) {
  auto& st = self->state;
  DURIN_ASSERT(!st.committing.empty() && st.committing.front().ticket == ticket,
               "the committer answers a token's writes in submission order");
  auto then = std::move(st.committing.front().then);
  st.committing.pop_front();
  --st.in_flight;
  if (!outcome.ok()) {
    st.loaded = false;  // indefinite: read the truth again
  }
  then(outcome.ok());
  publish(self);
  run_waiting(self);
}

// Deletes the token's payloads and resume ids. A token that never received
// a payload has none (resume ids come with payloads, and the inbox is dropped
// whenever the sequence restarts), so it writes no range tombstone, which
// RocksDB would otherwise keep consulting on every inbox read.
void drop_inbox(persistence::write_batch& batch, const token_record& record) {
  if (record.next_payload > 1) {
    batch.delete_inbox(record.tenant, record.token);
  }
}

// Releases the token: no owner, no payloads, no retention.
void release(persistence::write_batch& batch, const token_record& record) {
  batch.delete_token(record.tenant, record.token);
  drop_inbox(batch, record);
  if (record.webhook) {
    batch.delete_webhook_tenant(record.token);
  }
}

// A run another node serves gets the message as hook mail
// (services/hook_mail.hpp); the continue-as-new hand-over never travels:
// a start token lives in its run's shard.
template <class Atom, class Message>
void deliver_to_run(self_pointer self, const std::string& run_id, Atom atom,
                    Message message) {
  auto& st = self->state;
  if constexpr (!std::is_same_v<Message, hand_over_ready>) {
    if (auto* port = st.services->remote_for(run_id)) {
      using kind = services::hook_mail::kind;
      constexpr auto what =
          std::is_same_v<Message, claim_outcome>   ? kind::claimed
          : std::is_same_v<Message, hook_delivery> ? kind::payload
                                                   : kind::lost;
      if (what == kind::payload &&
          DURIN_TEST_FAIL_POINT("token.remote_payload_push")) {
        return;  // as if lost with a node: the run finds it by a scan
      }
      port->post(services::make_hook_mail(what, st.tenant, run_id, message));
      return;
    }
  }
  st.services->runs_of(run_id).deliver(run_id, atom, std::move(message));
}

// An owner run another node serves is asked whether it ended (the owner's
// end notice may have been lost with its node): its end comes back as an
// owner_end message, applied if it still owns the token then.
void ask_remote_owner(self_pointer self, const std::string& owner_run) {
  auto& st = self->state;
  auto* port = st.services->remote_for(owner_run);
  if (port == nullptr) {
    return;
  }
  auto me = caf::actor_cast<token_actor>(self);
  port->read(
      st.tenant, owner_run, false, [me, owner_run](result<run_info> run) {
        if (services::has_ended(run)) {
          caf::anon_send(me, owner_end_atom::value, owner_notice{owner_run, 0});
        }
      });
}

// The owner `owner_run` ended at `at_ms`: keep the token for its
// retention, or free it.
void apply_owner_end(self_pointer self, const std::string& owner_run,
                     std::int64_t at_ms) {
  auto& st = self->state;
  DURIN_ASSERT(st.record && st.record->state == token_state::active &&
                   st.record->owner_run == owner_run,
               "only the token's active owner ends its ownership");
  auto record = *st.record;
  auto batch = st.home->store->batch();
  if (record.retain_until_ms > at_ms && record.retain_until_ms > now_ms(self)) {
    record.state = token_state::retained;
    batch.put_token(record);
    drop_inbox(batch, record);
    persistence::timer_record timer{
        .due_ms = record.retain_until_ms,
        .run_id = st.address,
        .call = 0,
        .kind = persistence::timer_kind::token_retention};
    batch.put_timer(timer);
    st.record = record;
    write(self, std::move(batch), [self, timer](bool ok) {
      if (ok) {
        self->state.home->timers->schedule(timer);
      }
    });
  } else {
    release(batch, record);
    st.record.reset();
    write(self, std::move(batch), [](bool) {});
  }
}

// Loads the record on first use; applies the end of an owner that ended
// without a notice. True when the state is ready for a request.
bool ensure_loaded(self_pointer self) {
  auto& st = self->state;
  if (st.loaded) {
    return true;
  }
  auto loaded = st.home->store->get_token(st.tenant, st.token);
  if (!loaded) {
    std::fprintf(stderr, "durin: token %s: %s\n", st.token.c_str(),
                 loaded.error().to_string().c_str());
    return false;
  }
  st.loaded = true;
  st.record = std::move(*loaded);
  if (st.record && st.record->state == token_state::active &&
      st.services->remote_for(st.record->owner_run) != nullptr) {
    ask_remote_owner(self, st.record->owner_run);
  } else if (st.record && st.record->state == token_state::active) {
    auto owner = st.services->shard_of_run(st.record->owner_run)
                     .store->get_run(st.record->owner_run);
    if (owner && (!*owner || is_terminal((*owner)->status))) {
      apply_owner_end(self, st.record->owner_run,
                      *owner ? (*owner)->completed_at_ms : 0);
      return false;  // the request waits for that write
    }
  }
  publish(self);
  return true;
}

// Runs `request` now, or once the writes in flight allow it.
void serve(self_pointer self, std::function<void()> request,
           bool pipelined = false) {
  auto& st = self->state;
  ++st.requests_served;
  st.waiting.push_back({pipelined, std::move(request)});
  run_waiting(self);
}

// Passivates an idle actor once it has lingered unused: `lingered_since` is
// the requests_served count when the linger began.
void arm_linger(self_pointer self) {
  auto& st = self->state;
  if (!st.linger_armed) {
    st.linger_armed = true;
    st.services->lingering->add(caf::actor_cast<token_actor>(self),
                                st.requests_served);
  }
}

// An idle token whose active owner can free it with a plain delete lets the
// owner do that in the write recording its end (held_tokens).
void offer_release(self_pointer self) {
  auto& st = self->state;
  auto& record = st.record;
  if (st.loaded && st.owner_writes == 0 && record &&
      record->state == token_state::active && !record->webhook &&
      record->next_payload == 1 && record->retain_until_ms <= now_ms(self)) {
    st.services->held.offer_release(st.address, record->owner_run);
  }
}

// Before an answer that lets the owner run on (admitted, claimed): the
// owner may end within microseconds, and can release the token in its end
// write only if the offer is already there.
void publish_and_offer(self_pointer self) {
  auto& st = self->state;
  publish(self);
  if (st.in_flight == 0 && st.waiting.empty()) {
    offer_release(self);
  }
}

void maybe_leave(self_pointer self,
                 std::optional<std::uint64_t> lingered_since = std::nullopt) {
  auto& st = self->state;
  if (st.in_flight > 0 || !st.waiting.empty()) {
    return;
  }
  if (!lingered_since || *lingered_since != st.requests_served) {
    offer_release(self);
    arm_linger(self);
    return;
  }
  DURIN_ASSERT(st.committing.empty(), "a token passivates with no write left");
  auto* actor = self;
  // The entry goes with the actor, under the directory's lock, before a new
  // actor for the token can exist and publish its own. An owner's release
  // in flight keeps the actor (and its entry) until it is settled.
  if (st.home->tokens->try_passivate(st.address, self->address(), [actor] {
        return actor->mailbox().empty() &&
               actor->state.services->held.erase_unless_releasing(
                   actor->state.address);
      })) {
    self->quit();
    return;
  }
  arm_linger(self);
}

void run_waiting(self_pointer self) {
  auto& st = self->state;
  while (!st.waiting.empty()) {
    bool may_run =
        st.in_flight == 0 || (st.waiting.front().pipelined && st.loaded &&
                              st.in_flight < pipelined_writes_max);
    if (!may_run) {
      break;
    }
    switch (st.services->held.begin_request(st.address)) {
      case services::held_tokens::release_state::none:
        break;
      case services::held_tokens::release_state::in_flight:
        return;  // the owner wakes this actor once its end write settles
      case services::held_tokens::release_state::done:
        st.record.reset();  // the owner's end write deleted the token
        break;
      case services::held_tokens::release_state::unknown:
        st.loaded = false;  // that write may or may not have landed
        break;
    }
    if (!ensure_loaded(self)) {
      if (st.in_flight == 0) {
        // The store could not be read: answer nothing now, try later.
        self->delayed_send(self, std::chrono::milliseconds(100),
                           reload_atom::value);
        return;
      }
      continue;  // an owner's end is being written first
    }
    auto next = std::move(st.waiting.front().run);
    st.waiting.pop_front();
    next();
  }
  maybe_leave(self);
}

// An active owner marked ending (held_tokens) may have ended durably while
// its notice is still on the way: then its end is applied now, so that a
// request made after someone saw the end finds the token as the end leaves
// it. True when that write is in flight (the request waits for it).
bool settle_ended_owner(self_pointer self) {
  auto& st = self->state;
  auto& record = st.record;
  if (!record || record->state != token_state::active ||
      !st.services->held.is_ending(st.address, record->owner_run)) {
    return false;
  }
  auto owner = st.services->shard_of_run(record->owner_run)
                   .store->get_run(record->owner_run);
  if (!owner || (*owner && !is_terminal((*owner)->status))) {
    return false;  // not ended yet (or unreadable): the owner still holds
  }
  apply_owner_end(self, record->owner_run,
                  *owner ? (*owner)->completed_at_ms : 0);
  return true;
}

// Puts `request` back at the head of the queue, behind the write in flight.
void retry_first(self_pointer self, std::function<void()> request) {
  self->state.waiting.push_front({false, std::move(request)});
}

// Makes `next` the token's record and its owner the only one: granted only
// when the token is free, or to a force-claim taking it over (whose loss the
// previous owner is told), never beside another active owner.
void grant(self_pointer self, const token_record& next) {
  auto& record = self->state.record;
  DURIN_ASSERT(next.state == token_state::active && !next.owner_run.empty(),
               "a token is granted to one active owner");
  DURIN_ASSERT(is_free(self) || next.previous_owner == record->owner_run ||
                   record->owner_run == next.owner_run ||
                   record->state == token_state::retained,
               "an active owner loses its token only to a force-claim");
  record = next;
}

hook_info describe(const token_record& record) {
  hook_info info;
  info.token = record.token;
  info.owner_run_id = record.owner_run;
  try {
    info.metadata = decode_payload(record.metadata);
  } catch (const json::exception&) {
    info.metadata = nullptr;
  }
  info.created_at_ms = record.created_at_ms;
  info.state = record.state == token_state::active ? "active" : "retained";
  info.retain_until_ms = record.retain_until_ms;
  return info;
}

void handle_start(self_pointer self, start_claim& claim,
                  const reply_once<run_info>& reply) {
  auto& st = self->state;
  if (!is_free(self) && settle_ended_owner(self)) {
    retry_first(self, [self, claim, reply]() mutable {
      handle_start(self, claim, reply);
    });
    return;
  }
  if (!is_free(self)) {
    const auto& command = claim.token.owner_command;
    if (!command.empty() && command == st.record->owner_command) {
      // A repeat of the start that admitted the owner: its outcome again.
      auto owner = st.services->shard_of_run(st.record->owner_run)
                       .store->get_run(st.record->owner_run);
      if (owner && *owner) {
        reply(describe_run(**owner));
        return;
      }
    }
    reply(token_held_error(st.token, st.record->owner_run));
    return;
  }
  DURIN_ASSERT(claim.token.owner_run == claim.run.id &&
                   claim.token.state == token_state::active,
               "a start claims its token for the run it admits");
  if (!claim.message_key.empty()) {
    // A message-with-start whose message an earlier run of the instance
    // recorded (its answer was lost): that run, and nothing new. Read while
    // the token is free, so that run's end, and so its message, is durable.
    auto seen = st.home->store->get_resume(st.tenant, claim.message_scope,
                                           claim.message_key);
    if (!seen) {
      reply(seen.error());
      return;
    }
    if (*seen) {
      auto first = st.services->shard_of_run((*seen)->owner_run)
                       .store->get_run((*seen)->owner_run);
      if (!first || !*first) {
        reply(first ? make_error(errc::internal, "a message's run is gone")
                    : first.error());
        return;
      }
      reply(describe_run(**first));
      return;
    }
  }
  auto batch = st.home->store->batch();
  if (st.record) {
    release(batch, *st.record);  // a retention that has passed
  }
  auto info = describe_run(claim.run);
  add_admission(batch, {.run = claim.run,
                        .info = info,
                        .token = &claim.token,
                        .answer = &claim.answer,
                        .now_ms = st.services->clock->now_ms()});
  for (std::size_t i = 0; i < claim.first_events.size(); ++i) {
    batch.put_event(claim.run.id, i + 1, claim.first_events[i]);
  }
  if (!claim.message_key.empty()) {
    batch.put_resume(st.tenant, claim.message_scope, claim.message_key,
                     {1, claim.run.id});
  }
  grant(self, claim.token);
  // The run starts from here once its admission is durable: its record is
  // the claim's, so the caller's callback keeps no copy of it.
  fresh_run admitted{std::move(claim.run),
                     std::move(claim.answer),
                     {},
                     std::move(claim.first_events)};
  write(self, std::move(batch),
        [self, reply, info = std::move(info),
         admitted = std::move(admitted)](bool ok) mutable {
          if (ok) {
            publish_and_offer(self);
            services::activate_fresh(*self->state.services,
                                     std::move(admitted));
            reply(std::move(info));
            return;
          }
          error unknown = make_error(
              errc::start_outcome_unknown,
              "the start of run " + info.id +
                  " may or may not be admitted; retry with the same token");
          unknown.run_id = info.id;
          reply(std::move(unknown));
        });
}

// A longer retention extends the one held, never shortens it; `done` once
// that is durable.
void extend_retention(self_pointer self, std::int64_t retain_until_ms,
                      std::function<void(bool)> done) {
  auto& st = self->state;
  if (retain_until_ms <= st.record->retain_until_ms) {
    done(true);
    return;
  }
  st.record->retain_until_ms = retain_until_ms;
  auto batch = st.home->store->batch();
  batch.put_token(*st.record);
  write(self, std::move(batch), std::move(done));
}

// The token's record once `claim` holds it (before what a take-over keeps).
token_record claimed_record(self_pointer self, const hook_claim& claim) {
  token_record next;
  next.tenant = self->state.tenant;
  next.token = self->state.token;
  next.owner_run = claim.run_id;
  next.owner_call = claim.call;
  next.webhook = claim.webhook;
  next.created_at_ms = now_ms(self);
  next.retain_until_ms = claim.retain_until_ms;
  next.metadata = claim.metadata;
  next.owner_spec_version = claim.spec_version;
  return next;
}

void handle_claim(self_pointer self, const hook_claim& claim) {
  auto& st = self->state;
  auto answer = [self, claim](bool owned, std::string owner) {
    deliver_to_run(
        self, claim.run_id, claimed_atom::value,
        claim_outcome{self->state.token, claim.call, owned, std::move(owner)});
  };
  auto& record = st.record;
  if (record && record->state == token_state::active &&
      record->owner_run == claim.run_id) {
    // Claimed again (a replay, or the run's own start token): idempotent.
    extend_retention(self, claim.retain_until_ms,
                     [answer](bool ok) { answer(ok, ok ? "" : "unknown"); });
    return;
  }
  if (!is_free(self) && settle_ended_owner(self)) {
    retry_first(self, [self, claim] { handle_claim(self, claim); });
    return;
  }
  bool free = is_free(self);
  bool take_over =
      !free && claim.force &&
      (record->state == token_state::retained ||
       record->owner_spec_version >= persistence::force_claim_min_spec_version);
  if (!free && !take_over) {
    answer(false, record->owner_run);
    return;
  }
  auto next = claimed_record(self, claim);
  auto batch = st.home->store->batch();
  std::optional<hook_loss> loss;
  if (take_over) {
    next.next_payload = record->next_payload;
    if (record->state == token_state::active) {
      next.previous_owner = record->owner_run;
      next.previous_owner_last_payload = record->next_payload - 1;
      loss =
          hook_loss{st.token, claim.run_id, next.previous_owner_last_payload};
    }
  } else if (record) {
    release(batch, *record);
  }
  batch.put_token(next);
  if (next.webhook) {
    // The gateway finds a webhook's tenant by its token alone.
    batch.put_webhook_tenant(next.token, next.tenant);
  }
  auto previous = record ? record->owner_run : std::string();
  DURIN_ASSERT(free || take_over,
               "a claim is granted only on a free token, or by force");
  grant(self, next);
  write(self, std::move(batch), [self, answer, loss, previous](bool ok) {
    if (ok) {
      publish_and_offer(self);
    }
    answer(ok, ok ? "" : "unknown");
    if (ok && loss) {
      deliver_to_run(self, previous, lost_atom::value, *loss);
    }
  });
}

void handle_resume(self_pointer self, resume_request& request,
                   const reply_once<std::string>& reply) {
  auto& st = self->state;
  if (!request.resume_id.empty()) {
    auto seen =
        st.home->store->get_resume(st.tenant, st.token, request.resume_id);
    if (!seen) {
      reply(seen.error());
      return;
    }
    if (*seen) {
      reply((*seen)->owner_run);
      return;
    }
  }
  auto& record = st.record;
  if (!record || record->state != token_state::active) {
    reply(make_error(
        errc::hook_not_found,
        "no running run owns " + describe_token(st.token) +
            (record ? " (run " + record->owner_run + " ended and retains it)"
                    : "")));
    return;
  }
  persistence::payload_record payload{record->next_payload, record->owner_run,
                                      std::move(request.payload),
                                      request.resume_id, now_ms(self)};
  record->next_payload += 1;
  auto batch = st.home->store->batch();
  batch.put_payload(st.tenant, st.token, payload);
  batch.put_token(*record);
  if (!request.resume_id.empty()) {
    batch.put_resume(st.tenant, st.token, request.resume_id,
                     {payload.sequence, payload.owner_run});
  }
  auto delivered = [self, reply, payload](bool ok) {
    if (!ok) {
      reply(make_error(errc::storage_error,
                       "the payload may or may not be recorded; retry with "
                       "the same resume id"));
      return;
    }
    reply(payload.owner_run);
    deliver_to_run(
        self, payload.owner_run, payload_atom::value,
        hook_delivery{self->state.token, payload.sequence, payload.payload});
  };
  write(self, std::move(batch), std::move(delivered), true);
}

void handle_subscribe(self_pointer self, const subscription& request) {
  auto& st = self->state;
  auto payloads = st.home->store->load_payloads(
      st.tenant, st.token, request.from_sequence, subscription_batch_max);
  if (!payloads) {
    std::fprintf(stderr, "durin: token %s: %s\n", st.token.c_str(),
                 payloads.error().to_string().c_str());
    return;
  }
  for (auto& payload : *payloads) {
    if (payload.owner_run == request.run_id) {
      deliver_to_run(self, request.run_id, payload_atom::value,
                     hook_delivery{st.token, payload.sequence,
                                   std::move(payload.payload), true});
    }
  }
  auto& record = st.record;
  if (record && record->previous_owner == request.run_id) {
    deliver_to_run(self, request.run_id, lost_atom::value,
                   hook_loss{st.token, record->owner_run,
                             record->previous_owner_last_payload});
  }
}

void handle_dispose(self_pointer self, const owner_notice& notice) {
  auto& st = self->state;
  if (!st.record || st.record->state != token_state::active ||
      st.record->owner_run != notice.run_id) {
    return;  // not (or no longer) its token
  }
  DURIN_ASSERT(st.record->owner_run == notice.run_id,
               "only the token's owner disposes it");
  auto batch = st.home->store->batch();
  release(batch, *st.record);
  st.record.reset();
  write(self, std::move(batch), [](bool) {});
}

void handle_owner_end(self_pointer self, const owner_notice& notice) {
  auto& st = self->state;
  // The mark goes only once the entry is gone, so no start sees the ended
  // owner in between; the entry comes back (if still held) from publish.
  st.services->held.erase(st.address);
  st.services->held.clear_ending(st.address, notice.run_id);
  if (!st.record || st.record->state != token_state::active ||
      st.record->owner_run != notice.run_id) {
    publish(self);
    return;
  }
  apply_owner_end(self, notice.run_id, notice.at_ms);
}

// The owner continues as new: with nothing in flight (serve runs this only
// then), the actor holds still until the owner's end write, which names the
// successor as owner, settles; then it reads the token again.
void handle_hand_over(self_pointer self, const hand_over_request& request) {
  auto& st = self->state;
  hand_over_ready answer{st.token, false, {}};
  if (st.record && st.record->state == token_state::active &&
      st.record->owner_run == request.run_id &&
      st.services->held.hold_for_hand_over(st.address, request.run_id)) {
    answer.ok = true;
    answer.record = *st.record;
  }
  deliver_to_run(self, request.run_id, hand_over_atom::value,
                 std::move(answer));
}

void handle_retention(self_pointer self) {
  auto& st = self->state;
  if (st.record && st.record->state == token_state::retained &&
      st.record->retain_until_ms <= now_ms(self)) {
    DURIN_ASSERT(is_free(self), "a retention ends only with no active owner");
    auto batch = st.home->store->batch();
    release(batch, *st.record);
    st.record.reset();
    write(self, std::move(batch), [](bool) {});
  }
}

token_actor::behavior_type token_actor_behavior(self_pointer self, shard* home,
                                                std::string address) {
  auto& st = self->state;
  st.services = home->owner;
  st.home = home;
  st.address = address;
  auto decoded = persistence::keys::decode_token(address);
  if (decoded) {
    st.tenant = decoded->tenant;
    st.token = decoded->token;
  }
  return {
      [self](committed_atom, const status& outcome, std::uint64_t ticket) {
        on_committed(self, outcome, ticket);
      },
      [self](reload_atom) { run_waiting(self); },
      [self](linger_atom, std::uint64_t since) {
        self->state.linger_armed = false;
        maybe_leave(self, since);
      },
      [](activate_atom) {},
      [self](start_claim_atom,
             start_claim& claim) -> caf::typed_response_promise<run_info> {
        auto promise = self->make_response_promise<run_info>();
        reply_once<run_info> reply(
            promise, make_error(errc::shutting_down,
                                "the token's actor stopped before the start "
                                "was decided"));
        serve(self, [self, claim = std::move(claim), reply]() mutable {
          handle_start(self, claim, reply);
        });
        return promise;
      },
      [self](claim_atom, const hook_claim& claim) {
        serve(self, [self, claim] { handle_claim(self, claim); });
      },
      [self](resume_atom, resume_request& request)
          -> caf::typed_response_promise<std::string> {
        auto promise = self->make_response_promise<std::string>();
        reply_once<std::string> reply(
            promise, make_error(errc::shutting_down,
                                "the token's actor stopped before the resume "
                                "was recorded"));
        // A resume id is checked against the store, so such a resume waits
        // until the writes before it are durable.
        bool pipelined = request.resume_id.empty();
        serve(
            self,
            [self, request = std::move(request), reply]() mutable {
              handle_resume(self, request, reply);
            },
            pipelined);
        return promise;
      },
      [self](subscribe_atom, const subscription& request) {
        serve(self, [self, request] { handle_subscribe(self, request); });
      },
      [self](dispose_atom, const owner_notice& notice) {
        serve(self, [self, notice] { handle_dispose(self, notice); });
      },
      [self](owner_end_atom, const owner_notice& notice) {
        serve(self, [self, notice] { handle_owner_end(self, notice); });
      },
      [self](timer_atom, const persistence::timer_record&) {
        serve(self, [self] { handle_retention(self); });
      },
      [self](hand_over_atom, const hand_over_request& request) {
        serve(self, [self, request] { handle_hand_over(self, request); });
      },
  };
}

}  // namespace

error token_held_error(std::string_view token, const std::string& owner_run) {
  error conflict =
      make_error(errc::hook_conflict,
                 describe_token(token) + " is held by run " + owner_run);
  conflict.run_id = owner_run;
  return conflict;
}

token_actor spawn_token_actor(caf::actor_system& system, shard& home,
                              const std::string& address) {
  return system.spawn(token_actor_behavior, &home, address);
}

result<hook_info> read_hook(const node& services, std::string_view tenant,
                            std::string_view token) {
  auto record = services.shard_of_token(persistence::keys::token(tenant, token))
                    .store->get_token(tenant, token);
  if (!record) {
    return record.error();
  }
  auto missing = make_error(errc::hook_not_found,
                            "no hook holds " + describe_token(token));
  if (!*record) {
    return missing;
  }
  auto& found = **record;
  if (found.state == token_state::retained &&
      found.retain_until_ms <= services.clock->now_ms()) {
    return missing;
  }
  if (found.state == token_state::active) {
    // An owner that ended without telling the token no longer holds it
    // unless its retention does.
    auto owner =
        services.shard_of_run(found.owner_run).store->get_run(found.owner_run);
    if (owner && (!*owner || is_terminal((*owner)->status))) {
      if (found.retain_until_ms <= services.clock->now_ms()) {
        return missing;
      }
      auto info = describe(found);
      info.state = "retained";
      return info;
    }
  }
  return describe(found);
}

}  // namespace durin::actors
