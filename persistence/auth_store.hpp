// Tenants and API keys: the `tenants` and `api_keys` column families. A
// tenant is a namespace for runs, hooks, keys and idempotency records; an API
// key belongs to one tenant and is one caller. Only a hash of a key's secret
// is stored. gateway/auth.hpp makes and checks keys; this file stores them.
// A revoked key stays as a record marked revoked (never erased), so that a
// cluster that merges key tables lets the revocation win over a late copy
// of the live key (gateway/key_sync.cpp).
//
// Thread-safety: every method may be called from any thread. Writes go
// through the committer with sync=true and return once durable (they block
// the caller for one group commit: never call them from an actor).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "durin/error.hpp"
#include "persistence/committer.hpp"
#include "persistence/store.hpp"

namespace durin::persistence {

struct tenant_record {
  std::string id;
  std::string name;
  std::int64_t created_at_ms = 0;
};

// What an API key may do. Each role may do everything the roles before it
// may: read-only reads; worker also polls and reports tasks; operator also
// starts, cancels and resumes runs and manages keys of its role or lower;
// admin also creates tenants and manages admin keys.
enum class key_role : std::uint8_t { read_only = 0, worker, operate, admin };

// "read-only", "worker", "operator", "admin".
std::string_view to_string(key_role role);
std::optional<key_role> parse_key_role(std::string_view text);

struct api_key_record {
  std::string id;  // public: "key_" + hex, part of the secret
  std::string tenant;
  std::string name;
  std::string secret_sha256;  // hex of SHA-256 of the whole secret
  std::int64_t created_at_ms = 0;
  key_role role = key_role::operate;
  // When the key was revoked; 0 while it is live. A revoked key never
  // authenticates and is never live again.
  std::int64_t revoked_at_ms = 0;

  bool revoked() const { return revoked_at_ms != 0; }
};

class auth_store {
 public:
  // REQUIRES: `target` and `writer` outlive the auth store.
  auth_store(store& target, committer& writer);

  result<std::optional<tenant_record>> get_tenant(std::string_view id) const;
  // The key's record, revoked or live; nullopt when there is none.
  result<std::optional<api_key_record>> get_api_key(std::string_view id) const;
  // The tenant's live keys in id order, at most `max`.
  result<std::vector<api_key_record>> list_api_keys(std::string_view tenant,
                                                    std::size_t max) const;
  // Every key of every tenant, revoked ones included, in id order; more
  // than `max` is invalid-argument (a bounded table, never a partial one).
  result<std::vector<api_key_record>> list_all_api_keys(std::size_t max) const;

  // Tenant ids in id order, at most `max`.
  result<std::vector<std::string>> list_tenant_ids(std::size_t max) const;
  // Every tenant in id order; more than `max` is invalid-argument.
  result<std::vector<tenant_record>> list_tenants(std::size_t max) const;

  // The tenant and its first key in one atomic write (sync).
  status create_tenant(const tenant_record& tenant,
                       const api_key_record& first_key);
  // Writes the key's record (live or revoked) as it is (sync).
  status put_api_key(const api_key_record& key);
  // Every record given in one atomic write (sync): what a merge of another
  // node's table decided to change.
  status put_records(const std::vector<tenant_record>& tenants,
                     const std::vector<api_key_record>& keys);

 private:
  status write(write_batch batch);

  store& store_;
  committer& writer_;
};

}  // namespace durin::persistence
