// A small blocking HTTP/1.1 client over one keep-alive connection: the
// `durin` command line, the tests and the load generator talk to a node with
// it. Not thread-safe: one connection per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client/http_message.hpp"
#include "durin/error.hpp"

namespace durin::client {

using wire::http_request;
using wire::http_response;

struct server_address {
  std::string host = "127.0.0.1";
  std::string port = "7070";
};

// "http://host:port" (or "host:port") → address; invalid-argument otherwise.
result<server_address> parse_server_url(std::string_view url);

class http_connection_impl;

class http_connection {
 public:
  explicit http_connection(server_address address,
                           std::int64_t timeout_ms = 60'000);
  ~http_connection();
  http_connection(http_connection&&) noexcept;

  // Sends one request and reads the answer; (re)connects when needed.
  // `timeout_ms` bounds the connect, the send and the answer, each.
  // Response header names are lower-case. Transport failures:
  // invalid-argument (the host does not resolve), shutting-down (cannot
  // connect, or the server closed the connection), timeout (no answer in
  // time). A request whose send failed on a stale keep-alive connection is
  // sent once more on a new one; nothing else is retried.
  result<http_response> send(
      const std::string& method, const std::string& target,
      const std::vector<std::pair<std::string, std::string>>& headers,
      const std::string& body);

 private:
  std::unique_ptr<http_connection_impl> impl_;
};

}  // namespace durin::client
