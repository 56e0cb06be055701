// What cluster/peers.cpp and cluster/peer_calls.cpp share: an HTTP answer
// to and from its CAF message (cluster/peer_messages.hpp), and a peer
// endpoint "host:port" split. Plain functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "client/http_message.hpp"
#include "cluster/peer_messages.hpp"

namespace durin::cluster::detail {

inline forwarded_response to_message(const wire::http_response& response) {
  return {response.status, response.content_type, response.headers,
          response.body};
}

inline wire::http_response from_message(forwarded_response&& message) {
  wire::http_response response;
  response.status = message.status;
  response.content_type = std::move(message.content_type);
  response.headers = std::move(message.headers);
  response.body = std::move(message.body);
  return response;
}

// "host:port" with a port of 1 to 5 digits up to 65535; false otherwise.
inline bool split_address(const std::string& address, std::string& host,
                          std::uint16_t& port) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return false;
  }
  host = address.substr(0, colon);
  const auto digits = address.substr(colon + 1);
  if (digits.empty() || digits.size() > 5 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  const auto value = std::stoul(digits);
  if (value > 65535) {
    return false;
  }
  port = static_cast<std::uint16_t>(value);
  return true;
}

}  // namespace durin::cluster::detail
