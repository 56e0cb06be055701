#include "gateway/auth.hpp"

#include <algorithm>

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "persistence/sync_path.hpp"

namespace durin::gateway {

namespace {

std::string to_hex(const unsigned char* bytes, std::size_t size) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  for (std::size_t i = 0; i < size; ++i) {
    out.push_back(digits[bytes[i] >> 4]);
    out.push_back(digits[bytes[i] & 0xF]);
  }
  return out;
}

// Constant-time comparison of two hex digests.
bool same_digest(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

constexpr std::size_t secret_random_bytes = 32;
constexpr std::size_t key_id_random_bytes = 8;

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int size = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest.data(), &size, EVP_sha256(),
                 nullptr) != 1) {
    throw std::runtime_error("EVP_Digest failed");  // never: OpenSSL is broken
  }
  return to_hex(digest.data(), size);
}

std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()),
                 static_cast<int>(bytes)) != 1) {
    throw std::runtime_error("RAND_bytes failed");  // never: no entropy
  }
  return to_hex(reinterpret_cast<const unsigned char*>(raw.data()), bytes);
}

auth::auth(persistence::auth_store& keys, std::function<std::int64_t()> now_ms)
    : keys_(keys), now_ms_(std::move(now_ms)) {}

new_api_key auth::make_key(std::string_view tenant, std::string name,
                           key_role role) {
  new_api_key key;
  key.record.id = "key_" + random_hex(key_id_random_bytes);
  key.record.tenant = std::string(tenant);
  key.record.name = std::move(name);
  key.record.role = role;
  key.record.created_at_ms = now_ms_();
  key.secret = "dk_" + key.record.id + "_" + random_hex(secret_random_bytes);
  key.record.secret_sha256 = sha256_hex(key.secret);
  return key;
}

result<bool> auth::write_secret(const std::string& path,
                                const std::string& secret) {
  // Messages name the file only: the operator chose its path.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) {
    return make_error(errc::storage_error, "cannot write " + path);
  }
  std::string line = secret + "\n";
  bool written = ::write(fd, line.data(), line.size()) ==
                     static_cast<ssize_t>(line.size()) &&
                 ::fsync(fd) == 0;
  ::fchmod(fd, 0600);
  ::close(fd);
  // A new file outlives a crash only once its directory is synced too.
  auto directory = std::filesystem::absolute(path).parent_path();
  if (!written || !persistence::sync_path(directory)) {
    return make_error(errc::storage_error, "cannot write " + path);
  }
  return true;
}

std::string auth::new_secret() {
  return "dk_key_" + random_hex(key_id_random_bytes) + "_" +
         random_hex(secret_random_bytes);
}

result<bool> auth::bootstrap(const std::string& admin_key_path,
                             std::string_view secret) {
  auto existing = keys_.get_tenant("default");
  if (!existing) {
    return existing.error();
  }
  if (*existing) {
    return false;
  }
  persistence::tenant_record tenant{"default", "default", now_ms_()};
  auto key = make_key("default", "admin", key_role::admin);
  if (!secret.empty()) {
    // dk_<key id>_<hex>, as authenticate reads it.
    constexpr std::size_t id_size = 4 + 2 * key_id_random_bytes;
    if (secret.size() != 3 + id_size + 1 + 2 * secret_random_bytes ||
        secret.substr(0, 3) != "dk_") {
      return make_error(errc::invalid_argument,
                        "the cluster's admin key is malformed");
    }
    key.record.id = std::string(secret.substr(3, id_size));
    key.secret = std::string(secret);
    key.record.secret_sha256 = sha256_hex(key.secret);
  }
  // The file first: a crash between the two leaves a file with an unknown
  // key and no tenant, and the next start makes both again.
  if (auto written = write_secret(admin_key_path, key.secret); !written) {
    return written.error();
  }
  if (auto created = keys_.create_tenant(tenant, key.record); !created) {
    return created.error();
  }
  return true;
}

result<new_api_key> auth::reset_admin_key(const std::string& admin_key_path) {
  auto created = bootstrap(admin_key_path);
  if (!created) {
    return created.error();
  }
  auto key = make_key("default", "admin (reset)", key_role::admin);
  if (auto stored = keys_.put_api_key(key.record); !stored) {
    return stored.error();
  }
  if (auto written = write_secret(admin_key_path, key.secret); !written) {
    return written.error();
  }
  return key;
}

result<principal> auth::authenticate(std::string_view authorization) const {
  constexpr std::string_view scheme = "Bearer ";
  if (authorization.empty()) {
    return make_error(errc::invalid_argument,
                      "missing Authorization header: send 'Authorization: "
                      "Bearer <api key>'");
  }
  // The scheme is case-insensitive (RFC 9110 11.1): "bearer" is "Bearer".
  auto same_letter = [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) ==
           std::tolower(static_cast<unsigned char>(b));
  };
  if (authorization.size() <= scheme.size() ||
      !std::equal(scheme.begin(), scheme.end(), authorization.begin(),
                  same_letter)) {
    return make_error(errc::invalid_argument,
                      "the Authorization header must be 'Bearer <api key>'");
  }
  auto secret = authorization.substr(scheme.size());
  // dk_<key id>_<hex>: the key id is "key_" + 16 hex digits.
  constexpr std::size_t id_size = 4 + 2 * key_id_random_bytes;
  if (secret.size() != 3 + id_size + 1 + 2 * secret_random_bytes ||
      secret.substr(0, 3) != "dk_" || secret[3 + id_size] != '_') {
    return make_error(errc::invalid_argument, "unknown or revoked API key");
  }
  const auto key_id = secret.substr(3, id_size);
  const auto digest = sha256_hex(secret);
  std::uint64_t revocations_seen = 0;
  {
    std::lock_guard lock(cache_mutex_);
    auto found = cache_.find(std::string(key_id));
    if (found != cache_.end()) {
      if (!same_digest(found->second.secret_sha256, digest)) {
        return make_error(errc::invalid_argument, "unknown or revoked API key");
      }
      return found->second.caller;
    }
    revocations_seen = revocations_;
  }
  auto key = keys_.get_api_key(key_id);
  if (!key) {
    return key.error();
  }
  if (!*key || (*key)->revoked() ||
      !same_digest((*key)->secret_sha256, digest)) {
    return make_error(errc::invalid_argument, "unknown or revoked API key");
  }
  principal caller{(*key)->tenant, (*key)->id, (*key)->role};
  std::lock_guard lock(cache_mutex_);
  // A revocation that began since the read may have erased what was read.
  if (revocations_ == revocations_seen) {
    if (cache_.size() >= cached_keys_max) {
      cache_.clear();
    }
    cache_.emplace(std::string(key_id),
                   cached_key{(*key)->secret_sha256, caller});
  }
  return caller;
}

