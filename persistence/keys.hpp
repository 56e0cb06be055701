// Every RocksDB key durin writes is built here, and nowhere else. Numbers that
// sort are fixed-width big-endian; strings are length-prefixed (u16 BE) so
// that ("ab","c") never equals ("a","bc"). Decoders return nullopt for bytes
// that are not a well-formed key of their family.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "persistence/records.hpp"

namespace durin::persistence::keys {

std::string run(std::string_view run_id);
std::optional<std::string> decode_run(std::string_view key);

std::string history(std::string_view run_id, std::uint64_t sequence);
std::string history_prefix(std::string_view run_id);  // all of one run
struct history_key {
  std::string run_id;
  std::uint64_t sequence = 0;
};
std::optional<history_key> decode_history(std::string_view key);

std::string timer(const timer_record& timer);
std::string timer_upper_bound(std::int64_t due_ms);  // first key due > due_ms
std::optional<timer_record> decode_timer(std::string_view key);

std::string active(std::string_view run_id);
std::optional<std::string> decode_active(std::string_view key);

std::string meta(std::string_view name);

// Big-endian helpers, shared with the codec.
void put_u16(std::string& out, std::uint16_t value);
void put_u32(std::string& out, std::uint32_t value);
void put_u64(std::string& out, std::uint64_t value);
std::uint16_t get_u16(const char* bytes);
std::uint32_t get_u32(const char* bytes);
std::uint64_t get_u64(const char* bytes);

}  // namespace durin::persistence::keys
