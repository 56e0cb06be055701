// HTTP load generator for `durin serve` (or any server speaking the same
// API): N keep-alive connections on loopback, each with one request in
// flight at a time (no pipelining), for a fixed time; prints throughput,
// p50/p99 latency and the CPU it used itself (and the server's, given its
// pid), since both share the machine's cores.
//
//   http_load --server http://127.0.0.1:7070 --api-key KEY
//             --workload keyed-start|replay|get-run|raw-keyed
//             [--connections 64] [--seconds 10] [--threads 1]
//             [--flow acme.review-order] [--server-pid PID]
//
// keyed-start: POST /v1/runs {"wait": false} with a fresh Idempotency-Key
//   per request; replay: the same keyed start again and again (answered
//   from the kept response); get-run: GET /v1/runs/{id} of one run;
// raw-keyed: POST --path with --body and a fresh Idempotency-Key per
//   request (any server: the side-by-side comparison with a peer).
// Every non-2xx answer counts as an error and is reported.
//
// Why epoll on one thread rather than a thread per connection: the load
// generator runs on the same cores as the server it measures, and 64
// blocking threads spend most of their CPU on wake-ups. Each thread here
// drives its share of the connections from one epoll set, reuses each
// connection's buffers, and formats a request by appending to a string
// whose capacity is kept.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client/http_client.hpp"
#include "durin/json.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

constexpr std::size_t response_bytes_max = 1 << 20;
constexpr int epoll_events_max = 256;
constexpr int epoll_wait_ms = 5;

struct worker_result {
  std::vector<std::int64_t> latencies_us;
  std::uint64_t errors = 0;
  std::string first_error;
};

// What every request of one run has in common; `key_prefix` is empty when
// the workload sends no fresh key per request.
struct request_template {
  std::string head;  // request line and fixed headers, each ending in CRLF
  std::string body;
  std::string key_prefix;
};

struct connection {
  int fd = -1;
  std::size_t index = 0;  // for fresh keys
  std::uint64_t sequence = 0;
  std::string out;
  std::size_t sent = 0;
  std::string in;
  clock_type::time_point began;
  bool busy = false;
};

bool equal_lower(std::string_view text, std::string_view lower_name) {
  if (text.size() != lower_name.size()) {
    return false;
  }
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
    if (c != lower_name[i]) {
      return false;
    }
  }
  return true;
}

// The size of the complete response at the front of `in`, 0 when more
// bytes are needed, npos when it cannot be framed (no length, bad header).
std::size_t response_size(std::string_view in, unsigned& status) {
  auto header_end = in.find("\r\n\r\n");
  if (header_end == std::string_view::npos) {
    return in.size() > response_bytes_max ? std::string_view::npos : 0;
  }
  if (in.size() < 12 || in.substr(0, 5) != "HTTP/") {
    return std::string_view::npos;
  }
  status =
      static_cast<unsigned>(std::atoi(std::string(in.substr(9, 3)).c_str()));
  std::size_t body_at = header_end + 4;
  std::size_t line = in.find("\r\n") + 2;
  while (line < header_end) {
    auto next = in.find("\r\n", line);
    auto field = in.substr(line, next - line);
    auto colon = field.find(':');
    if (colon != std::string_view::npos) {
      auto name = field.substr(0, colon);
      auto value = field.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') {
        value.remove_prefix(1);
      }
      if (equal_lower(name, "content-length")) {
        auto length = static_cast<std::size_t>(
            std::strtoull(std::string(value).c_str(), nullptr, 10));
        return in.size() >= body_at + length ? body_at + length : 0;
      }
      if (equal_lower(name, "transfer-encoding")) {
        // Chunked: complete at the last-chunk marker.
        auto last = in.find("\r\n0\r\n\r\n", header_end);
        if (last != std::string_view::npos) {
          return last + 7;
        }
        if (in.substr(body_at, 5) == "0\r\n\r\n") {
          return body_at + 5;
        }
        return 0;
      }
    }
    line = next + 2;
  }
  return body_at;  // no body (204, 304 ...)
}

double cpu_seconds_self() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// User + system CPU seconds of process `pid` from /proc; -1 when unknown.
double cpu_seconds_of(long pid) {
  if (pid <= 0) {
    return -1;
  }
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(file)),
                   std::istreambuf_iterator<char>());
  auto close = text.rfind(')');
  if (close == std::string::npos) {
    return -1;
  }
  // Fields after the command: state is field 3; utime, stime are 14, 15.
  std::vector<std::string> fields;
  std::size_t at = close + 2;
  while (at < text.size() && fields.size() < 13) {
    auto space = text.find(' ', at);
    fields.push_back(text.substr(at, space - at));
    at = space == std::string::npos ? text.size() : space + 1;
  }
  if (fields.size() < 13) {
    return -1;
  }
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  return (std::stod(fields[11]) + std::stod(fields[12])) / ticks;
}

