// Plain HTTP request and response values passed between the Beast gateway
// (gateway/http_server.hpp) and the API (gateway/api.hpp), so the API can be
// tested and fuzzed without sockets. Header names are kept lower-case.
// Thread-safety: plain values.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace durin::wire {

struct http_request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // the raw request target: path and query
  std::vector<std::pair<std::string, std::string>> headers;  // lower-case
  std::string body;

  // The first header named `name` (lower-case), or empty.
  std::string_view header(std::string_view name) const {
    for (const auto& [key, value] : headers) {
      if (key == name) {
        return value;
      }
    }
    return {};
  }
};

struct http_response {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

}  // namespace durin::wire
