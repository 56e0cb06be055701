// Values of `tenants` and `api_keys`: a JSON object in a codec bytes frame
// (version byte, u32 length, bytes, CRC-32C); see persistence/README.md.
#include "persistence/auth_store.hpp"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "durin/json.hpp"
#include "persistence/codec.hpp"
#include "persistence/keys.hpp"

namespace durin::persistence {

std::string_view to_string(key_role role) {
  switch (role) {
    case key_role::read_only:
      return "read-only";
    case key_role::worker:
      return "worker";
    case key_role::operate:
      return "operator";
    case key_role::admin:
      return "admin";
  }
  return "read-only";
}

std::optional<key_role> parse_key_role(std::string_view text) {
  for (auto role : {key_role::read_only, key_role::worker, key_role::operate,
                    key_role::admin}) {
    if (text == to_string(role)) {
      return role;
    }
  }
  return std::nullopt;
}

namespace {

std::string encode_tenant(const tenant_record& tenant) {
  json value = {{"id", tenant.id},
                {"name", tenant.name},
                {"createdAtMs", tenant.created_at_ms}};
  return codec::encode_bytes(value.dump());
}

std::string encode_key(const api_key_record& key) {
  json value = {{"id", key.id},
                {"tenant", key.tenant},
                {"name", key.name},
                {"secretSha256", key.secret_sha256},
                {"createdAtMs", key.created_at_ms},
                {"role", to_string(key.role)},
                {"admin", key.role == key_role::admin}};
  if (key.revoked()) {
    value["revokedAtMs"] = key.revoked_at_ms;
  }
  return codec::encode_bytes(value.dump());
}

result<json> decode_json(std::string_view bytes, std::string_view family_name) {
  auto body = codec::decode_bytes(bytes);
  if (!body) {
    return make_error(errc::corrupt_record,
                      std::string(family_name) + ": " + body.error().message);
  }
  auto value = json::parse(*body, nullptr, false);
  if (value.is_discarded() || !value.is_object()) {
    return make_error(errc::corrupt_record,
                      std::string(family_name) + ": not a JSON object");
  }
  return value;
}

result<tenant_record> decode_tenant(std::string_view bytes) {
  auto value = decode_json(bytes, "tenants");
  if (!value) {
    return value.error();
  }
  try {
    return tenant_record{value->at("id").get<std::string>(),
                         value->at("name").get<std::string>(),
                         value->at("createdAtMs").get<std::int64_t>()};
  } catch (const json::exception& e) {
    return make_error(errc::corrupt_record,
                      std::string("tenants: ") + e.what());
  }
}

result<api_key_record> decode_key(std::string_view bytes) {
  auto value = decode_json(bytes, "api_keys");
  if (!value) {
    return value.error();
  }
  try {
    // Keys written before roles carry only "admin": the others could do
    // everything but create tenants, which is the operator role.
    auto role =
        value->at("admin").get<bool>() ? key_role::admin : key_role::operate;
    if (value->contains("role")) {
      auto named = parse_key_role(value->at("role").get<std::string>());
      if (!named) {
        return make_error(errc::corrupt_record, "api_keys: unknown role");
      }
      role = *named;
    }
    // Keys written before revocations were kept have no "revokedAtMs":
    // live (a revoked key was erased then).
    const auto revoked_at_ms =
        value->contains("revokedAtMs")
            ? value->at("revokedAtMs").get<std::int64_t>()
            : std::int64_t{0};
    if (revoked_at_ms < 0) {
      return make_error(errc::corrupt_record, "api_keys: negative revokedAtMs");
    }
    return api_key_record{value->at("id").get<std::string>(),
                          value->at("tenant").get<std::string>(),
                          value->at("name").get<std::string>(),
                          value->at("secretSha256").get<std::string>(),
                          value->at("createdAtMs").get<std::int64_t>(),
                          role,
                          revoked_at_ms};
  } catch (const json::exception& e) {
    return make_error(errc::corrupt_record,
                      std::string("api_keys: ") + e.what());
  }
}

bool all_fit(std::initializer_list<std::string_view> texts) {
  for (auto text : texts) {
    if (text.size() > 1024) {
      return false;
    }
  }
  return true;
}

// Every record of `from`, for a caller that must see them all: a record
// that does not decode fails the read, and so do more than `max` (named
// `what` in the error), rather than an answer that silently leaves some out.
template <class Record>
result<std::vector<Record>> read_all(
    const store& source, family from, std::size_t max, std::string_view what,
    result<Record> (*decode)(std::string_view)) {
  std::vector<Record> found;
  status problem;
  auto scanned =
      source.scan_values(from, [&](std::string_view, std::string_view value) {
        auto record = decode(value);
        if (!record) {
          problem = record.error();
          return false;
        }
        if (found.size() >= max) {
          problem = make_error(
              errc::invalid_argument,
              "more than " + std::to_string(max) + " " + std::string(what));
          return false;
        }
        found.push_back(std::move(*record));
        return true;
      });
  if (!scanned) {
    return scanned.error();
  }
  if (!problem) {
    return problem.error();
  }
  return found;
}

}  // namespace

auth_store::auth_store(store& target, committer& writer)
    : store_(target), writer_(writer) {}

result<std::optional<tenant_record>> auth_store::get_tenant(
    std::string_view id) const {
  if (!all_fit({id})) {
    return std::optional<tenant_record>{};
  }
  auto got = store_.get_value(family::tenants, keys::tenant(id));
  if (!got) {
    return got.error();
  }
  if (!*got) {
    return std::optional<tenant_record>{};
  }
  auto tenant = decode_tenant(**got);
  if (!tenant) {
    return tenant.error();
  }
  return std::optional<tenant_record>(std::move(*tenant));
}

result<std::optional<api_key_record>> auth_store::get_api_key(
    std::string_view id) const {
  if (!all_fit({id})) {
    return std::optional<api_key_record>{};
  }
  auto got = store_.get_value(family::api_keys, keys::api_key(id));
  if (!got) {
    return got.error();
  }
  if (!*got) {
    return std::optional<api_key_record>{};
  }
  auto key = decode_key(**got);
  if (!key) {
    return key.error();
  }
  return std::optional<api_key_record>(std::move(*key));
}

result<std::vector<api_key_record>> auth_store::list_api_keys(
    std::string_view tenant, std::size_t max) const {
  std::vector<api_key_record> found;
  auto scanned = store_.scan_values(
      family::api_keys, [&](std::string_view, std::string_view value) {
        if (found.size() >= max) {
          return false;
        }
        auto key = decode_key(value);
        if (key && key->tenant == tenant && !key->revoked()) {
          found.push_back(std::move(*key));
        }
        return true;
      });
  if (!scanned) {
    return scanned.error();
  }
  return found;
}

result<std::vector<api_key_record>> auth_store::list_all_api_keys(
    std::size_t max) const {
  return read_all(store_, family::api_keys, max,
                  "API keys (revoked ones included)", decode_key);
}

result<std::vector<std::string>> auth_store::list_tenant_ids(
    std::size_t max) const {
  std::vector<std::string> found;
  auto scanned = store_.scan_values(
      family::tenants, [&](std::string_view, std::string_view value) {
        if (found.size() >= max) {
          return false;
        }
        if (auto tenant = decode_tenant(value)) {
          found.push_back(std::move(tenant->id));
        }
        return true;
      });
  if (!scanned) {
    return scanned.error();
  }
  return found;
}

result<std::vector<tenant_record>> auth_store::list_tenants(
    std::size_t max) const {
  return read_all(store_, family::tenants, max, "tenants", decode_tenant);
}

status auth_store::write(write_batch batch) {
  auto done = std::make_shared<std::promise<status>>();
  auto answer = done->get_future();
  writer_.submit(std::move(batch),
                 [done](const status& outcome) { done->set_value(outcome); });
  return answer.get();
}

status auth_store::create_tenant(const tenant_record& tenant,
                                 const api_key_record& first_key) {
  if (!all_fit({tenant.id, tenant.name, first_key.id, first_key.name})) {
    return make_error(errc::invalid_argument, "tenant fields too long");
  }
  auto batch = store_.batch();
  batch.put_value(family::tenants, keys::tenant(tenant.id),
                  encode_tenant(tenant));
  batch.put_value(family::api_keys, keys::api_key(first_key.id),
                  encode_key(first_key));
  return write(std::move(batch));
}

status auth_store::put_api_key(const api_key_record& key) {
  if (!all_fit({key.id, key.name, key.tenant})) {
    return make_error(errc::invalid_argument, "API key fields too long");
  }
  auto batch = store_.batch();
  batch.put_value(family::api_keys, keys::api_key(key.id), encode_key(key));
  return write(std::move(batch));
}

status auth_store::put_records(const std::vector<tenant_record>& tenants,
                               const std::vector<api_key_record>& keys) {
  auto batch = store_.batch();
  for (const auto& tenant : tenants) {
    if (!all_fit({tenant.id, tenant.name})) {
      return make_error(errc::invalid_argument, "tenant fields too long");
    }
    batch.put_value(family::tenants, keys::tenant(tenant.id),
                    encode_tenant(tenant));
  }
  for (const auto& key : keys) {
    if (!all_fit({key.id, key.name, key.tenant})) {
      return make_error(errc::invalid_argument, "API key fields too long");
    }
    batch.put_value(family::api_keys, keys::api_key(key.id), encode_key(key));
  }
  return write(std::move(batch));
}

}  // namespace durin::persistence
