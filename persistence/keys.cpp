// Key layouts of every column family; see persistence/README.md for the bytes.
#include "persistence/keys.hpp"

#include <algorithm>
#include <bit>
#include <limits>

#include "persistence/assert.hpp"

namespace durin::persistence::keys {

namespace {

constexpr std::size_t u16_bytes = 2;
constexpr std::size_t u64_bytes = 8;

// Appends a u16 BE length and the bytes of `text`.
void put_length_prefixed(std::string& out, std::string_view text) {
  // A longer string would wrap its length and collide with another key.
  DURIN_ASSERT(fits(text), "key string longer than the u16 length prefix");
  put_u16(out, static_cast<std::uint16_t>(text.size()));
  out.append(text);
}

// Reads a length-prefixed string at the front of `key` and advances past it;
// nullopt when the key is too short for the length it claims.
std::optional<std::string> take_length_prefixed(std::string_view& key) {
  if (key.size() < u16_bytes) {
    return std::nullopt;
  }
  const std::size_t length = get_u16(key.data());
  if (key.size() - u16_bytes < length) {
    return std::nullopt;
  }
  std::string text(key.substr(u16_bytes, length));
  key.remove_prefix(u16_bytes + length);
  return text;
}

std::optional<std::uint64_t> take_u64(std::string_view& key) {
  if (key.size() < u64_bytes) {
    return std::nullopt;
  }
  const std::uint64_t value = get_u64(key.data());
  key.remove_prefix(u64_bytes);
  return value;
}

// Keys made only of one length-prefixed string (runs, active).
std::optional<std::string> decode_single(std::string_view key) {
  auto text = take_length_prefixed(key);
  if (!text || !key.empty()) {
    return std::nullopt;
  }
  return text;
}

}  // namespace

std::string run(std::string_view run_id) {
  std::string key;
  key.reserve(u16_bytes + run_id.size());
  put_length_prefixed(key, run_id);
  return key;
}

std::optional<std::string> decode_run(std::string_view key) {
  return decode_single(key);
}

std::string history(std::string_view run_id, std::uint64_t sequence) {
  std::string key = history_prefix(run_id);
  put_u64(key, sequence);
  return key;
}

std::string history_prefix(std::string_view run_id) {
  std::string key;
  key.reserve(u16_bytes + run_id.size() + u64_bytes);
  put_length_prefixed(key, run_id);
  return key;
}

std::optional<history_key> decode_history(std::string_view key) {
  auto run_id = take_length_prefixed(key);
  if (!run_id) {
    return std::nullopt;
  }
  auto sequence = take_u64(key);
  if (!sequence || !key.empty()) {
    return std::nullopt;
  }
  return history_key{std::move(*run_id), *sequence};
}

std::string timer(const timer_record& timer) {
  std::string key;
  key.reserve(u64_bytes + u16_bytes + timer.run_id.size() + u64_bytes + 1);
  // Negative times are not meaningful deadlines; 0 keeps the key sortable.
  put_u64(key,
          static_cast<std::uint64_t>(std::max<std::int64_t>(timer.due_ms, 0)));
  put_length_prefixed(key, timer.run_id);
  put_u64(key, timer.call);
  key.push_back(static_cast<char>(timer.kind));
  return key;
}

std::string timer_upper_bound(std::int64_t due_ms) {
  std::string key;
  if (due_ms < 0) {
    put_u64(key, 0);
    return key;
  }
  // Computed unsigned: INT64_MAX + 1 is 2^63, still above every stored due.
  put_u64(key, static_cast<std::uint64_t>(due_ms) + 1);
  return key;
}

std::optional<timer_record> decode_timer(std::string_view key) {
  auto due = take_u64(key);
  if (!due || *due > static_cast<std::uint64_t>(
                         std::numeric_limits<std::int64_t>::max())) {
    return std::nullopt;
  }
  auto run_id = take_length_prefixed(key);
  if (!run_id) {
    return std::nullopt;
  }
  auto call = take_u64(key);
  if (!call || key.size() != 1) {
    return std::nullopt;
  }
  const auto kind = static_cast<std::uint8_t>(key[0]);
  if (kind < static_cast<std::uint8_t>(timer_kind::sleep) ||
      kind > static_cast<std::uint8_t>(timer_kind::token_retention)) {
    return std::nullopt;
  }
  return timer_record{static_cast<std::int64_t>(*due), std::move(*run_id),
                      *call, static_cast<timer_kind>(kind)};
}

std::string active(std::string_view run_id) {
  return run(run_id);
}

std::optional<std::string> decode_active(std::string_view key) {
  return decode_single(key);
}

std::string meta(std::string_view name) {
  return std::string(name);
}

std::string token(std::string_view tenant, std::string_view token) {
  DURIN_ASSERT(fits(tenant) && fits(token), "token address too long");
  std::string key;
  key.reserve(4 + tenant.size() + token.size());
  put_length_prefixed(key, tenant);
  put_length_prefixed(key, token);
  return key;
}

std::optional<token_address> decode_token(std::string_view key) {
  auto tenant = take_length_prefixed(key);
  auto name = tenant ? take_length_prefixed(key) : std::nullopt;
  if (!name || !key.empty()) {
    return std::nullopt;
  }
  return token_address{std::move(*tenant), std::move(*name)};
}

std::string inbox_prefix(std::string_view tenant, std::string_view name) {
  return token(tenant, name);
}

std::string inbox_payload(std::string_view tenant, std::string_view name,
                          std::uint64_t sequence) {
  auto key = token(tenant, name);
  key.push_back('\x01');
  put_u64(key, sequence);
  return key;
}

std::string inbox_resume(std::string_view tenant, std::string_view name,
                         std::string_view resume_id) {
  DURIN_ASSERT(fits(resume_id), "resume id too long");
  auto key = token(tenant, name);
  key.push_back('\x02');
  put_length_prefixed(key, resume_id);
  return key;
}

// ---- gateway/ families: requests, tenants, api_keys ------------------

std::string request(std::string_view tenant, std::string_view caller,
                    std::string_view idempotency_key) {
  std::string key;
  key.reserve(6 + tenant.size() + caller.size() + idempotency_key.size());
  put_length_prefixed(key, tenant);
  put_length_prefixed(key, caller);
  put_length_prefixed(key, idempotency_key);
  return key;
}

std::string tenant(std::string_view tenant_id) {
  std::string key;
  put_length_prefixed(key, tenant_id);
  return key;
}

std::string api_key(std::string_view key_id) {
  std::string key;
  put_length_prefixed(key, key_id);
  return key;
}

// ---- end of gateway/ families ---------------------------------------------

std::string schedule(std::string_view tenant, std::string_view schedule_id) {
  return token(tenant, schedule_id);  // the same two length-prefixed strings
}

std::optional<token_address> decode_schedule(std::string_view key) {
  return decode_token(key);
}

// ---- search
// ------------------------------------------------------------------

namespace {

constexpr std::uint64_t sign_bit = std::uint64_t{1} << 63;

// The bits of `number` as an unsigned number that sorts as the doubles do.
std::uint64_t ordered_double(double number) {
  if (number == 0) {
    number = 0;  // -0 equals +0 in every comparison, so it is one key
  }
  const auto bits = std::bit_cast<std::uint64_t>(number);
  return (bits & sign_bit) != 0 ? ~bits : bits | sign_bit;
}

double double_of(std::uint64_t ordered) {
  return std::bit_cast<double>((ordered & sign_bit) != 0 ? ordered & ~sign_bit
                                                         : ~ordered);
}

void put_search_value(std::string& out, const search_value& value) {
  switch (value.type) {
    case search_attribute_type::keyword:
      for (const char byte : value.text) {
        out.push_back(byte);
        if (byte == '\0') {
          out.push_back('\xFF');
        }
      }
      out.push_back('\0');
      out.push_back('\x01');
      return;
    case search_attribute_type::integer:
    case search_attribute_type::time:
      put_u64(out, static_cast<std::uint64_t>(value.integer) ^ sign_bit);
      return;
    case search_attribute_type::number:
      put_u64(out, ordered_double(value.number));
      return;
    case search_attribute_type::boolean:
      out.push_back(value.boolean ? '\x01' : '\0');
      return;
  }
}

// Reads what put_search_value wrote for `type`, advancing past it.
std::optional<search_value> take_search_value(std::string_view& key,
                                              search_attribute_type type) {
  search_value value;
  value.type = type;
  switch (type) {
    case search_attribute_type::keyword:
      for (std::size_t at = 0; at + 1 < key.size(); ++at) {
        if (key[at] != '\0') {
          value.text.push_back(key[at]);
        } else if (key[at + 1] == '\xFF') {
          value.text.push_back('\0');
          ++at;
        } else if (key[at + 1] == '\x01') {
          key.remove_prefix(at + 2);
          return value;
        } else {
          return std::nullopt;
        }
      }
      return std::nullopt;
    case search_attribute_type::integer:
    case search_attribute_type::time: {
      auto bits = take_u64(key);
      if (!bits) {
        return std::nullopt;
      }
      value.integer = static_cast<std::int64_t>(*bits ^ sign_bit);
      return value;
    }
    case search_attribute_type::number: {
      auto bits = take_u64(key);
      if (!bits) {
        return std::nullopt;
      }
      value.number = double_of(*bits);
      return value;
    }
    case search_attribute_type::boolean:
      if (key.empty() || static_cast<unsigned char>(key[0]) > 1) {
        return std::nullopt;
      }
      value.boolean = key[0] == '\x01';
      key.remove_prefix(1);
      return value;
  }
  return std::nullopt;
}

}  // namespace

std::string search_type_prefix(std::string_view tenant, std::string_view name,
                               search_attribute_type type) {
  std::string key;
  key.reserve(2 * u16_bytes + tenant.size() + name.size() + 1 + u64_bytes);
  put_length_prefixed(key, tenant);
  put_length_prefixed(key, name);
  key.push_back(static_cast<char>(type));
  return key;
}

std::string search_value_prefix(std::string_view tenant, std::string_view name,
                                const search_value& value) {
  std::string key = search_type_prefix(tenant, name, value.type);
  put_search_value(key, value);
  return key;
}

std::string search_entry(std::string_view tenant, std::string_view name,
                         const search_value& value, std::string_view run_id) {
  std::string key = search_value_prefix(tenant, name, value);
  put_length_prefixed(key, run_id);
  return key;
}

std::optional<search_key> decode_search_entry(std::string_view key) {
  auto tenant = take_length_prefixed(key);
  auto name = tenant ? take_length_prefixed(key) : std::nullopt;
  if (!name || key.empty()) {
    return std::nullopt;
  }
  const auto type = static_cast<std::uint8_t>(key[0]);
  if (type < 1 || type > search_attribute_type_max) {
    return std::nullopt;
  }
  key.remove_prefix(1);
  auto value = take_search_value(key, static_cast<search_attribute_type>(type));
  auto run_id = value ? take_length_prefixed(key) : std::nullopt;
  if (!run_id || !key.empty()) {
    return std::nullopt;
  }
  return search_key{std::move(*tenant), std::move(*name), std::move(*value),
                    std::move(*run_id)};
}

void put_u16(std::string& out, std::uint16_t value) {
  out.push_back(static_cast<char>(value >> 8));
  out.push_back(static_cast<char>(value));
}

void put_u32(std::string& out, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>(value >> shift));
  }
}

void put_u64(std::string& out, std::uint64_t value) {
  for (int shift = 56; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>(value >> shift));
  }
}

std::uint16_t get_u16(const char* bytes) {
  const auto* b = reinterpret_cast<const unsigned char*>(bytes);
  return static_cast<std::uint16_t>((b[0] << 8) | b[1]);
}

std::uint32_t get_u32(const char* bytes) {
  const auto* b = reinterpret_cast<const unsigned char*>(bytes);
  std::uint32_t value = 0;
  for (int i = 0; i < 4; ++i) {
    value = (value << 8) | b[i];
  }
  return value;
}

std::uint64_t get_u64(const char* bytes) {
  const auto* b = reinterpret_cast<const unsigned char*>(bytes);
  std::uint64_t value = 0;
  for (int i = 0; i < 8; ++i) {
    value = (value << 8) | b[i];
  }
  return value;
}

}  // namespace durin::persistence::keys
