// How a step attempt's id is spelt: "att_" + 24 hex digits + "_" + the run
// id. An attempt id names its run, and so (services/shard_map.hpp) the
// shard whose node holds the attempt's lease: a worker's report or
// heartbeat that reaches any node of a cluster is routed by the id alone
// (gateway/placement.cpp). Made by the run engine, one per dispatched
// attempt; read by the gateway. Pure functions; any thread.
//
// Ids made before attempts named their run ("att_" + 24 hex digits) are
// still read: they name no run and are answered where they arrive. They
// are persisted only as text in step events of histories (persistence/
// records.hpp, `attempt_id`), which never parse them; live attempts are in
// memory only and are dispatched again, with new ids, after a restart.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "durin/limits.hpp"

namespace durin::actors {

inline constexpr std::string_view attempt_id_prefix = "att_";
// The random part's length in hex digits.
inline constexpr std::size_t attempt_random_digits = 24;
// "att_", the random part and '_' before the run id.
inline constexpr std::size_t attempt_id_head_bytes =
    attempt_id_prefix.size() + attempt_random_digits + 1;
static_assert(attempt_id_head_bytes + limits::run_id_bytes_max <=
                  limits::attempt_id_bytes_max,
              "an attempt id naming the longest run id is one a worker may "
              "send back");

// REQUIRES: `random_hex` has attempt_random_digits hex digits.
inline std::string make_attempt_id(std::string_view random_hex,
                                   std::string_view run_id) {
  std::string id(attempt_id_prefix);
  id += random_hex;
  id += '_';
  id += run_id;
  return id;
}

// The run an attempt id names; nullopt for an id made before ids named
// their run, or one durin did not make.
inline std::optional<std::string_view> run_of_attempt(
    std::string_view attempt_id) {
  if (attempt_id.size() <= attempt_id_head_bytes ||
      attempt_id.substr(0, attempt_id_prefix.size()) != attempt_id_prefix ||
      attempt_id[attempt_id_head_bytes - 1] != '_') {
    return std::nullopt;
  }
  for (std::size_t i = attempt_id_prefix.size(); i < attempt_id_head_bytes - 1;
       ++i) {
    const char c = attempt_id[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return std::nullopt;
    }
  }
  return attempt_id.substr(attempt_id_head_bytes);
}

}  // namespace durin::actors