void auth::forget(std::string_view key_id) {
  std::lock_guard lock(cache_mutex_);
  ++revocations_;
  cache_.erase(std::string(key_id));
}

result<new_api_key> auth::create_key(std::string_view tenant, std::string name,
                                     key_role role) {
  auto key = make_key(tenant, std::move(name), role);
  if (auto stored = keys_.put_api_key(key.record); !stored) {
    return stored.error();
  }
  return key;
}

result<std::vector<persistence::api_key_record>> auth::list_keys(
    std::string_view tenant) const {
  return keys_.list_api_keys(tenant, 10'000);
}

result<revoke_refusal> auth::revoke_key(std::string_view tenant,
                                        std::string_view key_id, key_role by) {
  // One revocation at a time: "the last admin key" is checked and the key
  // revoked without another revocation in between.
  std::lock_guard writing(write_mutex_);
  auto key = keys_.get_api_key(key_id);
  if (!key) {
    return key.error();
  }
  if (!*key || (*key)->tenant != tenant) {
    return revoke_refusal::not_found;
  }
  if ((*key)->role > by) {
    return revoke_refusal::higher_role;
  }
  if ((*key)->revoked()) {
    return revoke_refusal::none;
  }
  if ((*key)->role == key_role::admin) {
    auto all = keys_.list_api_keys(tenant, 10'000);
    if (!all) {
      return all.error();
    }
    auto admins = std::count_if(all->begin(), all->end(), [](const auto& k) {
      return k.role == key_role::admin;
    });
    if (admins <= 1) {
      return revoke_refusal::last_admin_key;
    }
  }
  auto revoked = **key;
  revoked.revoked_at_ms = std::max<std::int64_t>(1, now_ms_());
  // Before the write, so no read from now on is cached; after it, for a
  // read that began before the first forget and was cached since.
  forget(key_id);
  auto written = keys_.put_api_key(revoked);
  forget(key_id);
  if (!written) {
    return written.error();
  }
  return revoke_refusal::none;
}

result<std::optional<persistence::api_key_record>> auth::key_record(
    std::string_view key_id) const {
  return keys_.get_api_key(key_id);
}

result<auth::key_table> auth::table() const {
  auto tenants = keys_.list_tenants(table_records_max);
  if (!tenants) {
    return tenants.error();
  }
  auto keys = keys_.list_all_api_keys(table_records_max);
  if (!keys) {
    return keys.error();
  }
  return key_table{std::move(*tenants), std::move(*keys)};
}

result<std::size_t> auth::merge(const key_table& incoming) {
  if (incoming.tenants.size() > table_records_max ||
      incoming.keys.size() > table_records_max) {
    return make_error(errc::invalid_argument, "the key table is too big");
  }
  std::lock_guard writing(write_mutex_);
  key_table changed;
  for (const auto& tenant : incoming.tenants) {
    auto held = keys_.get_tenant(tenant.id);
    if (!held) {
      return held.error();
    }
    if (!*held) {
      changed.tenants.push_back(tenant);
    }
  }
  std::vector<std::string> revoked_now;
  for (const auto& key : incoming.keys) {
    auto held = keys_.get_api_key(key.id);
    if (!held) {
      return held.error();
    }
    if (!*held) {
      changed.keys.push_back(key);
    } else if (!(*held)->revoked() && key.revoked()) {
      auto revoked = **held;
      revoked.revoked_at_ms = key.revoked_at_ms;
      changed.keys.push_back(std::move(revoked));
      revoked_now.push_back(key.id);
    }
  }
  if (changed.tenants.empty() && changed.keys.empty()) {
    return std::size_t{0};
  }
  // As revoke_key does: no read of a key being revoked is cached from here,
  // and none cached before the write survives it.
  for (const auto& id : revoked_now) {
    forget(id);
  }
  auto written = keys_.put_records(changed.tenants, changed.keys);
  for (const auto& id : revoked_now) {
    forget(id);
  }
  if (!written) {
    return written.error();
  }
  return changed.tenants.size() + changed.keys.size();
}

result<auth::new_tenant> auth::create_tenant(std::string name) {
  new_tenant made;
  made.tenant.id = "tenant_" + random_hex(8);
  made.tenant.name = std::move(name);
  made.tenant.created_at_ms = now_ms_();
  made.first_key = make_key(made.tenant.id, "first", key_role::operate);
  if (auto created = keys_.create_tenant(made.tenant, made.first_key.record);
      !created) {
    return created.error();
  }
  return made;
}

}  // namespace durin::gateway
