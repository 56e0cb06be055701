#include "cluster/etcd_watch.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <optional>
#include <system_error>
#include <thread>

#include "cluster/detail/etcd_wire.hpp"
#include "durin/json.hpp"
#include "persistence/assert.hpp"

namespace durin::cluster {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr std::chrono::milliseconds backoff_first{50};
constexpr std::chrono::milliseconds backoff_max{1000};
// TCP keepalive on the stream: a silent watch is normal, a silent peer is
// not; 5 s idle, then 3 probes 1 s apart.
constexpr int keepalive_idle_s = 5;
constexpr int keepalive_interval_s = 1;
constexpr int keepalive_probes = 3;

}  // namespace

// The watch's thread and everything it touches. Every socket, timer and
// buffer is used on that thread only: stop() reaches them by posting onto
// the thread's io_context, which aborts whatever operation is pending.
class etcd_watch::runner {
 public:
  runner(std::vector<detail::endpoint> endpoints, watch_options options,
         events_handler on_events, lost_handler on_lost)
      : endpoints_(std::move(endpoints)),
        options_(std::move(options)),
        on_events_(std::move(on_events)),
        on_lost_(std::move(on_lost)),
        next_revision_(options_.start_revision) {}

  ~runner() { stop(); }

  void start() {
    thread_ = std::thread([this] { run(); });
  }

  void stop() {
    if (!thread_.joinable()) {
      return;
    }
    DURIN_ASSERT(std::this_thread::get_id() != thread_.get_id(),
                 "an etcd_watch destroyed from its own callback");
    stopping_ = true;
    asio::post(io_, [this] { abort_pending(); });
    thread_.join();
  }

  std::int64_t streams_created() const { return streams_created_; }

 private:
  enum class outcome {
    broken,          // reconnect with the backoff going on
    broken_healthy,  // it had been confirmed: reconnect from the first backoff
    lost,            // cannot resume: on_lost
    stopped,
  };

  void run() {
    auto backoff = backoff_first;
    while (!stopping_) {
      auto how = stream_once();
      if (stream_) {
        beast::error_code ignored;
        stream_->socket().close(ignored);
        stream_.reset();
      }
      if (how == outcome::stopped || stopping_) {
        return;
      }
      if (how == outcome::lost) {
        on_lost_();
        return;
      }
      if (how == outcome::broken_healthy) {
        backoff = backoff_first;
      }
      current_ = (current_ + 1) % endpoints_.size();
      timer_.expires_after(backoff);
      await([&](auto finish) { timer_.async_wait(finish); });
      backoff = std::min(backoff * 2, backoff_max);
    }
  }

  // Runs one asynchronous operation to its end on this thread. `initiate`
  // starts it with a completion handler taking an error code.
  template <class Initiate>
  beast::error_code await(Initiate initiate) {
    std::optional<beast::error_code> done;
    initiate([&done](beast::error_code ec, auto&&...) { done = ec; });
    io_.restart();
    io_.run();
    return done.value_or(asio::error::operation_aborted);
  }

  void abort_pending() {
    beast::error_code ignored;
    resolver_.cancel();
    timer_.cancel();
    if (stream_) {
      stream_->socket().close(ignored);
    }
  }

  // One connection: connect, create the watch, deliver until it breaks.
  outcome stream_once() {
    const auto& target = endpoints_[current_].address;
    tcp::resolver::results_type resolved;
    auto ec = await([&](auto finish) {
      resolver_.async_resolve(
          target.host, target.port,
          [&resolved, finish](beast::error_code e,
                              tcp::resolver::results_type found) mutable {
            resolved = std::move(found);
            finish(e);
          });
    });
    if (stopping_) {
      return outcome::stopped;
    }
    if (ec) {
      return outcome::broken;
    }
    stream_.emplace(io_);
    stream_->expires_after(std::chrono::milliseconds(options_.timeout_ms));
    ec = await([&](auto finish) { stream_->async_connect(resolved, finish); });
    if (stopping_) {
      return outcome::stopped;
    }
    if (ec) {
      return outcome::broken;
    }
    set_keepalive();
    auto request = create_request();
    ec = await(
        [&](auto finish) { http::async_write(*stream_, request, finish); });
    if (stopping_) {
      return outcome::stopped;
    }
    if (ec) {
      return outcome::broken;
    }
    return read_stream();
  }