std::string load_average() {
  std::ifstream file("/proc/loadavg");
  std::string one, five, fifteen;
  file >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

class driver {
 public:
  driver(const sockaddr_storage& address, socklen_t address_size,
         const request_template& request, clock_type::time_point deadline,
         worker_result& result)
      : address_(address),
        address_size_(address_size),
        request_(request),
        deadline_(deadline),
        result_(result) {}

  void run(const std::vector<std::size_t>& indexes) {
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    connections_.resize(indexes.size());
    writing_.assign(indexes.size(), false);
    for (std::size_t i = 0; i < indexes.size(); ++i) {
      connections_[i].index = indexes[i];
      connections_[i].out.reserve(request_.head.size() + request_.body.size() +
                                  128);
      connections_[i].in.reserve(4096);
      open(i);
      send_next(i);
    }
    epoll_event events[epoll_events_max];
    while (clock_type::now() < deadline_) {
      int ready = epoll_wait(epoll_, events, epoll_events_max, epoll_wait_ms);
      for (int e = 0; e < ready; ++e) {
        auto i = static_cast<std::size_t>(events[e].data.u64);
        if (events[e].events & EPOLLOUT) {
          flush(i);
        }
        if (events[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
          receive(i);
        }
      }
    }
    for (auto& c : connections_) {
      if (c.fd >= 0) {
        ::close(c.fd);
      }
    }
    ::close(epoll_);
  }

 private:
  void fail(std::size_t i, std::string what) {
    if (result_.errors++ == 0) {
      result_.first_error = std::move(what);
    }
    auto& c = connections_[i];
    if (c.fd >= 0) {
      ::close(c.fd);  // also leaves the epoll set
    }
    c.fd = -1;
    c.busy = false;
    open(i);
    send_next(i);
  }

  void open(std::size_t i) {
    auto& c = connections_[i];
    c.in.clear();
    c.fd = ::socket(address_.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // Blocking connect: loopback answers at once, and only at the start or
    // after a failure.
    if (::connect(c.fd, reinterpret_cast<const sockaddr*>(&address_),
                  address_size_) != 0) {
      std::fprintf(stderr, "cannot connect: %s\n", std::strerror(errno));
      std::exit(1);
    }
    ::fcntl(c.fd, F_SETFL, ::fcntl(c.fd, F_GETFL) | O_NONBLOCK);
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = i;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, c.fd, &event);
  }

  void send_next(std::size_t i) {
    auto& c = connections_[i];
    if (clock_type::now() >= deadline_) {
      return;
    }
    c.out.clear();
    c.out += request_.head;
    if (!request_.key_prefix.empty()) {
      c.out += "Idempotency-Key: ";
      c.out += request_.key_prefix;
      c.out += std::to_string(c.index);
      c.out += '-';
      c.out += std::to_string(c.sequence++);
      c.out += "\r\n";
    }
    c.out += "\r\n";
    c.out += request_.body;
    c.sent = 0;
    c.busy = true;
    c.began = clock_type::now();
    flush(i);
  }

  void flush(std::size_t i) {
    auto& c = connections_[i];
    while (c.busy && c.sent < c.out.size()) {
      auto wrote = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent,
                          MSG_NOSIGNAL);
      if (wrote < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          watch(i, EPOLLIN | EPOLLOUT);
          return;
        }
        return fail(i, std::string("send: ") + std::strerror(errno));
      }
      c.sent += static_cast<std::size_t>(wrote);
    }
    if (writing_[i]) {
      watch(i, EPOLLIN);
    }
  }

  void watch(std::size_t i, std::uint32_t mask) {
    writing_[i] = (mask & EPOLLOUT) != 0;
    epoll_event event{};
    event.events = mask;
    event.data.u64 = i;
    epoll_ctl(epoll_, EPOLL_CTL_MOD, connections_[i].fd, &event);
  }

  void receive(std::size_t i) {
    auto& c = connections_[i];
    for (;;) {
      auto got = ::recv(c.fd, chunk_, sizeof chunk_, 0);
      if (got == 0) {
        return fail(i, "the server closed the connection");
      }
      if (got < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          break;
        }
        return fail(i, std::string("recv: ") + std::strerror(errno));
      }
      c.in.append(chunk_, static_cast<std::size_t>(got));
      if (static_cast<std::size_t>(got) < sizeof chunk_) {
        break;
      }
    }
    unsigned status = 0;
    auto size = response_size(c.in, status);
    if (size == 0) {
      return;
    }
    if (size == std::string_view::npos) {
      return fail(i, "unframed response: " + c.in.substr(0, 200));
    }
    auto took = std::chrono::duration_cast<std::chrono::microseconds>(
                    clock_type::now() - c.began)
                    .count();
    c.busy = false;
    if (status >= 200 && status < 300) {
      result_.latencies_us.push_back(took);
    } else if (result_.errors++ == 0) {
      auto body_at = c.in.find("\r\n\r\n");
      result_.first_error = std::to_string(status) + " " +
                            c.in.substr(body_at + 4, size - body_at - 4);
    }
    c.in.erase(0, size);
    send_next(i);
  }

  const sockaddr_storage& address_;
  socklen_t address_size_;
  const request_template& request_;
  clock_type::time_point deadline_;
  worker_result& result_;
  int epoll_ = -1;
  std::vector<connection> connections_;
  std::vector<bool> writing_;
  char chunk_[16 * 1024];
};

