// Every RocksDB key durin writes is built here, and nowhere else. Numbers that
// sort are fixed-width big-endian; strings are length-prefixed (u16 BE) so
// that ("ab","c") never equals ("a","bc"). Decoders return nullopt for bytes
// that are not a well-formed key of their family. Layouts byte by byte are in
// persistence/README.md. Pure functions: safe from any thread.
//
// REQUIRES (every builder): each string is at most `string_bytes_max` bytes,
// because its length must fit the u16 prefix. Callers taking ids from outside
// check with `fits()` first (store and write_batch do); a violation is a bug
// and aborts through DURIN_ASSERT rather than build a colliding key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "durin/search.hpp"
#include "persistence/records.hpp"

namespace durin::persistence::keys {

// The longest string a key can hold (the u16 length prefix).
inline constexpr std::size_t string_bytes_max = 0xFFFF;
inline bool fits(std::string_view text) {
  return text.size() <= string_bytes_max;
}

std::string run(std::string_view run_id);
std::optional<std::string> decode_run(std::string_view key);

std::string history(std::string_view run_id, std::uint64_t sequence);
std::string history_prefix(std::string_view run_id);  // all of one run
struct history_key {
  std::string run_id;
  std::uint64_t sequence = 0;
};
std::optional<history_key> decode_history(std::string_view key);

// A negative `due_ms` is stored as 0 (due at once): the key's number is
// unsigned so that timers sort by due time.
std::string timer(const timer_record& timer);
// The smallest key greater than every timer due at or before `due_ms`;
// u64 BE(0) for negative `due_ms` (no timer is due before 0).
std::string timer_upper_bound(std::int64_t due_ms);  // first key due > due_ms
std::optional<timer_record> decode_timer(std::string_view key);

std::string active(std::string_view run_id);
std::optional<std::string> decode_active(std::string_view key);

std::string meta(std::string_view name);  // the name's bytes, unprefixed

// tokens: lp(tenant) lp(token).
std::string token(std::string_view tenant, std::string_view token);
struct token_address {
  std::string tenant;
  std::string token;
};
std::optional<token_address> decode_token(std::string_view key);

// inbox: lp(tenant) lp(token) u8 1 u64(sequence) for payloads, and
// lp(tenant) lp(token) u8 2 lp(resume id) for resume records.
std::string inbox_prefix(std::string_view tenant, std::string_view token);
std::string inbox_payload(std::string_view tenant, std::string_view token,
                          std::uint64_t sequence);
std::string inbox_resume(std::string_view tenant, std::string_view token,
                         std::string_view resume_id);

// ---- gateway/ families: requests, tenants, api_keys ------------------
// `requests`: lp(tenant) + lp(caller) + lp(idempotency key).
std::string request(std::string_view tenant, std::string_view caller,
                    std::string_view idempotency_key);
// `tenants`: lp(tenant id). `api_keys`: lp(key id).
std::string tenant(std::string_view tenant_id);
std::string api_key(std::string_view key_id);
// ---- end of gateway/ families ---------------------------------------------

// `schedules`: lp(tenant) + lp(schedule id) (services/schedule_service.hpp).
std::string schedule(std::string_view tenant, std::string_view schedule_id);
// The (tenant, schedule id) a `schedules` key names; nullopt otherwise.
std::optional<token_address> decode_schedule(std::string_view key);
// ---- end of schedules ---------------------------------------------

// `search` (the search attribute index, persistence/search_index.cpp):
// lp(tenant) lp(name) u8 type, the value in an order-preserving encoding,
// then lp(run id); the value of an entry is empty. Values of one (tenant,
// name, type) sort as the query language compares them, so a comparison
// is one key range. The encoding: keyword, its bytes with 00 written as
// 00 FF, then 00 01 (so "ab" < "ab\0" < "abc"); int and time, the i64 with
// its sign bit flipped, as u64 BE; double, the IEEE bits as u64 BE with
// the sign bit flipped for a positive number and every bit flipped for a
// negative one (-0 is written as +0, which it equals); bool, u8 0 or 1.
// REQUIRES: tenant and name fit a key; a keyword value, when escaped.
std::string search_type_prefix(std::string_view tenant, std::string_view name,
                               search_attribute_type type);
// The prefix of every entry of `value`: search_type_prefix + its encoding.
std::string search_value_prefix(std::string_view tenant, std::string_view name,
                                const search_value& value);
std::string search_entry(std::string_view tenant, std::string_view name,
                         const search_value& value, std::string_view run_id);
struct search_key {
  std::string tenant;
  std::string name;
  search_value value;
  std::string run_id;
};
// nullopt for bytes that search_entry cannot have made.
std::optional<search_key> decode_search_entry(std::string_view key);

// Big-endian helpers, shared with the codec. REQUIRES (get_*): `bytes`
// points at 2, 4 or 8 readable bytes.
void put_u16(std::string& out, std::uint16_t value);
void put_u32(std::string& out, std::uint32_t value);
void put_u64(std::string& out, std::uint64_t value);
std::uint16_t get_u16(const char* bytes);
std::uint32_t get_u32(const char* bytes);
std::uint64_t get_u64(const char* bytes);

}  // namespace durin::persistence::keys