  http::request<http::string_body> create_request() const {
    json create = {{"key", detail::base64_encode(options_.key)}};
    if (options_.prefix) {
      create["range_end"] = detail::base64_encode(prefix_end(options_.key));
    }
    if (next_revision_ > 0) {
      create["start_revision"] = std::to_string(next_revision_);
    }
    if (options_.prev_kv) {
      create["prev_kv"] = true;
    }
    http::request<http::string_body> request{http::verb::post, "/v3/watch", 11};
    request.set(http::field::host, endpoints_[current_].address.host);
    request.set(http::field::content_type, "application/json");
    request.body() = json{{"create_request", std::move(create)}}.dump();
    request.prepare_payload();
    return request;
  }

  void set_keepalive() {
    beast::error_code ignored;
    auto& socket = stream_->socket();
    socket.set_option(asio::socket_base::keep_alive(true), ignored);
    int handle = socket.native_handle();
    ::setsockopt(handle, IPPROTO_TCP, TCP_KEEPIDLE, &keepalive_idle_s,
                 sizeof keepalive_idle_s);
    ::setsockopt(handle, IPPROTO_TCP, TCP_KEEPINTVL, &keepalive_interval_s,
                 sizeof keepalive_interval_s);
    ::setsockopt(handle, IPPROTO_TCP, TCP_KEEPCNT, &keepalive_probes,
                 sizeof keepalive_probes);
  }

  outcome read_stream() {
    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    // The stream has no end: memory is bounded per line instead.
    parser.body_limit(boost::none);
    auto ec = await([&](auto finish) {
      http::async_read_header(*stream_, buffer, parser, finish);
    });
    if (stopping_) {
      return outcome::stopped;
    }
    if (ec || parser.get().result() != http::status::ok) {
      return outcome::broken;
    }
    stream_->expires_never();
    bool healthy = false;
    std::string pending;
    std::array<char, 16 << 10> chunk;
    for (;;) {
      parser.get().body().data = chunk.data();
      parser.get().body().size = chunk.size();
      ec = await([&](auto finish) {
        http::async_read_some(*stream_, buffer, parser, finish);
      });
      if (stopping_) {
        return outcome::stopped;
      }
      if (ec && ec != http::error::need_buffer) {
        return healthy ? outcome::broken_healthy : outcome::broken;
      }
      pending.append(chunk.data(), chunk.size() - parser.get().body().size);
      if (auto how = deliver_lines(pending, healthy)) {
        return *how;
      }
      if (parser.is_done()) {
        return healthy ? outcome::broken_healthy : outcome::broken;
      }
    }
  }

  // Handles each complete line of `pending` and drops it; an outcome when
  // the stream must end.
  std::optional<outcome> deliver_lines(std::string& pending, bool& healthy) {
    std::size_t from = 0;
    for (auto end = pending.find('\n'); end != std::string::npos;
         end = pending.find('\n', from)) {
      auto how = handle_line(std::string_view(pending).substr(from, end - from),
                             healthy);
      from = end + 1;
      if (how) {
        return how;
      }
    }
    pending.erase(0, from);
    if (pending.size() > watch_line_bytes_max) {
      return outcome::lost;
    }
    return std::nullopt;
  }

  std::optional<outcome> handle_line(std::string_view line, bool& healthy) {
    if (line.find_first_not_of(" \r\t") == std::string_view::npos) {
      return std::nullopt;
    }
    auto broken = healthy ? outcome::broken_healthy : outcome::broken;
    auto message = json::parse(line, nullptr, false);
    // {"error": ...} is a gRPC error on the stream (no leader, say): the
    // member cannot serve now, another may.
    if (!message.is_object() || !message.contains("result")) {
      return broken;
    }
    const auto& answer = message["result"];
    auto compacted = detail::int64_field(answer, "compact_revision");
    auto canceled = answer.find("canceled");
    if (!compacted || *compacted > 0 ||
        (canceled != answer.end() && canceled->is_boolean() &&
         canceled->get<bool>())) {
      return outcome::lost;
    }
    auto created = answer.find("created");
    if (created != answer.end() && created->is_boolean() &&
        created->get<bool>()) {
      healthy = true;
      ++streams_created_;
      // Watching "from now": now is the header's revision, and a resume
      // must not skip what comes after it.
      if (next_revision_ == 0) {
        auto header = answer.find("header");
        if (header == answer.end()) {
          return outcome::lost;
        }
        auto now = detail::int64_field(*header, "revision");
        if (!now) {
          return outcome::lost;
        }
        next_revision_ = *now + 1;
      }
    }
    auto events = answer.find("events");
    if (events == answer.end()) {
      return std::nullopt;
    }
    return deliver(*events);
  }

