// The partition proxy the cluster tests cut nodes off with
// (tests/support/tcp_proxy.hpp) does what they rely on: it forwards both
// ways with half-closes passed on; cut() resets what is open and
// black-holes new connections (nothing reaches the server, nothing comes
// back); heal() resets what was attempted during the cut and forwards
// again.
//
// Method: a listening socket of the test as the server, plain blocking
// sockets as clients, poll with timeouts. A wait for something that must
// come is 5 s; a check that nothing comes waits 300 ms, which a slow
// machine cannot turn into a false failure.
#include "tests/support/tcp_proxy.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <optional>
#include <string>

namespace durin::testing {
namespace {

constexpr int must_come_ms = 5000;
constexpr int must_not_come_ms = 300;

// A server socket on 127.0.0.1 with a port the kernel picked.
class server {
 public:
  server() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    auto address = loopback(0);
    socklen_t length = sizeof address;
    EXPECT_EQ(
        ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
  }
  ~server() { ::close(fd_); }
  int port() const { return port_; }
  // The next connection within `wait_ms`, or -1.
  int accept_within(int wait_ms) {
    pollfd polled{fd_, POLLIN, 0};
    if (::poll(&polled, 1, wait_ms) != 1) {
      return -1;
    }
    return ::accept(fd_, nullptr, nullptr);
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  auto address = loopback(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) !=
      0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void send_text(int fd, const std::string& text) {
  ASSERT_EQ(::send(fd, text.data(), text.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(text.size()));
}

// What `fd` gives within `wait_ms`: bytes, "" for its end (EOF or a
// reset), or nullopt for nothing.
std::optional<std::string> receive_within(int fd, int wait_ms) {
  pollfd polled{fd, POLLIN, 0};
  if (::poll(&polled, 1, wait_ms) != 1) {
    return std::nullopt;
  }
  char chunk[256];
  const auto got = ::recv(fd, chunk, sizeof chunk, 0);
  return got > 0 ? std::string(chunk, static_cast<std::size_t>(got))
                 : std::string();
}

TEST(TcpProxyTest, ForwardsBothWaysAndPassesAHalfCloseOn) {
  server upstream;
  tcp_proxy proxy(upstream.port());
  const int client = connect_to(proxy.port());
  ASSERT_GE(client, 0);
  send_text(client, "ping");
  ::shutdown(client, SHUT_WR);  // the request is all sent
  const int served = upstream.accept_within(must_come_ms);
  ASSERT_GE(served, 0);
  EXPECT_EQ(receive_within(served, must_come_ms), "ping");
  EXPECT_EQ(receive_within(served, must_come_ms), "");  // the half-close
  send_text(served, "pong");  // the other way still open
  ::close(served);
  EXPECT_EQ(receive_within(client, must_come_ms), "pong");
  EXPECT_EQ(receive_within(client, must_come_ms), "");
  ::close(client);
}

TEST(TcpProxyTest, ACutResetsOpenConnectionsAndBlackHolesNewOnesUntilHealed) {
  server upstream;
  tcp_proxy proxy(upstream.port());
  const int open = connect_to(proxy.port());
  ASSERT_GE(open, 0);
  send_text(open, "a");
  const int served = upstream.accept_within(must_come_ms);
  ASSERT_GE(served, 0);
  ASSERT_EQ(receive_within(served, must_come_ms), "a");

  proxy.cut();
  // Both ends of the open connection see it end.
  EXPECT_EQ(receive_within(open, must_come_ms), "");
  EXPECT_EQ(receive_within(served, must_come_ms), "");
  // A new one connects (the backlog) but reaches nothing and hears nothing.
  const int during = connect_to(proxy.port());
  ASSERT_GE(during, 0);
  send_text(during, "b");
  EXPECT_LT(upstream.accept_within(must_not_come_ms), 0);
  EXPECT_EQ(receive_within(during, must_not_come_ms), std::nullopt);

  proxy.heal();
  // What was attempted during the cut never formed: it is reset.
  EXPECT_EQ(receive_within(during, must_come_ms), "");
  EXPECT_LT(upstream.accept_within(must_not_come_ms), 0);
  // A new connection is forwarded again.
  const int after = connect_to(proxy.port());
  ASSERT_GE(after, 0);
  send_text(after, "c");
  const int served_after = upstream.accept_within(must_come_ms);
  ASSERT_GE(served_after, 0);
  EXPECT_EQ(receive_within(served_after, must_come_ms), "c");
  for (int fd : {open, served, during, after, served_after}) {
    ::close(fd);
  }
}

TEST(TcpProxyTest, APauseHoldsBytesThatAResumeDelivers) {
  server upstream;
  tcp_proxy proxy(upstream.port());
  const int client = connect_to(proxy.port());
  ASSERT_GE(client, 0);
  send_text(client, "a");
  const int served = upstream.accept_within(must_come_ms);
  ASSERT_GE(served, 0);
  ASSERT_EQ(receive_within(served, must_come_ms), "a");
  proxy.pause();
  send_text(client, "b");
  EXPECT_EQ(receive_within(served, must_not_come_ms), std::nullopt);
  proxy.resume();
  EXPECT_EQ(receive_within(served, must_come_ms), "b");
  ::close(client);
  ::close(served);
}

}  // namespace
}  // namespace durin::testing
