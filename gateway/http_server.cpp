#include "gateway/http_server.hpp"

#include "gateway/idempotency.hpp"

#include <array>
#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace durin::gateway {

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

class http_server_impl : public std::enable_shared_from_this<http_server_impl> {
 public:
  http_server_impl(http_server_options options, http_handler handler)
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

  http_server_options options_;
  http_handler handler_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::thread_pool workers_;
  const offload_fn offload_{[this](std::function<void()> job) {
    asio::post(workers_, std::move(job));
  }};
  std::vector<std::thread> threads_;
  std::uint16_t port_ = 0;
  std::mutex stop_mutex_;
  bool stopped_ = false;
  std::mutex drain_mutex_;
  std::condition_variable drained_;
  std::size_t in_flight_ = 0;
};

namespace {

// One connection: read a request, answer it (inline, asynchronously or on a
// worker), write the answer, repeat while keep-alive. All socket work runs
// on the connection's executor (a strand when there are several io threads).
//
// Deadlines: one timer per connection, re-armed lazily. Reading a request
// or writing an answer only moves `deadline_`; the timer, when it fires,
// either finds the deadline passed (and cancels the socket) or waits again
// until it. Arming and cancelling a timer per request cost more than the
// request itself on a loaded io thread.
class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket socket, http_server_impl& owner)
      : socket_(std::move(socket)),
        owner_(owner),
        timer_(socket_.get_executor()) {}

  void run() {
    asio::dispatch(socket_.get_executor(),
                   [self = shared_from_this()] { self->read(); });
  }

 private:
  using time_point = std::chrono::steady_clock::time_point;

  enum class phase { reading, handling, writing, closed };

  time_point deadline_from_now() const {
    return std::chrono::steady_clock::now() +
           std::chrono::milliseconds(owner_.options_.read_timeout_ms);
  }

  // The connection's only timer: it cancels the socket when a read or a
  // write outlives `deadline_`. While a handler runs there is no deadline
  // (the handler has its own limits).
  void watch() {
    watching_ = true;
    timer_.expires_at(phase_ == phase::handling ? deadline_from_now()
                                                : deadline_);
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      self->watching_ = false;
      if (ec || self->phase_ == phase::closed) {
        return;
      }
      if (self->phase_ != phase::handling &&
          std::chrono::steady_clock::now() >= self->deadline_) {
        self->timed_out_ = true;
        beast::error_code ignored;
        self->socket_.cancel(ignored);
        return;
      }
      self->watch();
    });
  }

  // Sets the deadline of the read or write that begins now; after a timeout
  // the timer rests until the next one (the answer to it, the drain).
  void set_deadline() {
    deadline_ = deadline_from_now();
    if (!watching_) {
      watch();
    }
  }

  void read() {
    parser_.emplace();
    parser_->header_limit(
        static_cast<std::uint32_t>(owner_.options_.header_bytes_max));
    parser_->body_limit(owner_.options_.body_bytes_max);
    // One deadline for the whole header, idle or not: a connection that
    // sends nothing, or drips bytes, is cut off after read_timeout_ms. The
    // timer cancels the read rather than closing the socket, so a partial
    // request still gets its 408.
    phase_ = phase::reading;
    timed_out_ = false;
    set_deadline();
    http::async_read_header(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) {
          self->on_header(ec);
        });
  }

  void on_header(beast::error_code ec) {
    if (ec) {
      return on_read_error(ec);
    }
    deadline_ = deadline_from_now();  // the body gets its own read_timeout_ms
    http::async_read(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) {
          self->on_read(ec);
        });
  }

  void on_read_error(beast::error_code ec) {
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
    phase_ = phase::handling;
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
    if (owner_.options_.dispatch) {
      owner_.request_began();
      auto reply = [self = shared_from_this(),
                    keep_alive](http_response response) {
        asio::dispatch(
            self->socket_.get_executor(),
            [self, response = std::move(response), keep_alive]() mutable {
              self->write(std::move(response), keep_alive);
              self->owner_.request_answered();
            });
      };
      owner_.options_.dispatch(std::move(request), std::move(reply),
                               owner_.offload_);
      return;
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
          self->socket_.get_executor(),
          [self, response = std::move(response), keep_alive]() mutable {
            self->write(std::move(response), keep_alive);
            self->owner_.request_answered();
          });
    });
  }

  // Appends "name: value\r\n"; a value with CR or LF is dropped, so no
  // header can split the answer.
  void add_header(std::string_view name, std::string_view value) {
    if (value.find_first_of("\r\n") != std::string_view::npos) {
      return;
    }
    head_.append(name).append(": ").append(value).append("\r\n");
  }

  // The answer is formatted by hand into a buffer the connection keeps
  // (its capacity survives requests) and written with the body as a second
  // buffer: no serializer state and no copy of the body.
  void write(http_response response, bool keep_alive) {
    if (phase_ == phase::closed) {
      return;
    }
    phase_ = phase::writing;
    set_deadline();
    const auto status = static_cast<http::status>(response.status);
    head_.clear();
    head_.append("HTTP/1.1 ").append(std::to_string(response.status));
    const auto reason = http::obsolete_reason(status);
    head_.append(" ").append(reason.data(), reason.size()).append("\r\n");
    add_header("Server", "durin");
    if (!response.content_type.empty()) {
      add_header("Content-Type", response.content_type);
    }
    for (const auto& [name, value] : response.headers) {
      add_header(name, value);
    }
    const bool bodiless = response.status < 200 || response.status == 204 ||
                          response.status == 304;
    if (!bodiless) {
      add_header("Content-Length", std::to_string(response.body.size()));
    } else {
      response.body.clear();
    }
    if (!keep_alive) {
      add_header("Connection", "close");
    }
    head_.append("\r\n");
    body_ = std::move(response.body);
    std::array<asio::const_buffer, 2> buffers{asio::buffer(head_),
                                              asio::buffer(body_)};
    asio::async_write(socket_, buffers,
                      [self = shared_from_this(), keep_alive](
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
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    phase_ = phase::reading;
    timed_out_ = false;
    set_deadline();
    drain();
  }

  void drain() {
    static constexpr std::size_t drain_bytes_max = 16u << 20;
    drain_buffer_.resize(64 * 1024);
    socket_.async_read_some(
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
    phase_ = phase::closed;
    timer_.cancel();
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    socket_.close(ignored);
  }

  tcp::socket socket_;
  http_server_impl& owner_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  asio::steady_timer timer_;
  phase phase_ = phase::reading;
  time_point deadline_ = time_point::max();
  bool timed_out_ = false;
  bool watching_ = false;  // the timer has a wait pending
  std::string head_;
  std::string body_;
  std::vector<char> drain_buffer_;
  std::size_t drained_bytes_ = 0;
};

}  // namespace

void http_server_impl::accept() {
  // With one io thread every handler already runs in order on it: a strand
  // per connection would only add a queue hop to each handler.
  auto on_accept = [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) {
        return;
      }
    } else {
      socket.set_option(tcp::no_delay(true), ec);
      std::make_shared<session>(std::move(socket), *this)->run();
    }
    accept();
  };
  if (options_.io_threads > 1) {
    acceptor_.async_accept(asio::make_strand(io_), std::move(on_accept));
  } else {
    acceptor_.async_accept(io_, std::move(on_accept));
  }
}

result<std::unique_ptr<http_server>> http_server::start(
    http_server_options options, http_handler handler) {
  auto impl = std::make_unique<http_server_impl>(std::move(options),
                                                 std::move(handler));
  if (auto opened = impl->open(); !opened) {
    return opened.error();
  }
  return std::unique_ptr<http_server>(new http_server(std::move(impl)));
}

http_server::http_server(std::unique_ptr<http_server_impl> impl)
    : impl_(std::move(impl)) {}

http_server::~http_server() {
  stop();
}

std::uint16_t http_server::port() const {
  return impl_->port();
}

void http_server::stop() {
  impl_->stop();
}

}  // namespace durin::gateway
