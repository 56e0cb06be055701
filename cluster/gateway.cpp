#include "cluster/gateway.hpp"

#include "cluster/idempotency.hpp"

#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace durin::cluster {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

std::string text_of(boost::beast::string_view text) {
  return std::string(text.data(), text.size());
}

std::string lower(boost::beast::string_view text) {
  std::string out = text_of(text);
  for (auto& c : out) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return out;
}

}  // namespace

class gateway_impl : public std::enable_shared_from_this<gateway_impl> {
 public:
  gateway_impl(gateway_options options, http_handler handler)
      : options_(std::move(options)),
        handler_(std::move(handler)),
        acceptor_(io_),
        workers_(options_.worker_threads) {}

  result<void> open() {
    beast::error_code ec;
    auto address = asio::ip::make_address(options_.address, ec);
    if (ec) {
      return make_error(errc::invalid_argument,
                        "bad listen address '" + options_.address + "'");
    }
    tcp::endpoint endpoint{address, options_.port};
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) {
      acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    }
    if (!ec) {
      acceptor_.bind(endpoint, ec);
    }
    if (!ec) {
      acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    }
    if (ec) {
      return make_error(errc::invalid_argument,
                        "cannot listen on " + options_.address + ":" +
                            std::to_string(options_.port) + ": " +
                            ec.message());
    }
    port_ = acceptor_.local_endpoint().port();
    accept();
    for (std::size_t i = 0; i < std::max<std::size_t>(1, options_.io_threads);
         ++i) {
      threads_.emplace_back([this] { io_.run(); });
    }
    return {};
  }

  void stop() {
    std::lock_guard stop_lock(stop_mutex_);
    if (stopped_) {
      return;
    }
    stopped_ = true;
    asio::post(io_, [this] {
      beast::error_code ignored;
      acceptor_.close(ignored);
    });
    {
      std::unique_lock lock(drain_mutex_);
      drained_.wait_for(lock,
                        std::chrono::milliseconds(options_.drain_timeout_ms),
                        [this] { return in_flight_ == 0; });
    }
    workers_.join();
    io_.stop();
    for (auto& thread : threads_) {
      thread.join();
    }
  }

  std::uint16_t port() const { return port_; }

  void accept();
  void request_began() {
    std::lock_guard lock(drain_mutex_);
    ++in_flight_;
  }
  void request_answered() {
    std::lock_guard lock(drain_mutex_);
    if (--in_flight_ == 0) {
      drained_.notify_all();
    }
  }

  gateway_options options_;
  http_handler handler_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::thread_pool workers_;
  std::vector<std::thread> threads_;
  std::uint16_t port_ = 0;
  std::mutex stop_mutex_;
  bool stopped_ = false;
  std::mutex drain_mutex_;
  std::condition_variable drained_;
  std::size_t in_flight_ = 0;
};

