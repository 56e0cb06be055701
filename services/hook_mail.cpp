// Hook mail (services/hook_mail.hpp): a message's CAF binary form, and its
// delivery to the directory of the shard that holds its actor.
#include "services/hook_mail.hpp"

#include <caf/binary_deserializer.hpp>
#include <vector>

#include "persistence/keys.hpp"
#include "services/node.hpp"

namespace durin::services {

namespace {

constexpr const char* kind_names[] = {
    "claim", "subscribe", "dispose", "owner-end", "claimed", "payload", "lost"};

// Decodes the mail as a T and hands it to `send`.
template <class T, class Send>
status with(const hook_mail& mail, Send&& send) {
  T message;
  caf::binary_deserializer source{nullptr, mail.bytes.data(),
                                  mail.bytes.size()};
  if (source(message) || source.remaining() != 0) {
    return make_error(errc::invalid_argument,
                      std::string("a hook message's bytes are not a ") +
                          to_string(mail.what) + " message");
  }
  if (!send(std::move(message))) {
    return make_error(errc::shutting_down, "the node is stopping");
  }
  return {};
}

}  // namespace

std::uint32_t shard_of(const shard_map& map, const hook_mail& mail) {
  return mail.to_token()
             ? map.of_token(persistence::keys::token(mail.tenant, mail.to))
             : map.of_run(mail.to);
}

std::optional<hook_mail::kind> parse_hook_mail_kind(std::string_view name) {
  for (std::size_t i = 0; i < std::size(kind_names); ++i) {
    if (name == kind_names[i]) {
      return static_cast<hook_mail::kind>(i);
    }
  }
  return std::nullopt;
}

const char* to_string(hook_mail::kind what) {
  return kind_names[static_cast<std::size_t>(what)];
}

status deliver_hook_mail(node& services, const hook_mail& mail) {
  using kind = hook_mail::kind;
  if (mail.to_token()) {
    auto address = persistence::keys::token(mail.tenant, mail.to);
    auto& tokens = services.tokens_of(address);
    auto to_token = [&](auto atom) {
      return [&tokens, &address, atom](auto message) {
        return tokens.deliver(address, atom, std::move(message));
      };
    };
    switch (mail.what) {
      case kind::claim:
        return with<actors::hook_claim>(mail,
                                        to_token(actors::claim_atom::value));
      case kind::subscribe:
        return with<actors::subscription>(
            mail, to_token(actors::subscribe_atom::value));
      case kind::dispose:
        return with<actors::owner_notice>(
            mail, to_token(actors::dispose_atom::value));
      default:
        return with<actors::owner_notice>(
            mail, to_token(actors::owner_end_atom::value));
    }
  }
  auto& runs = services.runs_of(mail.to);
  auto to_run = [&](auto atom) {
    return [&runs, &mail, atom](auto message) {
      return runs.deliver(mail.to, atom, std::move(message));
    };
  };
  switch (mail.what) {
    case kind::claimed:
      return with<actors::claim_outcome>(mail,
                                         to_run(actors::claimed_atom::value));
    case kind::payload:
      return with<actors::hook_delivery>(mail,
                                         to_run(actors::payload_atom::value));
    default:
      return with<actors::hook_loss>(mail, to_run(actors::lost_atom::value));
  }
}

}  // namespace durin::services