  std::optional<outcome> deliver(const json& events) {
    if (!events.is_array()) {
      return outcome::lost;
    }
    std::vector<watch_event> batch;
    for (const auto& item : events) {
      auto event = decode_event(item);
      // What etcd sent cannot be read, and a resume would read it again.
      if (!event) {
        return outcome::lost;
      }
      // Owners rely on "each revision once": never hand back one that was
      // delivered before a resume.
      if (event->now.mod_revision < next_revision_) {
        continue;
      }
      batch.push_back(std::move(*event));
    }
    if (batch.empty()) {
      return std::nullopt;
    }
    auto revision = batch.back().now.mod_revision;
    next_revision_ = revision + 1;
    if (stopping_) {
      return outcome::stopped;
    }
    on_events_(std::move(batch), revision);
    return std::nullopt;
  }

  static result<watch_event> decode_event(const json& item) {
    if (!item.is_object() || !item.contains("kv")) {
      return make_error(errc::internal, "etcd sent a malformed watch event");
    }
    watch_event event;
    auto type = item.find("type");
    // proto3 omits the default: a put has no "type".
    if (type != item.end()) {
      if (*type == "DELETE") {
        event.what = watch_event::type::erase;
      } else if (*type != "PUT") {
        return make_error(errc::internal,
                          "etcd sent a watch event of type " + type->dump());
      }
    }
    auto now = detail::decode_kv(item["kv"]);
    if (!now) {
      return now.error();
    }
    event.now = std::move(*now);
    auto previous = item.find("prev_kv");
    if (previous != item.end()) {
      auto before = detail::decode_kv(*previous);
      if (!before) {
        return before.error();
      }
      event.previous = std::move(*before);
    }
    return event;
  }

  // Declared first, destroyed last: the timer, resolver and stream use it.
  asio::io_context io_;
  asio::steady_timer timer_{io_};
  tcp::resolver resolver_{io_};
  std::optional<beast::tcp_stream> stream_;

  const std::vector<detail::endpoint> endpoints_;
  const watch_options options_;
  const events_handler on_events_;
  const lost_handler on_lost_;
  std::size_t current_ = 0;  // the endpoint of the next connection
  // The revision a resume starts at: the last delivered event's + 1. 0 only
  // while watching "from now" before etcd confirmed the watch.
  std::int64_t next_revision_ = 0;

  std::atomic<bool> stopping_{false};
  std::atomic<std::int64_t> streams_created_{0};
  std::thread thread_;
};

result<etcd_watch> etcd_watch::start(std::string_view endpoints,
                                     watch_options options,
                                     events_handler on_events,
                                     lost_handler on_lost) {
  auto parsed = detail::parse_endpoints(endpoints);
  if (!parsed) {
    return parsed.error();
  }
  if (options.key.empty() || options.start_revision < 0 ||
      options.timeout_ms <= 0 || !on_events || !on_lost) {
    return make_error(errc::invalid_argument,
                      "a watch needs a key, a start revision >= 0, a positive "
                      "timeout and both callbacks");
  }
  auto made =
      std::make_unique<runner>(std::move(*parsed), std::move(options),
                               std::move(on_events), std::move(on_lost));
  try {
    made->start();
  } catch (const std::system_error& failure) {
    return make_error(
        errc::internal,
        std::string("cannot start a watch's thread: ") + failure.what());
  }
  return etcd_watch(std::move(made));
}

etcd_watch::etcd_watch(std::unique_ptr<runner> runner)
    : runner_(std::move(runner)) {}
etcd_watch::etcd_watch(etcd_watch&&) noexcept = default;
etcd_watch::~etcd_watch() = default;

std::int64_t etcd_watch::streams_created() const {
  return runner_->streams_created();
}

}  // namespace durin::cluster
