// The hook protocol's messages as they travel between nodes (hook_mail,
// services/remote_runs.hpp): made from the message a run or a token actor
// sends, and put in the destination actor's mailbox where the destination's
// shard is served. Its bytes are CAF's binary form of the message, so both
// ends must be builds of one protocol (the type-id blocks' rule).
#pragma once

#include <string>

#include "actors/messages.hpp"
#include "durin/error.hpp"
#include "services/remote_runs.hpp"

namespace durin::services {

struct node;

hook_mail make_hook_mail(hook_mail::kind what, std::string tenant,
                         std::string to, const actors::hook_claim& message);
hook_mail make_hook_mail(hook_mail::kind what, std::string tenant,
                         std::string to, const actors::subscription& message);
hook_mail make_hook_mail(hook_mail::kind what, std::string tenant,
                         std::string to, const actors::owner_notice& message);
hook_mail make_hook_mail(hook_mail::kind what, std::string tenant,
                         std::string to, const actors::claim_outcome& message);
hook_mail make_hook_mail(hook_mail::kind what, std::string tenant,
                         std::string to, const actors::hook_delivery& message);
hook_mail make_hook_mail(hook_mail::kind what, std::string tenant,
                         std::string to, const actors::hook_loss& message);

// The kind named by its wire name ("claim", ..., "lost"), or nullopt.
std::optional<hook_mail::kind> parse_hook_mail_kind(std::string_view name);
const char* to_string(hook_mail::kind what);

// Delivers mail from another node to its actor here (the caller checked
// that this node serves the actor's shard): invalid-argument when its bytes
// are not the message its kind names.
status deliver_hook_mail(node& services, const hook_mail& mail);

}  // namespace durin::services
