#include "gateway/http_server.hpp"

#include "gateway/idempotency.hpp"

#include <sys/resource.h>
#include <array>
#include <atomic>

#include <algorithm>
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
#include <iostream>
#include <map>
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

// RFC 9112 6.3: the body of a request is framed by a single final
// `chunked` coding or by one Content-Length. A proxy in front may frame
// any other combination differently (request smuggling), so this server
// refuses them rather than guess: another transfer coding (gzip, identity,
// `chunked, gzip`, `gzip, chunked`, chunked twice), Transfer-Encoding with
// Content-Length, more than one Content-Length. Beast 1.74 rejects some of
// these itself; here is the whole rule. The problem, or nullopt.
template <class Fields>
std::optional<std::string> framing_problem(const Fields& header) {
  std::size_t lengths = 0;
  std::vector<std::string> codings;
  for (const auto& field : header) {
    if (field.name() == http::field::content_length) {
      lengths += 1 + static_cast<std::size_t>(std::count(
                         field.value().begin(), field.value().end(), ','));
    } else if (field.name() == http::field::transfer_encoding) {
      std::string value = lower(field.value());
      std::size_t at = 0;
      while (at <= value.size()) {
        auto comma = std::min(value.find(',', at), value.size());
        auto first = value.find_first_not_of(" \t", at);
        auto last = value.find_last_not_of(" \t", comma - 1);
        if (first < comma && last != std::string::npos && last >= first) {
          codings.push_back(value.substr(first, last - first + 1));
        }
        at = comma + 1;
      }
    }
  }
  if (lengths > 1) {
    return "more than one Content-Length";
  }
  if (codings.empty()) {
    return std::nullopt;
  }
  if (lengths > 0) {
    return "Content-Length together with Transfer-Encoding";
  }
  if (codings.size() != 1 || codings.front() != "chunked") {
    std::string list;
    for (const auto& coding : codings) {
      list += (list.empty() ? "" : ", ") + coding;
    }
    return "Transfer-Encoding '" + list +
           "' is not accepted: the only transfer coding is a single chunked";
  }
  return std::nullopt;
}

// RFC 9112 3.2: an HTTP/1.1 request carries exactly one Host (an HTTP/1.0
// one at most one). A server that guesses the missing or doubled authority
// differently from a proxy in front of it can be made to route a request
// elsewhere than the proxy checked. The problem, or nullopt.
template <class Message>
std::optional<std::string> host_problem(const Message& header) {
  std::size_t hosts = 0;
  for (const auto& field : header) {
    hosts += field.name() == http::field::host ? 1 : 0;
  }
  if (hosts > 1) {
    return std::string("more than one Host header");
  }
  if (hosts == 0 && header.version() >= 11) {
    return std::string("an HTTP/1.1 request needs a Host header");
  }
  return std::nullopt;
}

// Whether the client waits for `100 Continue` before it sends the body
// (RFC 9110 10.1.1; an HTTP/1.0 client's expectation is ignored).
template <class Message>
bool expects_continue(const Message& header) {
  if (header.version() < 11) {
    return false;
  }
  for (const auto& field : header) {
    if (field.name() == http::field::expect &&
        lower(field.value()).find("100-continue") != std::string::npos) {
      return true;
    }
  }
  return false;
}

class session;

}  // namespace

