// The size limits of durin's inputs, in one place, with their units in their
// names. A request beyond a limit is refused with invalid-argument naming
// the limit; nothing is written. Where one limit must hold another, a
// static_assert says so.
#pragma once

#include <cstddef>

namespace durin::limits {

// A hook token, from the caller's domain (start hooks, create_hook).
inline constexpr std::size_t token_bytes_max = 256;
// An instance id, or a start's or resume's command id.
inline constexpr std::size_t identity_bytes_max = 200;
// Instance and command ids become start tokens in a reserved namespace:
// a mark byte, a kind byte and ':' before the id.
inline constexpr std::size_t identity_token_prefix_bytes = 3;
static_assert(identity_bytes_max + identity_token_prefix_bytes <=
                  token_bytes_max,
              "an instance or command id must fit in a start token");

inline constexpr std::size_t run_id_bytes_max = 128;
inline constexpr std::size_t flow_name_bytes_max = 128;
inline constexpr std::size_t tenant_bytes_max = 128;
// A run's input and a hook payload, as encoded for storage.
inline constexpr std::size_t payload_bytes_max = 1 << 20;
// A hook's metadata, as encoded.
inline constexpr std::size_t metadata_bytes_max = 64 << 10;

// HTTP: one path segment (an id in a route), the body, an Idempotency-Key.
inline constexpr std::size_t path_segment_bytes_max = 256;
inline constexpr std::size_t request_body_bytes_max = 1 << 20;
inline constexpr std::size_t idempotency_key_bytes_max = 255;
static_assert(path_segment_bytes_max >= token_bytes_max &&
                  path_segment_bytes_max >= run_id_bytes_max &&
                  path_segment_bytes_max >= identity_bytes_max,
              "every id a route names must fit in one path segment");

}  // namespace durin::limits
