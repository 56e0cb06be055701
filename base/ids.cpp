#include "durin/ids.hpp"

#include <cstdint>

namespace durin {

std::string id_length_problem(std::string_view what, std::string_view id,
                              std::size_t bytes_max) {
  if (id.empty() || id.size() > bytes_max) {
    return std::string(what) + " is 1 to " + std::to_string(bytes_max) +
           " bytes; got " + std::to_string(id.size());
  }
  return {};
}

std::string id_problem(std::string_view what, std::string_view id,
                       std::size_t bytes_max) {
  if (auto problem = id_length_problem(what, id, bytes_max); !problem.empty()) {
    return problem;
  }
  std::string name(what);
  if (id == "." || id == "..") {
    return name + " may not be '" + std::string(id) +
           "': a route could not name it";
  }
  for (unsigned char c : id) {
    if (is_control_byte(c)) {
      return name + " may not contain a control character (byte 0x" +
             "0123456789ABCDEF"[c >> 4] + "0123456789ABCDEF"[c & 15] + ")";
    }
    if (c == '/' || c == '\\') {
      return name + " may not contain '" + static_cast<char>(c) +
             "': a route names it as one path segment";
    }
  }
  if (!valid_utf8(id)) {
    return name + " must be valid UTF-8";
  }
  return {};
}

bool valid_utf8(std::string_view text) {
  std::size_t i = 0;
  const auto* b = reinterpret_cast<const unsigned char*>(text.data());
  while (i < text.size()) {
    unsigned char c = b[i];
    std::size_t extra = 0;
    std::uint32_t code = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1;
      code = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      code = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      code = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= text.size()) {
      return false;
    }
    for (std::size_t k = 1; k <= extra; ++k) {
      if ((b[i + k] & 0xC0) != 0x80) {
        return false;
      }
      code = (code << 6) | (b[i + k] & 0x3F);
    }
    if ((extra == 1 && code < 0x80) || (extra == 2 && code < 0x800) ||
        (extra == 3 && (code < 0x10000 || code > 0x10FFFF)) ||
        (code >= 0xD800 && code <= 0xDFFF)) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

}  // namespace durin
