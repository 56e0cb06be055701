// The hook protocol's messages as they travel between nodes (hook_mail,
// services/remote_runs.hpp): made from the message a run or a token actor
// sends, and put in the destination actor's mailbox where the destination's
// shard is served. Its bytes are CAF's binary form of the message, so both
// ends must be builds of one protocol (the type-id blocks' rule).
#pragma once

#include <caf/binary_serializer.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/messages.hpp"
#include "durin/error.hpp"
#include "services/remote_runs.hpp"
#include "services/shard_map.hpp"

namespace durin::services {

struct node;

// `message` is the actors/messages.hpp type `what` carries (hook_claim,
// subscription, owner_notice, claim_outcome, hook_delivery, hook_loss).
template <class Message>
hook_mail make_hook_mail(hook_mail::kind what, std::string tenant,
                         std::string to, Message message) {
  std::vector<char> bytes;
  caf::binary_serializer sink{nullptr, bytes};
  static_cast<void>(sink(message));  // plain data: saving cannot fail
  return {what, std::move(tenant), std::move(to),
          std::string(bytes.begin(), bytes.end())};
}

// The shard of the mail's actor, where it is delivered.
std::uint32_t shard_of(const shard_map& map, const hook_mail& mail);

// The kind named by its wire name ("claim", ..., "lost"), or nullopt.
std::optional<hook_mail::kind> parse_hook_mail_kind(std::string_view name);
const char* to_string(hook_mail::kind what);

// Delivers mail from another node to its actor here (the caller checked
// that this node serves the actor's shard): invalid-argument when its bytes
// are not the message its kind names.
status deliver_hook_mail(node& services, const hook_mail& mail);

}  // namespace durin::services