// The command line.
struct load_options {
  std::string server = "http://127.0.0.1:7070";
  std::string api_key;
  std::string workload = "keyed-start";
  std::string flow = "acme.review-order";
  std::string path = "/v1/runs";
  std::string raw_body;
  int connections = 64;
  int threads = 1;
  double seconds = 10;
  long server_pid = 0;
};

void add_options(CLI::App& app, load_options& o) {
  app.add_option("--server", o.server, "server URL");
  app.add_option("--api-key", o.api_key, "API key (none: no Authorization)");
  app.add_option("--path", o.path, "raw-keyed: the route");
  app.add_option("--body", o.raw_body, "raw-keyed: the JSON body");
  app.add_option("--workload", o.workload,
                 "keyed-start, replay, get-run or raw-keyed");
  app.add_option("--flow", o.flow, "flow for starts");
  app.add_option("--connections", o.connections, "keep-alive connections")
      ->check(CLI::Range(1, 100'000));
  app.add_option("--threads", o.threads, "client threads (each an epoll loop)")
      ->check(CLI::Range(1, 64));
  app.add_option("--seconds", o.seconds, "duration")
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--server-pid", o.server_pid,
                 "report this process's CPU use during the run");
}

// The server's socket address; false (said on stderr) when it does not
// resolve.
bool resolve(const durin::client::server_address& address,
             const std::string& server, sockaddr_storage& socket_address,
             socklen_t& socket_address_size) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(address.host.c_str(), address.port.c_str(), &hints, &found) !=
          0 ||
      found == nullptr) {
    std::cerr << "cannot resolve " << server << "\n";
    return false;
  }
  std::memcpy(&socket_address, found->ai_addr, found->ai_addrlen);
  socket_address_size = found->ai_addrlen;
  freeaddrinfo(found);
  return true;
}

// The request every connection repeats for `o.workload`; 0, or the exit
// code after saying why on stderr (a replay or get-run starts its run
// first).
int build_request(const load_options& o,
                  const durin::client::server_address& address,
                  request_template& request) {
  std::vector<std::pair<std::string, std::string>> auth = {
      {"Content-Type", "application/json"}};
  if (!o.api_key.empty()) {
    auth.emplace_back("Authorization", "Bearer " + o.api_key);
  }
  const std::string start_body = durin::json{
      {"flow", o.flow},
      {"input", {{"orderId", "bench"}}},
      {"wait", false}}.dump();
  const std::string run_tag =
      std::to_string(clock_type::now().time_since_epoch().count());
  std::string method = "POST";
  std::string target = "/v1/runs";
  std::vector<std::pair<std::string, std::string>> fixed = auth;
  if (o.workload == "keyed-start") {
    request.body = start_body;
    request.key_prefix = "bench-" + run_tag + "-";
  } else if (o.workload == "raw-keyed") {
    target = o.path;
    request.body = o.raw_body;
    request.key_prefix = "bench-" + run_tag + "-";
  } else if (o.workload == "replay" || o.workload == "get-run") {
    durin::client::http_connection setup(address);
    auto headers = auth;
    headers.emplace_back("Idempotency-Key", "bench-replay-" + run_tag);
    auto first = setup.send("POST", "/v1/runs", headers, start_body);
    if (!first || first->status >= 300) {
      std::cerr << "setup start failed: "
                << (first ? first->body : first.error().to_string()) << "\n";
      return 1;
    }
    if (o.workload == "replay") {
      request.body = start_body;
      fixed.emplace_back("Idempotency-Key", "bench-replay-" + run_tag);
    } else {
      method = "GET";
      target = "/v1/runs/" +
               durin::json::parse(first->body).at("id").get<std::string>();
      fixed.erase(fixed.begin());  // a GET has no body, so no content type
    }
  } else {
    std::cerr << "unknown workload '" << o.workload << "'\n";
    return 2;
  }
  request.head = method + " " + target + " HTTP/1.1\r\nHost: " + address.host +
                 ":" + address.port + "\r\n";
  for (const auto& [name, value] : fixed) {
    request.head += name + ": " + value + "\r\n";
  }
  if (method != "GET") {
    request.head +=
        "Content-Length: " + std::to_string(request.body.size()) + "\r\n";
  }
  return 0;
}