class http_server_impl : public std::enable_shared_from_this<http_server_impl> {
 public:
  http_server_impl(http_server_options options, http_handler handler)
      : options_(std::move(options)),
        handler_(std::move(handler)),
        accept_strand_(asio::make_strand(io_)),
        acceptor_(accept_strand_),
        accept_timer_(accept_strand_),
        workers_(options_.worker_threads),
        connections_max_(connections_max_of(options_.connections_max)) {}

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
    asio::dispatch(accept_strand_, [this] { accept(); });
    for (std::size_t i = 0; i < std::max<std::size_t>(1, options_.io_threads);
         ++i) {
      threads_.emplace_back([this] { io_.run(); });
    }
    return {};
  }

  // The drain: no new connection; idle ones close at once, the others after
  // answering what they received (keep-alive off); then the io threads end.
  void stop();

  std::uint16_t port() const { return port_; }
  std::size_t connections_max() const { return connections_max_; }
  bool draining() const { return draining_.load(std::memory_order_acquire); }

  // A connection ended: forgets it (the drain waits for none to be left).
  void forget(std::uint64_t id) {
    std::lock_guard lock(sessions_mutex_);
    sessions_.erase(id);
    if (sessions_.empty()) {
      sessions_closed_.notify_all();
    }
  }

  // REQUIRES: on accept_strand_.
  void accept();

  http_server_options options_;
  http_handler handler_;
  // Before io_: sessions forget themselves while io_ is destroyed.
  std::mutex sessions_mutex_;
  std::condition_variable sessions_closed_;
  // Open connections by age (ids grow): the drain and shedding walk them.
  std::map<std::uint64_t, std::weak_ptr<session>> sessions_;
  std::uint64_t next_session_id_ = 0;
  // Connections being refused (over the limit): answered, then closed.
  std::atomic<std::size_t> refusing_{0};
  asio::io_context io_;
  asio::strand<asio::io_context::executor_type> accept_strand_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_timer_;
  asio::thread_pool workers_;
  const offload_fn offload_{[this](std::function<void()> job) {
    asio::post(workers_, std::move(job));
  }};
  std::vector<std::thread> threads_;
  std::uint16_t port_ = 0;
  const std::size_t connections_max_;
  std::mutex stop_mutex_;
  bool stopped_ = false;
  std::atomic<bool> draining_{false};

 private:
  static std::size_t connections_max_of(std::size_t wanted) {
    if (wanted > 0) {
      return wanted;
    }
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 ||
        limit.rlim_cur == RLIM_INFINITY) {
      return connections_default_max;
    }
    return std::clamp<std::size_t>(static_cast<std::size_t>(limit.rlim_cur) / 2,
                                   1, connections_default_max);
  }

  // REQUIRES: on accept_strand_. A new connection: served, or refused
  // over the limit.
  void admit(tcp::socket socket);
  // REQUIRES: on accept_strand_. Out of descriptors: closes the newest idle
  // connections and accepts again after a backoff.
  void back_off(const beast::error_code& ec);

  static constexpr std::size_t connections_default_max = 10'000;
  // Refusals answered at once; beyond, a connection is closed unanswered.
  static constexpr std::size_t refusing_max = 64;
  // Idle connections closed each time accept runs out of descriptors.
  static constexpr std::size_t shed_batch = 8;
  std::chrono::milliseconds accept_backoff_{0};
  std::uint64_t descriptor_shortages_ = 0;
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
//
// Memory: an open connection holds its read buffer (grown to the largest
// header it read) and its last answer; a closing one holds neither.
class session : public std::enable_shared_from_this<session> {
 public:
  // `id` 0: a connection over the limit, refused at once (refuse_connection).
  session(tcp::socket socket, http_server_impl& owner, std::uint64_t id)
      : socket_(std::move(socket)),
        owner_(owner),
        timer_(socket_.get_executor()),
        id_(id) {
    if (id_ == 0) {
      owner_.refusing_.fetch_add(1);
    }
  }
  ~session() { unregister(); }
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  void run() {
    asio::dispatch(socket_.get_executor(),
                   [self = shared_from_this()] { self->read(); });
  }

  // Answers 503 too-many-connections without reading, then closes.
  void refuse_connection() {
    asio::dispatch(socket_.get_executor(), [self = shared_from_this()] {
      auto response = error_response(
          503, "too-many-connections",
          "the server has " + std::to_string(self->owner_.connections_max()) +
              " connections open, its limit; retry later");
      response.headers.emplace_back("Retry-After", "1");
      self->write(std::move(response), false);
    });
  }

  // The drain timed out with this connection's request unanswered: it is
  // answered 503 shutting-down, its outcome unknown (a later answer from
  // its handler is dropped). Any thread.
  void answer_unfinished() {
    asio::dispatch(socket_.get_executor(), [self = shared_from_this()] {
      if (self->phase_ == phase::handling) {
        self->write(
            error_response(503, "shutting-down",
                           "the node stopped before this request was "
                           "answered; it may or may not have taken effect: "
                           "retry it with the same Idempotency-Key"),
            false);
      }
    });
  }

