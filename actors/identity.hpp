// Durable identities built on hook tokens. An instance id and a start's
// command id are start tokens in namespaces of their own (a byte no caller's
// token may begin with), so the token actor that makes hook starts atomic
// and unique makes them unique too: one active run per instance id, and one
// run per start command for as long as its token is held.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "durin/limits.hpp"

namespace durin::actors {

// Callers' tokens may not begin with this byte.
inline constexpr char reserved_token_mark = '\x1f';

inline bool is_reserved_token(std::string_view token) {
  return !token.empty() && token.front() == reserved_token_mark;
}

static_assert(limits::identity_token_prefix_bytes == 3,
              "instance_token and command_token add three bytes");

inline std::string instance_token(std::string_view instance_id) {
  return std::string{reserved_token_mark, 'i', ':'} + std::string(instance_id);
}

inline std::string command_token(std::string_view command_id) {
  return std::string{reserved_token_mark, 'c', ':'} + std::string(command_id);
}

// Where a schedule lives: its id as a token of a namespace of its own, so a
// schedule hashes to a shard by the one shard function (shard_map::
// of_schedule). Never claimed: it only places the schedule.
inline std::string schedule_token(std::string_view schedule_id) {
  return std::string{reserved_token_mark, 's', ':'} + std::string(schedule_id);
}

// Why `name` cannot name a message, update or query (empty when it can):
// 1 to 128 bytes of letters, digits and "._:-".
inline std::string message_name_problem(std::string_view name) {
  if (name.empty() || name.size() > 128) {
    return "a message, update or query name is 1 to 128 bytes; got " +
           std::to_string(name.size());
  }
  for (char c : name) {
    bool fine = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                (c >= '0' && c <= '9') || c == '.' || c == '_' || c == ':' ||
                c == '-';
    if (!fine) {
      return "a message, update or query name holds only letters, digits "
             "and \"._:-\"; got '" +
             std::string(name) + "'";
    }
  }
  return {};
}

// The reserved token under which a message's idempotency key is recorded
// (an inbox resume record, persistence/README.md): one stream per run (or
// per instance, for messages sent by instance id) and name. Message names
// never hold the mark, so the last one ends the id.
inline std::string message_scope(char addressed_by, std::string_view id,
                                 std::string_view name) {
  return std::string{reserved_token_mark, addressed_by, ':'} + std::string(id) +
         reserved_token_mark + std::string(name);
}
inline std::string run_message_scope(std::string_view run_id,
                                     std::string_view name) {
  return message_scope('m', run_id, name);
}
inline std::string instance_message_scope(std::string_view instance_id,
                                          std::string_view name) {
  return message_scope('n', instance_id, name);
}
// Update ids are one per run, whatever the update's name.
inline std::string update_scope(std::string_view run_id) {
  return message_scope('u', run_id, "");
}

// The instance id a start token stands for, if it is an instance token.
inline std::optional<std::string> instance_of_token(std::string_view token) {
  if (token.size() > 3 && token[0] == reserved_token_mark && token[1] == 'i' &&
      token[2] == ':') {
    return std::string(token.substr(3));
  }
  return std::nullopt;
}

// How messages name a start token: by what the caller sent (an instance
// id, a command id, a hook token), never by its reserved internal form.
inline std::string describe_token(std::string_view token) {
  if (token.size() > 3 && token[0] == reserved_token_mark && token[2] == ':') {
    auto id = std::string(token.substr(3));
    if (token[1] == 'i') {
      return "instance id '" + id + "'";
    }
    if (token[1] == 'c') {
      return "command id '" + id + "'";
    }
  }
  return "token '" + std::string(token) + "'";
}

}  // namespace durin::actors