namespace {

// One connection: read a request, hand it to a worker, write the answer,
// repeat while keep-alive. All socket work runs on the connection's strand.
class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket socket, gateway_impl& owner)
      : stream_(std::move(socket)),
        owner_(owner),
        read_timer_(stream_.get_executor()) {}

  void run() {
    asio::dispatch(stream_.get_executor(),
                   [self = shared_from_this()] { self->read(); });
  }

 private:
  void read() {
    parser_.emplace();
    parser_->header_limit(
        static_cast<std::uint32_t>(owner_.options_.header_bytes_max));
    parser_->body_limit(owner_.options_.body_bytes_max);
    // One deadline for the whole header, idle or not: a connection that
    // sends nothing, or drips bytes, is cut off after read_timeout_ms. The
    // timer cancels the read rather than closing the socket (as a
    // tcp_stream expiry would), so a partial request still gets its 408.
    stream_.expires_never();
    arm_read_timer();
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) {
          self->on_header(ec);
        });
  }

  void arm_read_timer() {
    timed_out_ = false;
    read_timer_.expires_after(
        std::chrono::milliseconds(owner_.options_.read_timeout_ms));
    read_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec) {
        self->timed_out_ = true;
        beast::error_code ignored;
        self->stream_.socket().cancel(ignored);
      }
    });
  }

  void on_header(beast::error_code ec) {
    if (ec) {
      return on_read_error(ec);
    }
    arm_read_timer();  // the body gets its own read_timeout_ms
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) {
          self->on_read(ec);
        });
  }

  void on_read_error(beast::error_code ec) {
    read_timer_.cancel();
    if (timed_out_) {
      ec = beast::error::timeout;
    }
    if (ec == http::error::body_limit) {
      return refuse(413, "payload-too-large",
                    "the body is larger than " +
                        std::to_string(owner_.options_.body_bytes_max) +
                        " bytes");
    }
    if (ec == http::error::header_limit) {
      return refuse(431, "header-too-large",
                    "the request header is larger than " +
                        std::to_string(owner_.options_.header_bytes_max) +
                        " bytes");
    }
    if (ec == beast::error::timeout) {
      if (parser_->got_some() || buffer_.size() > 0) {
        return refuse(408, "request-timeout",
                      "the request did not arrive within " +
                          std::to_string(owner_.options_.read_timeout_ms) +
                          " ms");
      }
      return close();
    }
    if (ec == http::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::connection_reset ||
        ec == asio::error::operation_aborted) {
      return close();
    }
    if (ec.category() ==
        http::make_error_code(http::error::bad_target).category()) {
      return refuse(400, "bad-request",
                    "malformed HTTP request: " + ec.message());
    }
    return close();
  }

  void refuse(unsigned status, std::string_view code,
              const std::string& message) {
    write(error_response(status, code, message), false);
  }

  void on_read(beast::error_code ec) {
    if (ec) {
      return on_read_error(ec);
    }
    read_timer_.cancel();
    auto message = parser_->release();
    http_request request;
    request.method = text_of(message.method_string());
    request.target = text_of(message.target());
    for (const auto& field : message) {
      request.headers.emplace_back(lower(field.name_string()),
                                   text_of(field.value()));
    }
    request.body = std::move(message.body());
    bool keep_alive = message.keep_alive();
    stream_.expires_never();
    if (owner_.options_.answer_inline) {
      std::optional<http_response> response;
      try {
        response = owner_.options_.answer_inline(request);
      } catch (const std::exception& e) {
        response = error_response(500, "internal",
                                  std::string("unexpected error: ") + e.what());
      }
      if (response) {
        return write(std::move(*response), keep_alive);
      }
    }
    if (owner_.options_.answer_async) {
      owner_.request_began();
      auto reply = [self = shared_from_this(),
                    keep_alive](http_response response) {
        asio::dispatch(
            self->stream_.get_executor(),
            [self, response = std::move(response), keep_alive]() mutable {
              self->write(std::move(response), keep_alive);
              self->owner_.request_answered();
            });
      };
      bool taken = false;
      try {
        taken = owner_.options_.answer_async(request, std::move(reply));
      } catch (const std::exception&) {
        taken = false;  // nothing was taken: the worker answers it
      }
      if (taken) {
        return;
      }
      owner_.request_answered();
    }
    owner_.request_began();
    asio::post(owner_.workers_, [self = shared_from_this(),
                                 request = std::move(request), keep_alive] {
      http_response response;
      try {
        response = self->owner_.handler_(request);
      } catch (const std::exception& e) {
        response = error_response(500, "internal",
                                  std::string("unexpected error: ") + e.what());
      }
      asio::dispatch(
          self->stream_.get_executor(),
          [self, response = std::move(response), keep_alive]() mutable {
            self->write(std::move(response), keep_alive);
            self->owner_.request_answered();
          });
    });
  }

  void write(http_response response, bool keep_alive) {
    auto message = std::make_shared<http::response<http::string_body>>();
    message->version(11);
    message->result(response.status);
    message->set(http::field::server, "durin");
    if (!response.content_type.empty()) {
      message->set(http::field::content_type, response.content_type);
    }
    for (const auto& [name, value] : response.headers) {
      message->set(name, value);
    }
    message->body() = std::move(response.body);
    message->keep_alive(keep_alive);
    message->prepare_payload();
    stream_.expires_after(
        std::chrono::milliseconds(owner_.options_.read_timeout_ms));
    http::async_write(stream_, *message,
                      [self = shared_from_this(), message, keep_alive](
                          beast::error_code ec, std::size_t) {
                        if (ec) {
                          return self->close();
                        }
                        if (!keep_alive) {
                          return self->drain_and_close();
                        }
                        self->read();
                      });
  }

  // After an answer that ends the connection (413, 408, 400 ...): stop
  // sending, then read and drop what the client still sends, for at most
  // drain_bytes_max and read_timeout_ms, so that closing with unread bytes
  // does not reset the connection before the client has read the answer.
  void drain_and_close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(
        std::chrono::milliseconds(owner_.options_.read_timeout_ms));
    drain();
  }

  void drain() {
    static constexpr std::size_t drain_bytes_max = 16u << 20;
    drain_buffer_.resize(64 * 1024);
    stream_.async_read_some(
        asio::buffer(drain_buffer_),
        [self = shared_from_this()](beast::error_code ec, std::size_t got) {
          self->drained_bytes_ += got;
          if (ec || self->drained_bytes_ > drain_bytes_max) {
            return self->close();
          }
          self->drain();
        });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  gateway_impl& owner_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  asio::steady_timer read_timer_;
  bool timed_out_ = false;
  std::vector<char> drain_buffer_;
  std::size_t drained_bytes_ = 0;
};

}  // namespace

void gateway_impl::accept() {
  acceptor_.async_accept(
      asio::make_strand(io_), [this](beast::error_code ec, tcp::socket socket) {
        if (ec) {
          if (ec == asio::error::operation_aborted || !acceptor_.is_open()) {
            return;
          }
        } else {
          socket.set_option(tcp::no_delay(true), ec);
          std::make_shared<session>(std::move(socket), *this)->run();
        }
        accept();
      });
}

result<std::unique_ptr<gateway>> gateway::start(gateway_options options,
                                                http_handler handler) {
  auto impl =
      std::make_unique<gateway_impl>(std::move(options), std::move(handler));
  if (auto opened = impl->open(); !opened) {
    return opened.error();
  }
  return std::unique_ptr<gateway>(new gateway(std::move(impl)));
}

gateway::gateway(std::unique_ptr<gateway_impl> impl) : impl_(std::move(impl)) {}

gateway::~gateway() {
  stop();
}

std::uint16_t gateway::port() const {
  return impl_->port();
}

void gateway::stop() {
  impl_->stop();
}

}  // namespace durin::cluster
