// The token actor owns one hook token (per tenant). It serialises every
// claim, force-claim, resume, disposal, owner end and retention expiry of
// that token, one at a time: a request that arrives while a write is in
// flight waits, so check-then-act on the token is race-free and at most one
// run owns it at any moment. Every answer is sent after the write it depends
// on is durable. State lives in the `tokens` and `inbox` families; the actor
// passivates when idle and loads the record again on its next message.
//
// An owner whose run ended without telling the token (a crash between the
// run's end and its notice) is found when the token loads: the run record's
// status is the truth, and the end is applied then.
//
// Its whole protocol is the typed interface below; a start and a resume are
// answered through response promises, a flow's claim by a claimed_atom
// message to the claiming run.
#pragma once

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>
#include <chrono>
#include <cstdint>
#include <string>

#include "actors/messages.hpp"
#include "durin/runtime.hpp"

namespace durin::services {
struct node;
struct shard;
}  // namespace durin::services

namespace durin::actors {

using services::node;
using services::shard;

using token_actor = caf::typed_actor<
    // The directory activates every actor it spawns; a token loads lazily,
    // with its first request.
    caf::reacts_to<activate_atom>,
    // Admits a run with the token as its start hook, in one write: answers
    // the run (or, for a repeat of the owner's start command, the owner)
    // once durable; hook-conflict naming the owner; start-outcome-unknown
    // after a failed write.
    caf::replies_to<start_claim_atom, start_claim>::with<run_info>,
    // A flow's create_hook: answered (claimed_atom) to the claiming run.
    caf::reacts_to<claim_atom, hook_claim>,
    // A payload for the owner: answers the owner's run id once durable, or
    // hook-not-found.
    caf::replies_to<resume_atom, resume_request>::with<std::string>,
    // A run asks for its payloads (sent to it as payload_atom messages).
    caf::reacts_to<subscribe_atom, subscription>,
    // The owner disposed its hook; the owner ended.
    caf::reacts_to<dispose_atom, owner_notice>,
    caf::reacts_to<owner_end_atom, owner_notice>,
    // The owner continues as new: once idle, the actor holds still (serves
    // nothing) and answers hand_over_ready to the owner, whose end write
    // names the successor as the owner; it reads the record again once
    // that write settles.
    caf::reacts_to<hand_over_atom, hand_over_request>,
    // The token's retention ended.
    caf::reacts_to<timer_atom, persistence::timer_record>,
    // The write with this ticket is durable (or failed).
    caf::reacts_to<committed_atom, status, std::uint64_t>,
    // Try the waiting requests again (an owner's release settled, or the
    // store could not be read).
    caf::reacts_to<reload_atom>,
    // From the linger list: passivate if unused since `stamp`.
    caf::reacts_to<linger_atom, std::uint64_t>>;

// How long an idle token actor stays before it passivates (node::lingering
// tells it): a start is usually followed within milliseconds by its run's
// claim, end or a resume, which then find the record loaded instead of
// reading it again.
constexpr auto token_linger = std::chrono::milliseconds(250);

// Spawns the actor of the token at `address` (keys::token(tenant, token)).
token_actor spawn_token_actor(caf::actor_system& system, shard& home,
                              const std::string& address);

// The hook-conflict a start on a held token gets, naming the owner.
error token_held_error(std::string_view token, const std::string& owner_run);

// What get_hook_by_token shows, read straight from storage (advisory).
result<hook_info> read_hook(const node& services, std::string_view tenant,
                            std::string_view token);

}  // namespace durin::actors
