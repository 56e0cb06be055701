// Tenants and API keys: the `tenants` and `api_keys` column families. A
// tenant is a namespace for runs, hooks, keys and idempotency records; an API
// key belongs to one tenant and is one caller. Only a hash of a key's secret
// is stored. gateway/auth.hpp makes and checks keys; this file stores them.
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
};

class auth_store {
 public:
  // REQUIRES: `target` and `writer` outlive the auth store.
  auth_store(store& target, committer& writer);

  result<std::optional<tenant_record>> get_tenant(std::string_view id) const;
  result<std::optional<api_key_record>> get_api_key(std::string_view id) const;
  // The tenant's keys in id order, at most `max`.
  result<std::vector<api_key_record>> list_api_keys(std::string_view tenant,
                                                    std::size_t max) const;

  // Tenant ids in id order, at most `max`.
  result<std::vector<std::string>> list_tenant_ids(std::size_t max) const;

  // The tenant and its first key in one atomic write (sync).
  status create_tenant(const tenant_record& tenant,
                       const api_key_record& first_key);
  status put_api_key(const api_key_record& key);
  status erase_api_key(std::string_view id);

 private:
  status write(write_batch batch);

  store& store_;
  committer& writer_;
};

}  // namespace durin::persistence
