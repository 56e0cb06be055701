#include "client/http_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <chrono>
#include <optional>

namespace durin::client {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

result<server_address> parse_server_url(std::string_view url) {
  const std::string given(url);
  auto bad = [&given](const std::string& why) {
    return make_error(
        errc::invalid_argument,
        "a server is http://host:port (" + why + "); got '" + given + "'");
  };
  constexpr std::string_view scheme = "http://";
  if (url.substr(0, scheme.size()) == scheme) {
    url.remove_prefix(scheme.size());
  } else if (url.find("://") != std::string_view::npos) {
    return bad("only http is spoken");
  }
  while (!url.empty() && url.back() == '/') {
    url.remove_suffix(1);
  }
  if (url.find('/') != std::string_view::npos) {
    return bad("no path: the API's routes start at the root");
  }
  auto colon = url.rfind(':');
  if (url.empty() || colon == std::string_view::npos || colon == 0 ||
      colon + 1 == url.size()) {
    return bad("a host and a port");
  }
  const auto port = url.substr(colon + 1);
  unsigned number = 0;
  auto [end, failed] =
      std::from_chars(port.data(), port.data() + port.size(), number);
  if (failed != std::errc() || end != port.data() + port.size() ||
      number == 0 || number > 65535) {
    return bad("a port from 1 to 65535");
  }
  return server_address{std::string(url.substr(0, colon)), std::string(port)};
}

class http_connection_impl {
 public:
  http_connection_impl(server_address address, std::int64_t timeout_ms)
      : address_(std::move(address)), timeout_ms_(timeout_ms) {}

  result<http_response> send(
      const std::string& method, const std::string& target,
      const std::vector<std::pair<std::string, std::string>>& headers,
      const std::string& body) {
    // A line break would end the header and start another (a key file
    // saved with CRLF, a pasted key): refused here, naming the header.
    for (const auto& [name, value] : headers) {
      if (value.find_first_of(std::string_view("\r\n\0", 3)) !=
          std::string::npos) {
        return make_error(errc::invalid_argument,
                          "the " + name +
                              " header's value may not contain a line "
                              "break or a NUL byte");
      }
    }
    for (int attempt = 0; attempt < 2; ++attempt) {
      bool fresh = !stream_;
      if (fresh) {
        if (auto connected = connect(); !connected) {
          return connected.error();
        }
      }
      auto answered = exchange(method, target, headers, body);
      if (answered || !retry_ok_ || fresh) {
        return answered;
      }
      stream_.reset();  // a stale keep-alive connection: once more
    }
    return make_error(errc::internal, "unreachable");
  }

 private:
  result<void> connect() {
    beast::error_code ec;
    tcp::resolver resolver(io_);
    auto endpoints = resolver.resolve(address_.host, address_.port, ec);
    if (ec) {
      return make_error(
          errc::invalid_argument,
          "cannot resolve " + address_.host + ": " + ec.message());
    }
    stream_.emplace(io_);
    stream_->expires_after(std::chrono::milliseconds(timeout_ms_));
    ec = await([&](auto done) { stream_->async_connect(endpoints, done); });
    if (ec) {
      stream_.reset();
      // Nothing was sent: the server is not there (or not yet).
      return make_error(errc::unavailable,
                        "cannot connect to " + address_.host + ":" +
                            address_.port + ": " + ec.message());
    }
    stream_->socket().set_option(tcp::no_delay(true), ec);
    return {};
  }

  result<http_response> exchange(
      const std::string& method, const std::string& target,
      const std::vector<std::pair<std::string, std::string>>& headers,
      const std::string& body) {
    http::request<http::string_body> request;
    request.method_string(method);
    request.target(target);
    request.version(11);
    request.set(http::field::host, address_.host);
    // Inserted, not set: a caller may send a header twice on purpose (a
    // test of the server's refusal).
    for (const auto& [name, value] : headers) {
      request.insert(name, value);
    }
    request.body() = body;
    if (!body.empty() || method == "POST" || method == "DELETE") {
      request.prepare_payload();
    }
    stream_->expires_after(std::chrono::milliseconds(timeout_ms_));
    retry_ok_ = false;
    auto ec =
        await([&](auto done) { http::async_write(*stream_, request, done); });
    if (ec) {
      // The server may have answered early (413) and stopped reading: read
      // its answer if there is one.
      http::response_parser<http::string_body> early;
      stream_->expires_after(std::chrono::milliseconds(timeout_ms_));
      auto read_ec = await(
          [&](auto done) { http::async_read(*stream_, buffer_, early, done); });
      if (!read_ec) {
        return to_response(early.release());
      }
      retry_ok_ = true;  // nothing reached the server
      stream_.reset();
      buffer_.clear();
      return make_error(errc::unavailable, "send failed: " + ec.message());
    }
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    stream_->expires_after(std::chrono::milliseconds(timeout_ms_));
    ec = await(
        [&](auto done) { http::async_read(*stream_, buffer_, parser, done); });
    // The server closed a reused keep-alive connection before reading the
    // request (its idle timeout): nothing was processed, send it again.
    retry_ok_ = !parser.got_some() &&
                (ec == http::error::end_of_stream || ec == asio::error::eof ||
                 ec == asio::error::connection_reset);
    if (ec) {
      stream_.reset();
      buffer_.clear();
      if (ec == beast::error::timeout) {
        return make_error(
            errc::timeout,
            "no answer within " + std::to_string(timeout_ms_) + " ms");
      }
      return make_error(errc::shutting_down,
                        "the server closed the connection: " + ec.message());
    }
    return to_response(parser.release());
  }

  // Runs one asynchronous operation to its end on this thread: the stream's
  // expiry (timeout_ms) bounds only asynchronous operations, never the
  // blocking ones.
  template <class Initiate>
  beast::error_code await(Initiate initiate) {
    beast::error_code outcome = asio::error::operation_aborted;
    initiate([&outcome](beast::error_code ec, auto&&...) { outcome = ec; });
    io_.restart();
    io_.run();
    return outcome;
  }

  result<http_response> to_response(http::response<http::string_body> message) {
    http_response response;
    response.status = message.result_int();
    for (const auto& field : message) {
      auto raw_name = field.name_string();
      std::string name(raw_name.data(), raw_name.size());
      for (auto& c : name) {
        if (c >= 'A' && c <= 'Z') {
          c = static_cast<char>(c - 'A' + 'a');
        }
      }
      if (name == "content-type") {
        response.content_type.assign(field.value().data(),
                                     field.value().size());
      }
      response.headers.emplace_back(
          std::move(name),
          std::string(field.value().data(), field.value().size()));
    }
    response.body = std::move(message.body());
    if (!message.keep_alive()) {
      stream_.reset();
      buffer_.clear();
    }
    return response;
  }

  server_address address_;
  std::int64_t timeout_ms_;
  asio::io_context io_;
  std::optional<beast::tcp_stream> stream_;
  beast::flat_buffer buffer_;
  bool retry_ok_ = false;  // the last failure may be retried
};

http_connection::http_connection(server_address address,
                                 std::int64_t timeout_ms)
    : impl_(std::make_unique<http_connection_impl>(std::move(address),
                                                   timeout_ms)) {}
http_connection::~http_connection() = default;
http_connection::http_connection(http_connection&&) noexcept = default;

result<http_response> http_connection::send(
    const std::string& method, const std::string& target,
    const std::vector<std::pair<std::string, std::string>>& headers,
    const std::string& body) {
  return impl_->send(method, target, headers, body);
}

}  // namespace durin::client
