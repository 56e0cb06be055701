// A raw TCP connection to a test server on 127.0.0.1, for tests that must
// control the bytes on the wire (malformed requests, smuggling attempts,
// connections that hold without reading) or see exactly how a connection
// ended (an answer, a clean close, a reset). Blocking POSIX sockets with
// explicit deadlines; no HTTP client logic that could retry or reconnect.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>
#include <string_view>

namespace durin::testing {

// One HTTP/1.1 answer as read off the wire.
struct raw_answer {
  unsigned status = 0;  // 0: none arrived
  std::string head;     // status line and headers
  std::string body;
  bool closed = false;  // the server closed the connection (FIN or reset)
  bool reset = false;   // ... with a reset (ECONNRESET)

  bool has_header(std::string_view text) const {
    return head.find(text) != std::string::npos;
  }
};

class raw_connection {
 public:
  // Connects (blocking); ok() tells whether it did.
  explicit raw_connection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&address),
                              sizeof address) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
    if (fd_ >= 0) {
      int one = 1;
      ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
  }
  ~raw_connection() { close(); }
  raw_connection(raw_connection&& other) noexcept
      : fd_(other.fd_), pending_(std::move(other.pending_)) {
    other.fd_ = -1;
  }
  raw_connection(const raw_connection&) = delete;
  raw_connection& operator=(const raw_connection&) = delete;

  bool ok() const { return fd_ >= 0; }

  void close() {
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }

  // Writes all of `bytes`; false when the connection broke.
  bool send(std::string_view bytes) {
    while (!bytes.empty() && fd_ >= 0) {
      auto wrote = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (wrote <= 0) {
        if (wrote < 0 && errno == EINTR) {
          continue;
        }
        return false;
      }
      bytes.remove_prefix(static_cast<std::size_t>(wrote));
    }
    return bytes.empty();
  }

  // Reads until the server closes the connection or `limit` passes; what
  // arrived. `closed` tells which.
  std::string read_all(std::chrono::milliseconds limit, bool* closed = nullptr,
                       bool* reset = nullptr) {
    std::string text = std::move(pending_);
    pending_.clear();
    bool ended = false;
    bool was_reset = false;
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!ended && read_some(text, deadline, ended, was_reset)) {
    }
    if (closed != nullptr) {
      *closed = ended;
    }
    if (reset != nullptr) {
      *reset = was_reset;
    }
    return text;
  }

  // Reads one answer (head, then a Content-Length body) within `limit`;
  // bytes after it stay for the next call. An answer to a HEAD is read
  // `bodiless`: its Content-Length is its GET's, and no body follows.
  raw_answer read_answer(std::chrono::milliseconds limit,
                         bool bodiless = false) {
    raw_answer answer;
    std::string text = std::move(pending_);
    pending_.clear();
    auto deadline = std::chrono::steady_clock::now() + limit;
    std::size_t head_end = std::string::npos;
    while ((head_end = text.find("\r\n\r\n")) == std::string::npos) {
      if (answer.closed ||
          !read_some(text, deadline, answer.closed, answer.reset)) {
        pending_ = std::move(text);
        return answer;
      }
    }
    answer.head = text.substr(0, head_end);
    std::size_t length = 0;
    auto at = lower(answer.head).find("\r\ncontent-length:");
    if (at != std::string::npos && !bodiless) {
      length = std::strtoul(answer.head.c_str() + at + 17, nullptr, 10);
    }
    while (text.size() < head_end + 4 + length) {
      if (answer.closed ||
          !read_some(text, deadline, answer.closed, answer.reset)) {
        pending_ = std::move(text);
        answer.head.clear();
        return answer;
      }
    }
    if (answer.head.rfind("HTTP/1.1 ", 0) == 0) {
      answer.status = static_cast<unsigned>(
          std::strtoul(answer.head.c_str() + 9, nullptr, 10));
    }
    answer.body = text.substr(head_end + 4, length);
    pending_ = text.substr(head_end + 4 + length);
    return answer;
  }

 private:
  static std::string lower(std::string text) {
    for (auto& c : text) {
      if (c >= 'A' && c <= 'Z') {
        c = static_cast<char>(c - 'A' + 'a');
      }
    }
    return text;
  }

  // One read into `text`; false at the deadline or when the connection
  // ended (`ended`, and `reset` for ECONNRESET).
  bool read_some(std::string& text,
                 std::chrono::steady_clock::time_point deadline, bool& ended,
                 bool& reset) {
    if (fd_ < 0) {
      ended = true;
      return false;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left < 0) {
      return false;  // at the deadline itself, what is there is still read
    }
    pollfd readable{fd_, POLLIN, 0};
    int ready = ::poll(&readable, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) {
      return true;
    }
    if (ready <= 0) {
      return false;
    }
    char chunk[8192];
    auto got = ::recv(fd_, chunk, sizeof chunk, 0);
    if (got > 0) {
      text.append(chunk, static_cast<std::size_t>(got));
      return true;
    }
    if (got < 0 && errno == EINTR) {
      return true;
    }
    ended = true;
    reset = got < 0 && errno == ECONNRESET;
    return false;
  }

  int fd_ = -1;
  std::string pending_;  // read past the last answer
};

}  // namespace durin::testing
