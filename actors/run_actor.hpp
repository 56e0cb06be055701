// The run actor owns one active run: its engine (and so the flow coroutine).
// It activates from storage on its first message, replays, and then turns the
// engine's requests into effects: writes through the committer, steps on the
// executor, timers in the timer service. It answers nobody before the write
// an answer depends on is durable, and passivates when idle on a far timer.
//
// Its whole protocol is the typed interface below. Requests are answered
// through response promises: exactly once, also when the answer is dropped
// (a run that reloads after a failed write answers what it held with an
// error, so a requester never waits for an answer that cannot come).
#pragma once

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>
#include <cstdint>
#include <string>

#include "actors/messages.hpp"

namespace durin::services {
struct node;
struct shard;
}  // namespace durin::services

namespace durin::actors {

using services::node;
using services::shard;

using run_actor = caf::typed_actor<
    // Loads the run and its history from storage and replays it.
    caf::reacts_to<activate_atom>,
    // Starts a run whose admission is durable (no storage read).
    caf::reacts_to<activate_atom, fresh_run>,
    // Starts a run whose admission rides in its first write; answers the
    // run as admitted once that write is durable, or storage-error.
    caf::replies_to<admit_atom, fresh_run>::with<run_info>,
    // The write handed to the committer last is durable (or failed).
    caf::reacts_to<committed_atom, status>,
    // A step attempt ended; whether it was recorded, once that is durable
    // (recorded = false with a reason when refused).
    caf::replies_to<step_done_atom, step_report>::with<report_answer>,
    // A durable timer fired.
    caf::reacts_to<timer_atom, persistence::timer_record>,
    // Cancels (or terminates) the run; answers its final state once durable.
    caf::replies_to<cancel_atom, cancel_request>::with<run_info>,
    // A message or an update: answers where it was recorded once durable
    // (an update waiting for completion: once its result is); a repeat of
    // its key records nothing and is answered as the first was.
    caf::replies_to<message_atom, message_request>::with<message_receipt>,
    // A query: the handler's answer (MessagePack); records nothing.
    caf::replies_to<query_atom, query_request>::with<std::string>,
    // Discards the engine and activates again (after a failed write).
    caf::reacts_to<reload_atom>,
    // From token actors: a claim's answer, a payload, a token lost.
    caf::reacts_to<claimed_atom, claim_outcome>,
    caf::reacts_to<payload_atom, hook_delivery>,
    caf::reacts_to<lost_atom, hook_loss>,
    // Time to send again what a token of another node's shard may have
    // lost (a claim not answered, the subscription of the read waited on).
    caf::reacts_to<hook_again_atom>,
    // A run this one watches ended (true: there is none), or, read on
    // another node, its state now.
    caf::reacts_to<watched_atom, run_info, bool>,
    // Sent to itself: ask another node again for the state of a run this
    // one watches (true: after a pause).
    caf::reacts_to<watched_atom, std::string, bool>,
    // The parent of this child, on another node, has ended (its id and
    // parent_close).
    caf::reacts_to<orphan_atom, std::string, std::uint8_t>,
    // A child run's start was decided (services/start.hpp answers it).
    caf::reacts_to<child_atom, child_started>,
    // Sent to itself: start the child of this call again (its last start's
    // outcome was not known).
    caf::reacts_to<child_atom, std::uint64_t>,
    // From its start token's actor: the token is held still for the end
    // write that hands it to the run's successor (continue-as-new).
    caf::reacts_to<hand_over_atom, hand_over_ready>,
    // Sent to itself: passivate if nothing happened since message `seen`.
    caf::reacts_to<linger_atom, std::uint64_t>>;

// Spawns the actor of `run_id` on `system`. `services` must outlive it.
run_actor spawn_run_actor(caf::actor_system& system, shard& home,
                          const std::string& run_id);

}  // namespace durin::actors
