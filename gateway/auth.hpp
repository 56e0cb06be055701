// Tenants and API keys as the gateway sees them. A secret is
// "dk_" + key id + "_" + 32 random bytes in hex; only its SHA-256 is stored
// (persistence/auth_store.hpp). `authenticate` maps an Authorization header
// to the caller: the key's tenant and id.
//
// Verified keys are cached in memory (at most `cached_keys_max`), so a
// request does not read the store for its key. The cache never outlives a
// revocation: revoke_key, and a merge that brings a revocation from another
// node, empty the key's entry before and after the durable write, and a
// store read that raced with a revocation is not cached (a revocation
// counter guards the insert). A key revoked by a DELETE that has answered
// is refused at once. A revoked key stays in the store, marked revoked, so
// a merge lets the revocation win. Keys are only written through this class
// (one node, one store); in a cluster every node has a store of its own,
// kept in step by gateway/key_sync.cpp through `merge` and `table`.
//
// Thread-safety: every method may be called from any thread. Methods that
// write block until the write is durable: call them from gateway worker
// threads, never from an actor.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "durin/error.hpp"
#include "persistence/auth_store.hpp"

namespace durin::gateway {

// Hex of SHA-256 of `bytes`.
std::string sha256_hex(std::string_view bytes);
// `bytes` random bytes from the OS, as hex (2 * bytes characters).
std::string random_hex(std::size_t bytes);

using persistence::key_role;

struct principal {
  std::string tenant;
  std::string key_id;  // the caller
  key_role role = key_role::read_only;

  bool admin() const { return role == key_role::admin; }
};

// Why a key may not be revoked (revoke_key).
enum class revoke_refusal : std::uint8_t {
  none,
  not_found,       // no such key in the tenant
  higher_role,     // the key's role is above the caller's
  last_admin_key,  // the tenant's only admin key: no one could manage it
};

struct new_api_key {
  persistence::api_key_record record;
  std::string secret;  // shown once
};

class auth {
 public:
  // Beyond this many verified keys the cache starts over (bounded memory).
  inline static constexpr std::size_t cached_keys_max = 10'000;

  // REQUIRES: `keys` outlives this; `now_ms` is thread-safe.
  auth(persistence::auth_store& keys, std::function<std::int64_t()> now_ms);

  // Creates tenant `default` with an admin key when it does not exist, and
  // writes the secret to `admin_key_path` (mode 0600). Answers true when it
  // created them.
  // With `secret` (a cluster's admin key, from new_secret on any node):
  // that key, so that the same admin key works on every node.
  result<bool> bootstrap(const std::string& admin_key_path,
                         std::string_view secret = {});
  // A fresh key secret ("dk_<key id>_<hex>").
  static std::string new_secret();
  // Offline recovery (`durin admin reset-key`): a new admin key of tenant
  // `default`, its secret written to `admin_key_path` (mode 0600). Creates
  // the tenant when missing. Keys already there stay as they are.
  result<new_api_key> reset_admin_key(const std::string& admin_key_path);

  // From "Bearer <secret>": the caller, or invalid-argument naming what was
  // wrong (the gateway answers 401).
  result<principal> authenticate(std::string_view authorization) const;

  result<new_api_key> create_key(std::string_view tenant, std::string name,
                                 key_role role = key_role::operate);
  // The tenant's live keys.
  result<std::vector<persistence::api_key_record>> list_keys(
      std::string_view tenant) const;
  // Revokes `key_id` of `tenant` for a caller of role `by`: refused (with
  // nothing changed) for a key of a higher role, or the tenant's last admin
  // key; not_found for a key of another tenant or none. A key revoked
  // already answers none again (a retry converges), and writes nothing.
  result<revoke_refusal> revoke_key(std::string_view tenant,
                                    std::string_view key_id, key_role by);
  // The key's record, revoked or live (what a revocation sends to the
  // other nodes of a cluster); nullopt when there is none.
  result<std::optional<persistence::api_key_record>> key_record(
      std::string_view key_id) const;

  // Every tenant id (the webhook route, which has no key, looks in each).
  result<std::vector<std::string>> tenant_ids() const {
    return keys_.list_tenant_ids(100'000);
  }

  struct new_tenant {
    persistence::tenant_record tenant;
    new_api_key first_key;
  };
  result<new_tenant> create_tenant(std::string name);

  // Every tenant and key of this node's store, revoked keys included.
  struct key_table {
    std::vector<persistence::tenant_record> tenants;
    std::vector<persistence::api_key_record> keys;
  };
  // A table holds at most this many keys (revoked ones included) and this
  // many tenants; a bigger one is refused whole (invalid-argument).
  inline static constexpr std::size_t table_records_max = 100'000;
  result<key_table> table() const;
  // Merges records another node holds into this node's store, in one
  // durable write: a record it lacks is added; a revocation wins over a
  // live key (the key's cache entry is emptied before and after the
  // write, as by revoke_key); nothing ever makes a revoked key live, and a
  // record it holds already stays as it is. Idempotent and commutative.
  // Answers how many records it changed.
  result<std::size_t> merge(const key_table& incoming);

 private:
  new_api_key make_key(std::string_view tenant, std::string name,
                       key_role role);
  static result<bool> write_secret(const std::string& path,
                                   const std::string& secret);

  struct cached_key {
    std::string secret_sha256;
    principal caller;
  };
  // Drops `key_id` from the cache and counts a revocation.
  void forget(std::string_view key_id);

  persistence::auth_store& keys_;
  std::function<std::int64_t()> now_ms_;
  // Held across every read-decide-write of a key record that exists
  // (revocations, merges), so that two of them never interleave.
  std::mutex write_mutex_;
  mutable std::mutex cache_mutex_;
  // key id -> its verified record; guarded by cache_mutex_.
  mutable std::unordered_map<std::string, cached_key> cache_;
  // Revocations begun so far; guarded by cache_mutex_.
  std::uint64_t revocations_ = 0;
};

}  // namespace durin::gateway
