// FNV-1a, 64 bits: the one small non-cryptographic hash of the project
// (shard placement of ids, rendezvous weights, replica checksums). Stable
// across builds and machines: placements and checksums depend on it, so
// it never changes.
#pragma once

#include <cstdint>
#include <string_view>

namespace durin::base {

inline constexpr std::uint64_t fnv1a_offset = 0xcbf29ce484222325ull;

// `hash` continued over `bytes`.
inline std::uint64_t fnv1a(std::string_view bytes,
                           std::uint64_t hash = fnv1a_offset) {
  for (const unsigned char byte : bytes) {
    hash ^= byte;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

}  // namespace durin::base