// Prints one line: throughput, latency percentiles, CPU of both sides.
void report(const load_options& o, int threads, double elapsed,
            double client_cpu, double server_cpu_before,
            double server_cpu_after, std::vector<worker_result>& results) {
  std::vector<std::int64_t> all;
  std::uint64_t errors = 0;
  std::string first_error;
  for (auto& result : results) {
    all.insert(all.end(), result.latencies_us.begin(),
               result.latencies_us.end());
    errors += result.errors;
    if (first_error.empty()) {
      first_error = result.first_error;
    }
  }
  std::sort(all.begin(), all.end());
  auto percentile = [&all](double p) -> double {
    if (all.empty()) {
      return 0;
    }
    auto index =
        static_cast<std::size_t>(p * static_cast<double>(all.size() - 1));
    return static_cast<double>(all[index]) / 1000.0;
  };
  std::printf(
      "workload=%s connections=%d threads=%d seconds=%.1f ok=%zu errors=%llu "
      "throughput=%.0f/s p50=%.2fms p99=%.2fms client_cpu=%.2f",
      o.workload.c_str(), o.connections, threads, elapsed, all.size(),
      static_cast<unsigned long long>(errors),
      static_cast<double>(all.size()) / elapsed, percentile(0.50),
      percentile(0.99), client_cpu);
  if (server_cpu_before >= 0 && server_cpu_after >= 0) {
    std::printf(" server_cpu=%.2f",
                (server_cpu_after - server_cpu_before) / elapsed);
  }
  std::printf(" loadavg=%s\n", load_average().c_str());
  if (errors > 0) {
    std::printf("first error: %s\n", first_error.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"HTTP load generator for durin serve"};
  load_options o;
  add_options(app, o);
  CLI11_PARSE(app, argc, argv);

  auto address = durin::client::parse_server_url(o.server);
  if (!address) {
    std::cerr << address.error().to_string() << "\n";
    return 2;
  }
  sockaddr_storage socket_address{};
  socklen_t socket_address_size = 0;
  if (!resolve(*address, o.server, socket_address, socket_address_size)) {
    return 2;
  }
  request_template request;
  if (int failed = build_request(o, *address, request); failed != 0) {
    return failed;
  }

  const int threads = std::min(o.threads, o.connections);
  std::vector<worker_result> results(static_cast<std::size_t>(threads));
  const double cpu_before = cpu_seconds_self();
  const double server_cpu_before = cpu_seconds_of(o.server_pid);
  const auto began = clock_type::now();
  const auto deadline =
      began +
      std::chrono::milliseconds(static_cast<std::int64_t>(o.seconds * 1000));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      auto& mine = results[static_cast<std::size_t>(t)];
      mine.latencies_us.reserve(1'000'000);
      std::vector<std::size_t> indexes;
      for (int i = t; i < o.connections; i += threads) {
        indexes.push_back(static_cast<std::size_t>(i));
      }
      driver(socket_address, socket_address_size, request, deadline, mine)
          .run(indexes);
    });
  }
  for (auto& thread : pool) {
    thread.join();
  }
  const double elapsed =
      std::chrono::duration<double>(clock_type::now() - began).count();
  const double client_cpu = (cpu_seconds_self() - cpu_before) / elapsed;
  const double server_cpu_after = cpu_seconds_of(o.server_pid);
  report(o, threads, elapsed, client_cpu, server_cpu_before, server_cpu_after,
         results);
  return 0;
}
