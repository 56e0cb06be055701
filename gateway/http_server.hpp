// The HTTP/1.1 server of a node (Boost.Beast on Boost.Asio). It owns its own
// io_context threads, which only read and write sockets, and a pool of worker
// threads that run the handler (gateway/api.hpp), which may block on durable
// writes. No CAF actor thread is ever used or blocked.
//
// Limits (explicit, per connection): a request's header at most
// `header_bytes_max` (431 beyond), its body at most `body_bytes_max` (413
// beyond); a request must arrive within `read_timeout_ms` of its first byte
// (408, then the connection closes); an idle keep-alive connection closes
// after `read_timeout_ms` too. Framing (RFC 9112 6.3): the only transfer
// coding read is a single `chunked`; any other Transfer-Encoding, one
// together with Content-Length, or more than one Content-Length is 400 and
// the connection closes, so no byte after it is read as a request. A
// request with `Expect: 100-continue` gets `100 Continue` once its header
// is read and refused for nothing (a Content-Length over the limit is 413
// instead, without it), before its body is read. An answer to a HEAD is
// sent without its body: the Content-Length its GET would have, no bytes.
//
// Per server: at most `connections_max` open connections; one more is
// answered 503 `too-many-connections` (Retry-After: 1) and closed without
// reading it. When accept runs out of descriptors (EMFILE, ENFILE) the
// newest idle connections are closed and accepting waits, backing off from
// 10 ms to 1 s, instead of spinning. A connection that ends with an answer
// (an error, a refusal, the drain) is closed after reading and dropping
// what the client still sends, for at most `linger_ms`, with no buffer of
// its own.
//
// Thread-safety: start, port and stop may be called from any thread; stop
// is idempotent. Stop stops accepting, closes idle connections, answers
// every request already received (with `Connection: close`), then closes
// the connections, waiting for all that up to `drain_timeout_ms`; a request
// still unanswered then is answered 503 `shutting-down` (its outcome
// unknown). Stop returns once the worker pool's jobs have returned.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "client/http_message.hpp"
#include "durin/error.hpp"
#include "durin/limits.hpp"

namespace durin::gateway {

using wire::http_request;
using wire::http_response;

using http_handler = std::function<http_response(const http_request&)>;
// Runs a job on one of the gateway's worker threads, which may block.
using offload_fn = std::function<void(std::function<void()>)>;

// A request's answer: called exactly once, from any thread.
using reply_fn = std::function<void(http_response)>;

struct http_server_options {
  // When set, takes every request, on the io thread that read it: it must
  // never block, and calls the reply exactly once, from any thread; work
  // that may block goes to `offload` (a worker). Unset, each request runs
  // the handler given to start() on a worker.
  std::function<void(http_request request, reply_fn reply,
                     const offload_fn& offload)>
      dispatch;
  std::string address = "127.0.0.1";
  std::uint16_t port = 7070;  // 0: any free port (see http_server::port)
  std::size_t io_threads = 2;
  std::size_t worker_threads = 64;
  std::size_t header_bytes_max = 16 * 1024;
  std::size_t body_bytes_max = limits::request_body_bytes_max;
  std::int64_t read_timeout_ms = 10'000;
  std::int64_t drain_timeout_ms = 30'000;
  // Open connections at most; 0: half the process's descriptor limit
  // (RLIMIT_NOFILE), at most 10,000, so the store keeps the other half.
  std::size_t connections_max = 0;
  // How long a closing connection reads and drops what the client still
  // sends (at most read_timeout_ms), so its answer is not lost to a reset.
  std::int64_t linger_ms = 2'000;
  // Called once when stop begins the drain (no new connection; every
  // answer ends its connection), on the stopping thread: end what waits
  // for something other than a write (long polls), so it answers now.
  std::function<void()> on_drain;
};

class http_server_impl;

class http_server {
 public:
  // Binds and starts serving; invalid-argument for a bad address or a
  // failed bind, naming the reason.
  static result<std::unique_ptr<http_server>> start(
      http_server_options options, http_handler handler = nullptr);
  ~http_server();  // stop()

  std::uint16_t port() const;  // the bound port
  // The connection limit in force (connections_max, or the one derived).
  std::size_t connections_max() const;
  // Stops accepting, answers in-flight requests, closes every connection.
  void stop();

 private:
  explicit http_server(std::unique_ptr<http_server_impl> impl);
  std::unique_ptr<http_server_impl> impl_;
};

}  // namespace durin::gateway
