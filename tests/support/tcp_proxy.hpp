// A TCP forwarder on 127.0.0.1 that a test puts between a client and a
// server to hold or cut what flows between them: pause() stops accepting and
// forwarding (bytes wait in the kernel's buffers), cut() closes every
// forwarded connection and drops what was held, resume() forwards again.
// So a test can make "written, but never delivered before the crash" happen
// every time instead of by luck. One thread of its own; the control calls
// are thread-safe. Throws std::runtime_error when it cannot listen.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace durin::testing {

class tcp_proxy {
 public:
  explicit tcp_proxy(int upstream_port) : upstream_port_(upstream_port) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = loopback(0);
    socklen_t length = sizeof address;
    if (listener_ < 0 ||
        ::bind(listener_, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        ::listen(listener_, 64) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address),
                      &length) != 0 ||
        ::pipe(wake_) != 0) {
      throw std::runtime_error("tcp_proxy: cannot listen on 127.0.0.1");
    }
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { run(); });
  }

  ~tcp_proxy() {
    stopping_ = true;
    wake();
    thread_.join();
    for (auto [a, b] : pairs_) {
      ::close(a);
      ::close(b);
    }
    ::close(listener_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

  tcp_proxy(const tcp_proxy&) = delete;
  tcp_proxy& operator=(const tcp_proxy&) = delete;

  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port_);
  }

  void pause() { control(&paused_, true); }
  void resume() { control(&paused_, false); }
  // Closes every connection forwarded so far, with whatever it held.
  void cut() { control(&cut_requested_, true); }

 private:
  static sockaddr_in loopback(int port) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    return address;
  }

  // Sets a flag and waits until the forwarding thread has seen it, so that
  // after pause() returns not one more byte is forwarded.
  void control(std::atomic<bool>* flag, bool value) {
    std::unique_lock lock(control_mutex_);
    *flag = value;
    auto seen = rounds_.load();
    wake();
    while (rounds_ == seen) {
      std::this_thread::yield();
    }
  }

  void wake() {
    char byte = 0;
    [[maybe_unused]] auto ignored = ::write(wake_[1], &byte, 1);
  }

  void run() {
    std::vector<char> chunk(64 << 10);
    while (!stopping_) {
      if (cut_requested_) {
        for (auto [a, b] : pairs_) {
          ::close(a);
          ::close(b);
        }
        pairs_.clear();
        cut_requested_ = false;
      }
      bool paused = paused_;
      std::vector<pollfd> polled = {{wake_[0], POLLIN, 0}};
      if (!paused) {
        polled.push_back({listener_, POLLIN, 0});
        for (auto [a, b] : pairs_) {
          polled.push_back({a, POLLIN, 0});
          polled.push_back({b, POLLIN, 0});
        }
      }
      ++rounds_;
      if (::poll(polled.data(), polled.size(), 1000) < 0 && errno != EINTR) {
        return;
      }
      if (polled[0].revents != 0) {
        char drained[64];
        [[maybe_unused]] auto ignored =
            ::read(wake_[0], drained, sizeof drained);
        continue;  // the flags may have changed: poll again with them
      }
      if (paused) {
        continue;
      }
      if (polled[1].revents != 0) {
        accept_one();
      }
      forward(polled, chunk);
    }
  }

  void accept_one() {
    int client = ::accept(listener_, nullptr, nullptr);
    if (client < 0) {
      return;
    }
    int upstream = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = loopback(upstream_port_);
    if (::connect(upstream, reinterpret_cast<sockaddr*>(&address),
                  sizeof address) != 0) {
      ::close(upstream);
      ::close(client);  // the server is down: so is the proxy's side
      return;
    }
    pairs_.emplace_back(client, upstream);
  }

  // Moves what is readable across; a pair whose side ended is closed.
  void forward(const std::vector<pollfd>& polled, std::vector<char>& chunk) {
    std::vector<std::pair<int, int>> kept;
    // The pairs polled are the first pairs_ entries (accept_one appends).
    std::size_t polled_pairs = (polled.size() - 2) / 2;
    for (std::size_t i = 0; i < pairs_.size(); ++i) {
      auto [a, b] = pairs_[i];
      bool open = true;
      if (i < polled_pairs) {
        open = pump(polled[2 + 2 * i], b, chunk) &&
               pump(polled[3 + 2 * i], a, chunk);
      }
      if (open) {
        kept.emplace_back(a, b);
      } else {
        ::close(a);
        ::close(b);
      }
    }
    pairs_ = std::move(kept);
  }

  static bool pump(const pollfd& from, int to, std::vector<char>& chunk) {
    if (from.revents == 0) {
      return true;
    }
    auto got = ::read(from.fd, chunk.data(), chunk.size());
    if (got <= 0) {
      return false;
    }
    for (ssize_t sent = 0; sent < got;) {
      auto wrote = ::write(to, chunk.data() + sent,
                           static_cast<std::size_t>(got - sent));
      if (wrote <= 0) {
        return false;
      }
      sent += wrote;
    }
    return true;
  }

  const int upstream_port_;
  int listener_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::vector<std::pair<int, int>> pairs_;  // (client, upstream); thread only
  std::mutex control_mutex_;
  std::atomic<bool> paused_{false};
  std::atomic<bool> cut_requested_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> rounds_{0};  // polls begun, for control()
  std::thread thread_;
};

}  // namespace durin::testing
