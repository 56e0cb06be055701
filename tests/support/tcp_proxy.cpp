#include "tests/support/tcp_proxy.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <utility>

namespace durin::testing {

namespace {

// Closed with a reset: the other end sees the connection broken, and
// whatever was queued on it is dropped.
void reset(int fd) {
  linger abortive{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abortive, sizeof abortive);
  ::close(fd);
}

bool set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// What arrives is sent on at once: Nagle's algorithm on the proxy's own
// sockets would hold a message's tail back for the ACK of its head (up to
// a delayed ACK, 40 ms), a delay the endpoints never chose.
void send_at_once(int fd) {
  int on = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

// Per-round limit on connections taken from the listen backlog.
constexpr int accepts_per_round_max = 64;

}  // namespace

// One forwarded connection: side 0 the client's, side 1 the upstream's.
struct tcp_proxy::link {
  int fd[2] = {-1, -1};
  std::string out[2];                   // bytes waiting to be written to fd[i]
  bool read_done[2] = {false, false};   // fd[i] sent its end (EOF)
  bool write_shut[2] = {false, false};  // that end was passed on to fd[i]
  bool broken = false;

  bool finished() const { return write_shut[0] && write_shut[1]; }
};

tcp_proxy::tcp_proxy(int upstream_port) : upstream_port_(upstream_port) {
  listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address = loopback(0);
  socklen_t length = sizeof address;
  if (listener_ < 0 ||
      ::bind(listener_, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      ::listen(listener_, 64) != 0 ||
      ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address),
                    &length) != 0 ||
      !set_nonblocking(listener_) ||
      ::pipe2(wake_, O_NONBLOCK | O_CLOEXEC) != 0) {
    if (listener_ >= 0) {
      ::close(listener_);
    }
    throw std::runtime_error("tcp_proxy: cannot listen on 127.0.0.1");
  }
  port_ = ntohs(address.sin_port);
  thread_ = std::thread([this] { run(); });
}

tcp_proxy::~tcp_proxy() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake();
  thread_.join();
  close_links();
  ::close(listener_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

std::string tcp_proxy::address() const {
  return "127.0.0.1:" + std::to_string(port_);
}

void tcp_proxy::set_upstream(int port) {
  run_on_thread([this, port] { upstream_port_ = port; });
}

void tcp_proxy::pause() {
  run_on_thread([this] { paused_ = true; });
}

void tcp_proxy::resume() {
  run_on_thread([this] { paused_ = false; });
}

void tcp_proxy::drop_connections() {
  run_on_thread([this] { close_links(); });
}

void tcp_proxy::cut() {
  run_on_thread([this] {
    close_links();
    cut_ = true;
  });
}

void tcp_proxy::heal() {
  run_on_thread([this] {
    if (cut_) {
      reset_backlog();
      cut_ = false;
    }
  });
}

void tcp_proxy::run_on_thread(std::function<void()> command) {
  std::unique_lock lock(mutex_);
  commands_.push_back(std::move(command));
  const auto ticket = ++commands_sent_;
  wake();
  done_.wait(lock, [&] { return commands_run_ >= ticket; });
}

void tcp_proxy::wake() {
  char byte = 0;
  // Full means a wake-up is pending already.
  [[maybe_unused]] auto ignored = ::write(wake_[1], &byte, 1);
}

void tcp_proxy::run() {
  std::vector<pollfd> polled;
  while (true) {
    std::vector<std::function<void()>> commands;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) {
        return;
      }
      commands.swap(commands_);
    }
    for (auto& command : commands) {
      command();
    }
    if (!commands.empty()) {
      std::lock_guard lock(mutex_);
      commands_run_ += commands.size();
      done_.notify_all();
    }
    // [0] the wake pipe, [1] the listener, then both sides of each link;
    // a negative fd is not polled.
    const bool forwarding = !paused_ && !cut_;
    polled.assign(2 + 2 * links_.size(), pollfd{-1, 0, 0});
    polled[0] = {wake_[0], POLLIN, 0};
    if (forwarding) {
      polled[1] = {listener_, POLLIN, 0};
      for (std::size_t i = 0; i < links_.size(); ++i) {
        const auto& one = links_[i];
        for (int side = 0; side < 2; ++side) {
          if (one.read_done[side] && one.write_shut[side]) {
            continue;  // done both ways: it would only report POLLHUP
          }
          short events = 0;
          if (!one.read_done[side] &&
              one.out[1 - side].size() < buffer_bytes_max) {
            events |= POLLIN;
          }
          if (!one.out[side].empty()) {
            events |= POLLOUT;
          }
          polled[2 + 2 * i + side] = {one.fd[side], events, 0};
        }
      }
    }
    if (::poll(polled.data(), polled.size(), 1000) < 0 && errno != EINTR) {
      return;
    }
    if (polled[0].revents != 0) {
      char drained[64];
      while (::read(wake_[0], drained, sizeof drained) > 0) {
      }
    }
    if (forwarding) {
      pump(polled);
      if (polled[1].revents != 0) {
        accept_all();
      }
    }
  }
}

