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
#pragma once

#include <caf/actor.hpp>
#include <chrono>
#include <string>

#include "services/node.hpp"

namespace durin::actors {

using services::node;
using services::shard;

// How long an idle token actor stays before it passivates (node::lingering
// tells it): a start is usually followed within milliseconds by its run's
// claim, end or a resume, which then find the record loaded instead of
// reading it again.
constexpr auto token_linger = std::chrono::milliseconds(250);

// Spawns the actor of the token at `address` (keys::token(tenant, token)).
caf::actor spawn_token_actor(caf::actor_system& system, shard& home,
                             const std::string& address);

// The hook-conflict a start on a held token gets, naming the owner.
error token_held_error(std::string_view token, const std::string& owner_run);

// What get_hook_by_token shows, read straight from storage (advisory).
result<hook_info> read_hook(const node& services, std::string_view tenant,
                            std::string_view token);

}  // namespace durin::actors
