// A TCP forwarder on 127.0.0.1 that a test puts between a client and a
// server to hold, break or partition what flows between them. It listens on
// a port the kernel picked and forwards every connection it accepts to
// 127.0.0.1:upstream, both ways, with half-closes passed on.
//
//   pause()   stops accepting and forwarding: bytes wait in the kernel's
//             buffers and the proxy's own; resume() forwards them.
//   drop_connections()  closes every forwarded connection now (reset, what
//             was held is lost); new ones are forwarded as before.
//   cut()     a partition: every forwarded connection is reset, and new
//             ones are black-holed (the kernel completes their handshake in
//             the listen backlog; nothing is read from them or sent to
//             them, so their callers wait for their own timeouts) until
//             heal(). heal() resets the connections attempted during the
//             cut (they never reached the server) and forwards new ones.
//
// Each control call returns once the forwarding thread has carried it out,
// so after cut() returns not one more byte crosses. Bounded: at most
// `buffer_bytes_max` held per direction of a connection (beyond, the proxy
// stops reading that side: backpressure, not loss). One thread of its own;
// the control calls are thread-safe. Throws std::runtime_error when it
// cannot listen. A write to a connection that went away never raises
// SIGPIPE (the connection is closed instead). Its sockets are TCP_NODELAY,
// so it adds no Nagle delay of its own.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace durin::testing {

// 127.0.0.1:`port` (0: any port) as a socket address.
inline sockaddr_in loopback(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  return address;
}

class tcp_proxy {
 public:
  static constexpr std::size_t buffer_bytes_max = 256 << 10;

  explicit tcp_proxy(int upstream_port);
  ~tcp_proxy();  // closes everything

  tcp_proxy(const tcp_proxy&) = delete;
  tcp_proxy& operator=(const tcp_proxy&) = delete;

  int port() const { return port_; }
  // "127.0.0.1:PORT" and "http://127.0.0.1:PORT".
  std::string address() const;
  std::string url() const { return "http://" + address(); }

  // Connections accepted from now on go to 127.0.0.1:port (a server that
  // restarted on another port); those open keep theirs.
  void set_upstream(int port);

  void pause();
  void resume();
  void drop_connections();
  void cut();
  void heal();

 private:
  struct link;

  // Runs `command` on the forwarding thread; returns once it ran.
  void run_on_thread(std::function<void()> command);
  void wake();
  void run();
  void accept_all();
  void reset_backlog();
  void close_links();
  void pump(const std::vector<pollfd>& polled);

  int upstream_port_;  // forwarding thread only, after the constructor
  int listener_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  bool paused_ = false;      // forwarding thread only
  bool cut_ = false;         // forwarding thread only
  std::vector<link> links_;  // forwarding thread only

  std::mutex mutex_;
  std::condition_variable done_;
  std::vector<std::function<void()>> commands_;  // guarded by mutex_
  std::uint64_t commands_run_ = 0;               // guarded by mutex_
  std::uint64_t commands_sent_ = 0;              // guarded by mutex_
  bool stopping_ = false;                        // guarded by mutex_
  std::thread thread_;
};

}  // namespace durin::testing