void tcp_proxy::accept_all() {
  for (int taken = 0; taken < accepts_per_round_max; ++taken) {
    const int client =
        ::accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (client < 0) {
      return;  // EAGAIN: the backlog is empty
    }
    const int upstream = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address = loopback(upstream_port_);
    // Blocking, on loopback: at once connected or refused.
    if (upstream < 0 ||
        ::connect(upstream, reinterpret_cast<sockaddr*>(&address),
                  sizeof address) != 0 ||
        !set_nonblocking(upstream)) {
      if (upstream >= 0) {
        ::close(upstream);
      }
      reset(client);  // the server is down: so is the proxy's side
      continue;
    }
    send_at_once(client);
    send_at_once(upstream);
    link made;
    made.fd[0] = client;
    made.fd[1] = upstream;
    links_.push_back(std::move(made));
  }
}

void tcp_proxy::reset_backlog() {
  while (true) {
    const int attempted = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (attempted < 0) {
      return;
    }
    reset(attempted);
  }
}

void tcp_proxy::close_links() {
  for (auto& one : links_) {
    reset(one.fd[0]);
    reset(one.fd[1]);
  }
  links_.clear();
}

// Moves what is readable across and writes what is held; passes an end
// (EOF) on once what came before it is written; closes a link whose both
// ends passed, and resets both sides of one that broke.
void tcp_proxy::pump(const std::vector<pollfd>& polled) {
  char chunk[64 << 10];
  std::vector<link> kept;
  kept.reserve(links_.size());
  for (std::size_t i = 0; i < links_.size(); ++i) {
    auto& one = links_[i];
    for (int side = 0; side < 2 && !one.broken; ++side) {
      const auto revents = polled[2 + 2 * i + side].revents;
      if ((revents & (POLLERR | POLLNVAL)) != 0) {
        one.broken = true;
        break;
      }
      if ((revents & (POLLIN | POLLHUP)) == 0 || one.read_done[side]) {
        continue;
      }
      auto& into = one.out[1 - side];
      const auto room =
          buffer_bytes_max - std::min(buffer_bytes_max, into.size());
      if (room == 0) {
        continue;
      }
      const auto got =
          ::recv(one.fd[side], chunk, std::min(room, sizeof chunk), 0);
      if (got > 0) {
        into.append(chunk, static_cast<std::size_t>(got));
      } else if (got == 0) {
        one.read_done[side] = true;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        one.broken = true;
      }
    }
    for (int side = 0; side < 2 && !one.broken; ++side) {
      auto& held = one.out[side];
      if (!held.empty()) {
        const auto sent =
            ::send(one.fd[side], held.data(), held.size(), MSG_NOSIGNAL);
        if (sent > 0) {
          held.erase(0, static_cast<std::size_t>(sent));
        } else if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                   errno != EINTR) {
          one.broken = true;
          break;
        }
      }
      if (held.empty() && one.read_done[1 - side] && !one.write_shut[side]) {
        ::shutdown(one.fd[side], SHUT_WR);
        one.write_shut[side] = true;
      }
    }
    if (one.broken) {
      reset(one.fd[0]);
      reset(one.fd[1]);
    } else if (one.finished()) {
      ::close(one.fd[0]);
      ::close(one.fd[1]);
    } else {
      kept.push_back(std::move(one));
    }
  }
  // Links accepted after the poll come after the polled ones: none yet.
  links_ = std::move(kept);
}

}  // namespace durin::testing
