// The rule for an id a caller chooses and the HTTP API names in a path
// (hook tokens, instance ids, schedule ids, task queues): it must be one path
// segment, so that whatever accepted it can always be addressed again. A
// token with a '/' or a schedule id of ".." used to be accepted and then be
// out of reach of every route (a schedule that fired forever).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace durin {

// Why `id` cannot be such an id, naming it as `what` ("hook.token",
// "scheduleId"); empty when it can. An id is 1 to `bytes_max` bytes of
// valid UTF-8 with no control character (bytes 0x00-0x1F and 0x7F), no '/'
// and no '\', and is neither "." nor "..".
std::string id_problem(std::string_view what, std::string_view id,
                       std::size_t bytes_max);

// Only id_problem's length rule, for lookups of ids that may have been
// accepted before the full rule existed (a token with a '/' made through
// the C++ API can still be resumed through it).
std::string id_length_problem(std::string_view what, std::string_view id,
                              std::size_t bytes_max);

// True for the bytes no id or name may hold: 0x00-0x1F and 0x7F (line
// breaks and terminal escapes in lists and logs).
constexpr bool is_control_byte(unsigned char c) {
  return c < 0x20 || c == 0x7F;
}

// True when `text` is well-formed UTF-8 (no overlong forms, surrogates or
// code points past U+10FFFF).
bool valid_utf8(std::string_view text);

}  // namespace durin