  // True while it waits for a request and has received nothing (checked
  // again on its executor before anything is closed).
  bool may_be_idle() const { return idle_.load(std::memory_order_relaxed); }

  // The server drains or sheds: an idle connection closes now; one that is
  // reading, handling or writing a request finishes it first (the drain
  // turns keep-alive off). Its pending read is cancelled, not the socket
  // closed: bytes the read already took are seen when it ends (on_header),
  // so a request that just arrived is answered, not dropped. Any thread.
  void close_if_idle() {
    asio::dispatch(socket_.get_executor(), [self = shared_from_this()] {
      if (self->phase_ == phase::reading && self->quiet()) {
        self->idle_cancelled_ = true;
        beast::error_code ignored;
        self->socket_.cancel(ignored);
      }
    });
  }

 private:
  using time_point = std::chrono::steady_clock::time_point;

  enum class phase { reading, handling, writing, lingering, closed };

  time_point deadline_from_now(std::int64_t ms) const {
    return std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  }
  time_point deadline_from_now() const {
    return deadline_from_now(owner_.options_.read_timeout_ms);
  }

  // Nothing of a next request has arrived: not in the buffer, not in the
  // parser, not waiting in the socket.
  bool quiet() {
    if (buffer_.size() > 0 || (parser_ && parser_->got_some())) {
      return false;
    }
    beast::error_code ec;
    auto pending = socket_.available(ec);
    return !ec && pending == 0;
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
  void set_deadline(std::int64_t ms) {
    deadline_ = deadline_from_now(ms);
    if (!watching_) {
      watch();
    }
  }
  void set_deadline() { set_deadline(owner_.options_.read_timeout_ms); }

  void read() {
    if (phase_ == phase::closed) {
      return;
    }
    // Accepted as the drain began: it gets nothing more to wait for.
    idle_cancelled_ = false;
    answered_ = false;
    head_request_ = false;
    if (owner_.draining() && quiet()) {
      return close();
    }
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
    idle_.store(buffer_.size() == 0, std::memory_order_relaxed);
    set_deadline();
    http::async_read_header(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) {
          self->on_header(ec);
        });
  }

  void on_header(beast::error_code ec) {
    idle_.store(false, std::memory_order_relaxed);
    if (phase_ == phase::closed) {
      return;
    }
    if (ec == asio::error::operation_aborted && idle_cancelled_) {
      // close_if_idle: closes unless a request began meanwhile.
      return quiet() ? close() : read();
    }
    if (ec) {
      return on_read_error(ec);
    }
    head_request_ = parser_->get().method() == http::verb::head;
    if (auto problem = framing_problem(parser_->get())) {
      return refuse(400, "bad-request", "malformed HTTP request: " + *problem);
    }
    if (auto problem = host_problem(parser_->get())) {
      return refuse(400, "bad-request", "malformed HTTP request: " + *problem);
    }
    deadline_ = deadline_from_now();  // the body gets its own read_timeout_ms
    // Refusals the header decides (413 for its Content-Length, 400 for its
    // framing) were answered above, without a 100. Once a byte of the body
    // has arrived the client no longer waits for one.
    if (expects_continue(parser_->get()) && !parser_->is_done() &&
        buffer_.size() == 0) {
      static constexpr std::string_view continue_line =
          "HTTP/1.1 100 Continue\r\n\r\n";
      return asio::async_write(
          socket_, asio::buffer(continue_line),
          [self = shared_from_this()](beast::error_code ec, std::size_t) {
            if (ec || self->phase_ == phase::closed) {
              return self->close();
            }
            self->read_body();
          });
    }
    read_body();
  }

