// The one function from ids to shards. A node's data is split into a fixed
// number of shards (chosen when the data directory is made, 1 by default);
// every run, hook token, instance id and idempotency key lives in exactly
// one, and a request is served by the shard its id resolves to:
//
//   run id           carries its shard: the last two characters of the id
//                    (Crockford base32, so up to 1,024 shards)
//   hook token       FNV-1a 64 of the token's key (tenant and token): instance
//                    ids and command ids are tokens too (actors/identity.hpp)
//   idempotency key  FNV-1a 64 of (tenant, caller, key)
//   schedule id      as a token (actors::schedule_token) of its tenant
//
// A run started with a start token (a hook, an instance id, a command id) is
// given an id in that token's shard, so its admission is one local write. The
// hash is fixed (hash version 1): changing it would move every id.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "persistence/requests.hpp"

namespace durin::services {

inline constexpr std::uint32_t shards_max = 1024;
inline constexpr std::uint32_t shard_hash_version = 1;

class shard_map {
 public:
  explicit shard_map(std::uint32_t count = 1) : count_(count) {}

  std::uint32_t count() const { return count_; }

  // The shard a run id names; an id durin did not make resolves to some
  // shard, where it is simply not found.
  std::uint32_t of_run(std::string_view run_id) const;
  // `address` is persistence::keys::token(tenant, token).
  std::uint32_t of_token(std::string_view address) const;
  std::uint32_t of_key(const persistence::request_address& key) const;
  // A schedule: as the token actors::schedule_token(id) of its tenant.
  std::uint32_t of_schedule(std::string_view tenant,
                            std::string_view schedule_id) const;

  // The two characters a run id of `shard` ends with.
  static std::string run_id_suffix(std::uint32_t shard);
  // True when `text` has the form of a run id durin makes (node::new_run_id:
  // "run_" and 26 Crockford base32 digits). A list's cursor must be one.
  static bool is_run_id(std::string_view text);

 private:
  std::uint32_t count_ = 1;
};

}  // namespace durin::services
