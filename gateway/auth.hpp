// Tenants and API keys as the gateway sees them. A secret is
// "dk_" + key id + "_" + 32 random bytes in hex; only its SHA-256 is stored
// (persistence/auth_store.hpp). `authenticate` maps an Authorization header
// to the caller: the key's tenant and id.
//
// Verified keys are cached in memory (at most `cached_keys_max`), so a
// request does not read the store for its key. The cache never outlives a
// revocation: revoke_key empties the key's entry before and after the
// durable erase, and a store read that raced with a revocation is not
// cached (a revocation counter guards the insert). A key revoked by a
// DELETE that has answered is refused at once. Keys are only revoked
// through this class (one node, one store).
//
// Thread-safety: every method may be called from any thread. Methods that
// write block until the write is durable: call them from gateway worker
// threads, never from an actor.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
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
  result<std::vector<persistence::api_key_record>> list_keys(
      std::string_view tenant) const;
  // Revokes `key_id` of `tenant` for a caller of role `by`: refused (with
  // nothing changed) for a key of a higher role, or the tenant's last admin
  // key; not_found for a key of another tenant or none.
  result<revoke_refusal> revoke_key(std::string_view tenant,
                                    std::string_view key_id, key_role by);

  // Every tenant id (the webhook route, which has no key, looks in each).
  result<std::vector<std::string>> tenant_ids() const {
    return keys_.list_tenant_ids(100'000);
  }

  struct new_tenant {
    persistence::tenant_record tenant;
    new_api_key first_key;
  };
  result<new_tenant> create_tenant(std::string name);

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
  std::mutex revoke_mutex_;
  mutable std::mutex cache_mutex_;
  // key id -> its verified record; guarded by cache_mutex_.
  mutable std::unordered_map<std::string, cached_key> cache_;
  // Revocations begun so far; guarded by cache_mutex_.
  std::uint64_t revocations_ = 0;
};

}  // namespace durin::gateway