  void read_body() {
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
    if (phase_ == phase::closed) {
      return;
    }
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
      auto reply = [self = shared_from_this(),
                    keep_alive](http_response response) {
        asio::dispatch(
            self->socket_.get_executor(),
            [self, response = std::move(response), keep_alive]() mutable {
              self->write(std::move(response), keep_alive);
            });
      };
      owner_.options_.dispatch(std::move(request), std::move(reply),
                               owner_.offload_);
      return;
    }
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
  // buffer: no serializer state and no copy of the body. While the server
  // drains, every answer ends its connection.
  void write(http_response response, bool keep_alive) {
    if (phase_ == phase::closed || phase_ == phase::lingering || answered_) {
      return;
    }
    answered_ = true;  // one answer a request
    keep_alive = keep_alive && !owner_.draining();
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
    }
    // A HEAD's answer states the length its GET's body would have, and
    // sends none: the client reads no body after it (RFC 9110 9.3.2).
    if (bodiless || head_request_) {
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
                          return self->linger();
                        }
                        self->read();
                      });
  }

  // After an answer that ends the connection (413, 408, 400, a refusal, the
  // drain): stop sending, then read and drop what the client still sends,
  // for at most drain_bytes_max and linger_ms, so that closing with unread
  // bytes does not reset the connection before the client has read the
  // answer. It keeps no buffer: it waits until the socket is readable and
  // reads into the io thread's stack.
  void linger() {
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    phase_ = phase::lingering;
    timed_out_ = false;
    buffer_ = beast::flat_buffer();
    parser_.reset();
    head_ = std::string();
    body_ = std::string();
    socket_.non_blocking(true, ignored);
    set_deadline(
        std::min(owner_.options_.linger_ms, owner_.options_.read_timeout_ms));
    wait_and_drop();
  }

  void wait_and_drop() {
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](
                                                   beast::error_code ec) {
      if (ec || self->phase_ == phase::closed) {
        return self->close();
      }
      static constexpr std::size_t drain_bytes_max = 16u << 20;
      std::array<char, 4096> dropped;
      for (;;) {
        beast::error_code read_ec;
        auto got = self->socket_.read_some(asio::buffer(dropped), read_ec);
        self->drained_bytes_ += got;
        if (read_ec == asio::error::would_block ||
            read_ec == asio::error::try_again) {
          break;
        }
        if (read_ec || got == 0 || self->drained_bytes_ > drain_bytes_max) {
          return self->close();
        }
      }
      self->wait_and_drop();
    });
  }

  // The connection no longer counts as open (against the limit, for the
  // drain) once its socket is closed, though a reply the handler still
  // holds may keep this object a while.
  void unregister() {
    if (registered_) {
      registered_ = false;
      if (id_ == 0) {
        owner_.refusing_.fetch_sub(1);
      } else {
        owner_.forget(id_);
      }
    }
  }

  void close() {
    if (phase_ == phase::closed) {
      return;
    }
    phase_ = phase::closed;
    idle_.store(false, std::memory_order_relaxed);
    timer_.cancel();
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    socket_.close(ignored);
    unregister();
  }

  tcp::socket socket_;
  http_server_impl& owner_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  asio::steady_timer timer_;
  const std::uint64_t id_;
  bool registered_ = true;  // counted in sessions_ or refusing_
  phase phase_ = phase::reading;
  std::atomic<bool> idle_{true};
  time_point deadline_ = time_point::max();
  bool timed_out_ = false;
  bool idle_cancelled_ = false;  // close_if_idle cancelled the read
  bool answered_ = false;        // the request being read has its answer
  bool head_request_ = false;    // ... and it is a HEAD: answered bodiless
  bool watching_ = false;        // the timer has a wait pending
  std::string head_;
  std::string body_;
  std::size_t drained_bytes_ = 0;
};

}  // namespace

void http_server_impl::accept() {
  // With one io thread every handler already runs in order on it: a strand
  // per connection would only add a queue hop to each handler. Accept
  // handlers run on accept_strand_ (the acceptor's executor).
  auto on_accept = [this](beast::error_code ec, tcp::socket socket) {
    if (!acceptor_.is_open() || ec == asio::error::operation_aborted) {
      return;  // stopping
    }
    if (ec == asio::error::no_descriptors ||
        ec == boost::system::errc::too_many_files_open_in_system ||
        ec == asio::error::no_buffer_space || ec == asio::error::no_memory) {
      return back_off(ec);
    }
    accept_backoff_ = std::chrono::milliseconds(0);
    if (!ec) {
      admit(std::move(socket));
    }
    accept();
  };
  if (options_.io_threads > 1) {
    acceptor_.async_accept(asio::make_strand(io_), std::move(on_accept));
  } else {
    acceptor_.async_accept(io_, std::move(on_accept));
  }
}

