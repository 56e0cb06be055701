// Values as bytes. Every value is framed: [u8 format version][body][u32 BE
// CRC-32C of version and body]. Decoding checks the frame and every length
// before it reads, so any bytes at all give a value or a corrupt-record
// error, never a crash. Encoding never fails.
#pragma once

#include <string>
#include <string_view>

#include "durin/error.hpp"
#include "persistence/records.hpp"

namespace durin::persistence::codec {

inline constexpr std::uint8_t format_version = 1;

std::string encode(const run_record& record);
result<run_record> decode_run(std::string_view bytes);

std::string encode(const event_record& event);
result<event_record> decode_event(std::string_view bytes);

// A framed empty body: the value of keys whose key says it all.
std::string encode_marker();
status decode_marker(std::string_view bytes);

std::uint32_t crc32c(std::string_view bytes);

}  // namespace durin::persistence::codec
