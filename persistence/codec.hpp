// Values as bytes. Every value is framed: [u8 format version][body][u32 BE
// CRC-32C of version and body]. Decoding checks the frame and every length
// before it reads, so any bytes at all give a value or a corrupt-record
// error, never a crash. Encoding never fails; what it writes decodes again
// provided the record passes `validate` (write_batch checks before it puts).
// Body layouts byte by byte are in persistence/README.md. Pure functions:
// safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "durin/error.hpp"
#include "persistence/records.hpp"

namespace durin::persistence::codec {

inline constexpr std::uint8_t format_version = 1;

// No single string field of a value may be longer: decoding refuses a length
// above it before it allocates, so a corrupt length cannot exhaust memory.
inline constexpr std::size_t field_bytes_max = 64u << 20;

// ok when `encode(record)` decodes back to `record`: every field within
// field_bytes_max and the enums in their stored ranges (run_status 1..6 and 8,
// never `blocked`; event_kind 1..event_kind_max). Else invalid-argument
// naming the field.
status validate(const run_record& record);
status validate(const event_record& event);

std::string encode(const run_record& record);
result<run_record> decode_run(std::string_view bytes);

// The tenant and search attributes of an encoded run record, read without
// copying its other fields: the search index reads them on every write of
// a run. The frame and every field it passes are checked as decode_run
// checks them (corrupt-record); the groups' emptiness rules are not.
struct run_search {
  std::string tenant;
  search_attributes search;
};
result<run_search> decode_run_search(std::string_view bytes);

std::string encode(const event_record& event);
result<event_record> decode_event(std::string_view bytes);

// A framed empty body: the value of keys whose key says it all.
std::string encode_marker();
status decode_marker(std::string_view bytes);

// One opaque string in a frame (body: u32 BE length, bytes): `meta` values.
// REQUIRES: bytes.size() <= field_bytes_max.
std::string encode_bytes(std::string_view bytes);
result<std::string> decode_bytes(std::string_view bytes);

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, initial value and
// final xor 0xFFFFFFFF): crc32c("123456789") == 0xE3069283.
std::string encode(const token_record& record);
result<token_record> decode_token(std::string_view bytes);

std::string encode(const payload_record& record);
result<payload_record> decode_payload_record(std::string_view bytes);

std::string encode(const resume_record& record);
result<resume_record> decode_resume(std::string_view bytes);

std::uint32_t crc32c(std::string_view bytes);
// The same, byte by byte from a table: what crc32c uses on CPUs without the
// SSE 4.2 instruction. Exposed so that tests check both agree.
std::uint32_t crc32c_portable(std::string_view bytes);

}  // namespace durin::persistence::codec