void http_server_impl::admit(tcp::socket socket) {
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  std::unique_lock lock(sessions_mutex_);
  if (sessions_.size() >= connections_max_) {
    lock.unlock();
    if (refusing_.load() >= refusing_max) {
      socket.close(ignored);  // refusing costs descriptors too: no answer
      return;
    }
    std::make_shared<session>(std::move(socket), *this, 0)->refuse_connection();
    return;
  }
  auto id = ++next_session_id_;
  auto connection = std::make_shared<session>(std::move(socket), *this, id);
  sessions_.emplace(id, connection);
  lock.unlock();
  connection->run();
}

void http_server_impl::back_off(const beast::error_code& ec) {
  // Collected under the lock, closed outside it: the last reference may
  // go here, and a session forgets itself under the same lock.
  std::vector<std::shared_ptr<session>> newest_idle;
  {
    std::lock_guard lock(sessions_mutex_);
    for (auto it = sessions_.rbegin();
         it != sessions_.rend() && newest_idle.size() < shed_batch; ++it) {
      if (auto connection = it->second.lock();
          connection && connection->may_be_idle()) {
        newest_idle.push_back(std::move(connection));
      }
    }
  }
  const auto shed = newest_idle.size();
  for (auto& connection : newest_idle) {
    connection->close_if_idle();
  }
  newest_idle.clear();
  const bool first = accept_backoff_.count() == 0;
  accept_backoff_ =
      first ? std::chrono::milliseconds(10)
            : std::min(accept_backoff_ * 2, std::chrono::milliseconds(1000));
  if (first && descriptor_shortages_++ % 100 == 0) {
    std::cerr << "accept: " << ec.message() << "; closing up to " << shed
              << " idle connections, accepting again in "
              << accept_backoff_.count() << " ms (shortage "
              << descriptor_shortages_ << ")" << std::endl;
  }
  accept_timer_.expires_after(accept_backoff_);
  accept_timer_.async_wait([this](beast::error_code waited) {
    if (!waited && acceptor_.is_open()) {
      accept();
    }
  });
}

void http_server_impl::stop() {
  std::lock_guard stop_lock(stop_mutex_);
  if (stopped_) {
    return;
  }
  stopped_ = true;
  draining_.store(true, std::memory_order_release);
  asio::post(accept_strand_, [this] {
    beast::error_code ignored;
    acceptor_.close(ignored);
    accept_timer_.cancel();
  });
  std::vector<std::shared_ptr<session>> open;
  {
    std::lock_guard lock(sessions_mutex_);
    for (auto& [id, weak] : sessions_) {
      if (auto connection = weak.lock()) {
        open.push_back(std::move(connection));
      }
    }
  }
  for (auto& connection : open) {
    connection->close_if_idle();
  }
  open.clear();
  if (options_.on_drain) {
    options_.on_drain();
  }
  std::unique_lock lock(sessions_mutex_);
  auto none_open = [this] { return sessions_.empty(); };
  if (!sessions_closed_.wait_for(
          lock, std::chrono::milliseconds(options_.drain_timeout_ms),
          none_open)) {
    // What is still handled is answered as unknown, not cut off.
    for (auto& [id, weak] : sessions_) {
      if (auto connection = weak.lock()) {
        open.push_back(std::move(connection));
      }
    }
    lock.unlock();
    for (auto& connection : open) {
      connection->answer_unfinished();
    }
    open.clear();
    lock.lock();
    sessions_closed_.wait_for(lock, std::chrono::milliseconds(1000), none_open);
  }
  lock.unlock();
  workers_.join();
  io_.stop();
  for (auto& thread : threads_) {
    thread.join();
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

std::size_t http_server::connections_max() const {
  return impl_->connections_max();
}

void http_server::stop() {
  impl_->stop();
}

}  // namespace durin::gateway
