// HTTP load generator for `durin serve` (or any server speaking the same
// API): N keep-alive connections on loopback, each with one request in
// flight at a time (no pipelining), for a fixed time; prints throughput,
// p50/p99 latency, the count of answers by HTTP status and the CPU it used
// itself (and the servers', given their pids), since all share the
// machine's cores.
//
//   http_load --server http://127.0.0.1:7070 [--server URL ...] --api-key KEY
//             --workload keyed-start|replay|get-run|raw-keyed
//             [--connections 64] [--seconds 10] [--threads 1]
//             [--flow acme.review-order] [--server-pid PID ...]
//             [--run-id ID] [--shard-count N --local-shards LIST ...]
//             [--until-status STATUS] [--request-timeout-ms MS]
//             [--pause-ms MS]
//
// keyed-start: POST /v1/runs {"wait": false} with a fresh Idempotency-Key
//   per request; replay: the same keyed start again and again (answered
//   from the kept response); get-run: GET /v1/runs/{id} of one run (the
//   one --run-id names, else one it starts first);
// raw-keyed: POST --path with --body and a fresh Idempotency-Key per
//   request (any server: the side-by-side comparison with a peer).
// Every non-2xx answer counts as an error and is reported; `statuses=`
// counts every answer by status (a cluster answers 503 for a shard no node
// serves).
//
// Several servers (the nodes of a cluster): --server is repeatable, and
// connection i talks to server i mod the count, so the load is spread
// evenly. A replay or get-run starts its run through the first.
//
// Local or forwarded: given the cluster's shard count and, per --server in
// the same order, the shards that server serves itself (`--local-shards
// 0,3,5`; `-` for none), every 2xx answer naming a run ("id") is counted as
// local or forwarded by the run's shard (the last two characters of its id,
// services/shard_map.hpp), with p50/p99 of each: what a forward adds, under
// the same load in the same run.
//
// Until a status: with --until-status the run ends at the first answer
// with that status, and `met_at_unix_us=` says when it came (wall clock),
// so a script can time an outside event against it: one connection polling
// a run through one node while another node is killed (first 503) or
// started again (first 200). Exit code 3 when it never came; `met:` shows
// that answer. --request-timeout-ms gives up a request unanswered that long
// (counted in `timeouts=`) and sends the next on a new connection, so a
// poll goes on past a request that waits for a forward's deadline;
// --pause-ms spaces a connection's requests, so that a poll does not take a
// core from the nodes it times.
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
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client/http_client.hpp"
#include "durin/json.hpp"
#include "services/shard_map.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

constexpr std::size_t response_bytes_max = 1 << 20;
constexpr int epoll_events_max = 256;
constexpr int epoll_wait_ms = 5;

struct worker_result {
  std::vector<std::int64_t> latencies_us;  // of every 2xx answer
  // With --local-shards: the 2xx answers naming a run, by whether the run's
  // shard is one the connection's server serves itself.
  std::vector<std::int64_t> local_latencies_us;
  std::vector<std::int64_t> forwarded_latencies_us;
  std::map<unsigned, std::uint64_t> statuses;  // every answer, by status
  std::uint64_t timeouts = 0;                  // requests given up
  std::uint64_t errors = 0;                    // non-2xx, timeouts, failures
  std::string first_error;
};

// One server the load is spread over.
struct target {
  sockaddr_storage address{};
  socklen_t address_size = 0;
  // The request line and fixed headers, each ending in CRLF (the Host
  // header is the server's own).
  std::string head;
  std::vector<bool> local_shards;  // by shard; empty: no split
};

// What every request of one run has in common; `key_prefix` is empty when
// the workload sends no fresh key per request.
struct request_template {
  std::string body;
  std::string key_prefix;
  // A request unanswered this long is given up: its connection is closed
  // and the next request goes on a new one. 0: wait for every answer.
  std::chrono::milliseconds timeout{0};
  // How long a connection waits after an answer before its next request.
  // 0: sends at once.
  std::chrono::milliseconds pause{0};
};

struct connection {
  int fd = -1;
  std::size_t index = 0;   // for fresh keys
  std::size_t server = 0;  // into the targets
  std::uint64_t sequence = 0;
  std::string out;
  std::size_t sent = 0;
  std::string in;
  clock_type::time_point began;
  bool busy = false;
  bool pausing = false;  // until `next_at`, with --pause-ms
  clock_type::time_point next_at;
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

// The run id an answer's body names (its first "id" member), empty when
// it names none; a plain scan, since every answer would otherwise be parsed.
std::string_view run_id_in(std::string_view body) {
  constexpr std::string_view member = "\"id\":\"";
  auto at = body.find(member);
  if (at == std::string_view::npos) {
    return {};
  }
  at += member.size();
  auto end = body.find('"', at);
  return end == std::string_view::npos ? std::string_view{}
                                       : body.substr(at, end - at);
}

// --until-status: the first answer with that status ends the run of every
// connection, and when it came is kept in Unix time, so that a script can
// time an outside event (a node killed, a node started) against it.
struct stop_condition {
  unsigned status = 0;  // 0: run the whole time
  std::atomic<bool> met{false};
  std::atomic<std::int64_t> met_at_unix_us{0};
  std::string met_answer;  // its status and body; written once, by the first
};

class driver {
 public:
  // `map` is null when answers are not split into local and forwarded.
  driver(const std::vector<target>& targets, const request_template& request,
         const durin::services::shard_map* map, clock_type::time_point deadline,
         stop_condition& stop, worker_result& result)
      : targets_(targets),
        request_(request),
        map_(map),
        deadline_(deadline),
        stop_(stop),
        result_(result) {}

  void run(const std::vector<std::size_t>& indexes) {
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    connections_.resize(indexes.size());
    writing_.assign(indexes.size(), false);
    for (std::size_t i = 0; i < indexes.size(); ++i) {
      connections_[i].index = indexes[i];
      connections_[i].server = indexes[i] % targets_.size();
      connections_[i].out.reserve(targets_[connections_[i].server].head.size() +
                                  request_.body.size() + 128);
      connections_[i].in.reserve(4096);
      open(i);
      send_next(i);
    }
    epoll_event events[epoll_events_max];
    const int wait_ms = request_.pause.count() > 0
                            ? static_cast<int>(std::min<std::int64_t>(
                                  request_.pause.count(), epoll_wait_ms))
                            : epoll_wait_ms;
    while (running()) {
      int ready = epoll_wait(epoll_, events, epoll_events_max, wait_ms);
      for (int e = 0; e < ready; ++e) {
        auto i = static_cast<std::size_t>(events[e].data.u64);
        if (events[e].events & EPOLLOUT) {
          flush(i);
        }
        if (events[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
          receive(i);
        }
      }
      give_up_late();
      send_paused();
    }
    for (auto& c : connections_) {
      if (c.fd >= 0) {
        ::close(c.fd);
      }
    }
    ::close(epoll_);
  }

 private:
  bool running() const {
    return clock_type::now() < deadline_ &&
           !stop_.met.load(std::memory_order_relaxed);
  }

  // Ends the run at the first answer with the awaited status.
  void check_stop(unsigned status, std::string_view body) {
    if (stop_.status == 0 || status != stop_.status ||
        stop_.met.exchange(true)) {
      return;
    }
    stop_.met_at_unix_us =
        std::chrono::duration_cast<std::chrono::microseconds>(
            std::chrono::system_clock::now().time_since_epoch())
            .count();
    stop_.met_answer = std::to_string(status) + " " + std::string(body);
  }

  // Sends the next request of every connection whose pause is over.
  void send_paused() {
    if (request_.pause.count() == 0) {
      return;
    }
    const auto now = clock_type::now();
    for (std::size_t i = 0; i < connections_.size(); ++i) {
      if (connections_[i].pausing && now >= connections_[i].next_at) {
        connections_[i].pausing = false;
        send_next(i);
      }
    }
  }

  // Gives up the requests unanswered for longer than the timeout (a
  // forward to a node just killed may wait for its deadline).
  void give_up_late() {
    if (request_.timeout.count() == 0) {
      return;
    }
    const auto now = clock_type::now();
    for (std::size_t i = 0; i < connections_.size(); ++i) {
      if (connections_[i].busy &&
          now - connections_[i].began > request_.timeout) {
        ++result_.timeouts;
        fail(i, "no answer in " + std::to_string(request_.timeout.count()) +
                    " ms");
      }
    }
  }

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
    const auto& server = targets_[c.server];
    c.in.clear();
    c.fd = ::socket(server.address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // Blocking connect: loopback answers at once, and only at the start or
    // after a failure.
    if (::connect(c.fd, reinterpret_cast<const sockaddr*>(&server.address),
                  server.address_size) != 0) {
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
    if (!running()) {
      return;
    }
    c.out.clear();
    c.out += targets_[c.server].head;
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
    ++result_.statuses[status];
    const auto body_at = c.in.find("\r\n\r\n") + 4;
    const auto body = std::string_view(c.in).substr(body_at, size - body_at);
    check_stop(status, body);
    if (status >= 200 && status < 300) {
      result_.latencies_us.push_back(took);
      classify(c.server, body, took);
    } else if (result_.errors++ == 0) {
      result_.first_error = std::to_string(status) + " " + std::string(body);
    }
    c.in.erase(0, size);
    if (request_.pause.count() > 0) {
      c.pausing = true;
      c.next_at = clock_type::now() + request_.pause;
      return;
    }
    send_next(i);
  }

  // Counts a 2xx answer as local or forwarded by the shard of the run it
  // names, when asked to; an answer naming no run is neither.
  void classify(std::size_t server, std::string_view body, std::int64_t took) {
    if (map_ == nullptr) {
      return;
    }
    auto id = run_id_in(body);
    if (id.empty()) {
      return;
    }
    const auto shard = map_->of_run(id);
    (targets_[server].local_shards[shard] ? result_.local_latencies_us
                                          : result_.forwarded_latencies_us)
        .push_back(took);
  }

  const std::vector<target>& targets_;
  const request_template& request_;
  const durin::services::shard_map* map_;
  clock_type::time_point deadline_;
  stop_condition& stop_;
  worker_result& result_;
  int epoll_ = -1;
  std::vector<connection> connections_;
  std::vector<bool> writing_;
  char chunk_[16 * 1024];
};

// The command line.
struct load_options {
  std::vector<std::string> servers = {"http://127.0.0.1:7070"};
  std::string api_key;
  std::string workload = "keyed-start";
  std::string flow = "acme.review-order";
  std::string path = "/v1/runs";
  std::string raw_body;
  std::string run_id;
  int connections = 64;
  int threads = 1;
  double seconds = 10;
  std::vector<long> server_pids;
  std::uint32_t shard_count = 0;          // 0: answers are not split
  std::vector<std::string> local_shards;  // one list per server
  unsigned until_status = 0;              // 0: run the whole time
  int request_timeout_ms = 0;             // 0: wait for every answer
  int pause_ms = 0;                       // 0: the next request at once
};

void add_options(CLI::App& app, load_options& o) {
  app.add_option("--server", o.servers,
                 "server URL; repeatable: connections take the servers in "
                 "turn");
  app.add_option("--api-key", o.api_key, "API key (none: no Authorization)");
  app.add_option("--path", o.path, "raw-keyed: the route");
  app.add_option("--body", o.raw_body, "raw-keyed: the JSON body");
  app.add_option("--workload", o.workload,
                 "keyed-start, replay, get-run or raw-keyed");
  app.add_option("--flow", o.flow, "flow for starts");
  app.add_option("--run-id", o.run_id,
                 "get-run: this run (default: one started first)");
  app.add_option("--connections", o.connections, "keep-alive connections")
      ->check(CLI::Range(1, 100'000));
  app.add_option("--threads", o.threads, "client threads (each an epoll loop)")
      ->check(CLI::Range(1, 64));
  app.add_option("--seconds", o.seconds, "duration")
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--server-pid", o.server_pids,
                 "report these processes' CPU use during the run (summed); "
                 "repeatable");
  app.add_option("--until-status", o.until_status,
                 "stop at the first answer with this status and print when "
                 "it came (Unix us); --seconds is then the time limit")
      ->check(CLI::Range(100u, 599u));
  app.add_option("--request-timeout-ms", o.request_timeout_ms,
                 "give up a request unanswered this long and send the next "
                 "on a new connection (default: wait)")
      ->check(CLI::Range(1, 3'600'000));
  app.add_option("--pause-ms", o.pause_ms,
                 "wait this long after each answer before a connection's "
                 "next request (default 0)")
      ->check(CLI::Range(0, 60'000));
  app.add_option("--shard-count", o.shard_count,
                 "the cluster's shard count, for --local-shards")
      ->check(CLI::Range(1u, durin::services::shards_max));
  app.add_option("--local-shards", o.local_shards,
                 "per --server in order: the shards it serves itself, "
                 "comma-separated (- for none); splits the answers into "
                 "local and forwarded");
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

// Shard numbers from "0,3,5" ("-": none) as a mask of `count`; false (said
// on stderr) for anything else.
bool parse_shards(const std::string& list, std::uint32_t count,
                  std::vector<bool>& mask) {
  mask.assign(count, false);
  if (list == "-") {
    return true;
  }
  std::size_t at = 0;
  while (at <= list.size()) {
    auto comma = std::min(list.find(',', at), list.size());
    const auto piece = list.substr(at, comma - at);
    char* end = nullptr;
    const auto shard = std::strtoul(piece.c_str(), &end, 10);
    if (piece.empty() || *end != '\0' || shard >= count) {
      std::cerr << "bad --local-shards '" << list << "' for " << count
                << " shards\n";
      return false;
    }
    mask[shard] = true;
    at = comma + 1;
  }
  return true;
}

// Resolves every --server and reads its shards; false (said on stderr)
// when one does not resolve or the shard lists do not fit.
bool make_targets(const load_options& o,
                  std::vector<durin::client::server_address>& addresses,
                  std::vector<target>& targets) {
  if (!o.local_shards.empty() &&
      (o.shard_count == 0 || o.local_shards.size() != o.servers.size())) {
    std::cerr << "--local-shards needs --shard-count and one list per "
                 "--server\n";
    return false;
  }
  targets.resize(o.servers.size());
  for (std::size_t i = 0; i < o.servers.size(); ++i) {
    auto address = durin::client::parse_server_url(o.servers[i]);
    if (!address) {
      std::cerr << address.error().to_string() << "\n";
      return false;
    }
    if (!resolve(*address, o.servers[i], targets[i].address,
                 targets[i].address_size)) {
      return false;
    }
    if (!o.local_shards.empty() &&
        !parse_shards(o.local_shards[i], o.shard_count,
                      targets[i].local_shards)) {
      return false;
    }
    addresses.push_back(std::move(*address));
  }
  return true;
}

// Starts the run a replay or get-run repeats, through `address`; its
// answer's body, or nothing after saying why on stderr.
std::optional<std::string> start_setup_run(
    const durin::client::server_address& address,
    std::vector<std::pair<std::string, std::string>> headers,
    const std::string& key, const std::string& body) {
  durin::client::http_connection setup(address);
  headers.emplace_back("Idempotency-Key", key);
  auto first = setup.send("POST", "/v1/runs", headers, body);
  if (!first || first->status >= 300) {
    std::cerr << "setup start failed: "
              << (first ? first->body : first.error().to_string()) << "\n";
    return std::nullopt;
  }
  return first->body;
}

// The request every connection repeats for `o.workload`, with each
// target's head; 0, or the exit code after saying why on stderr (a replay,
// or a get-run without --run-id, starts its run first).
int build_request(const load_options& o,
                  const std::vector<durin::client::server_address>& addresses,
                  request_template& request, std::vector<target>& targets) {
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
  } else if (o.workload == "get-run" && !o.run_id.empty()) {
    method = "GET";
    target = "/v1/runs/" + o.run_id;
    fixed.erase(fixed.begin());  // a GET has no body, so no content type
  } else if (o.workload == "replay" || o.workload == "get-run") {
    const auto key = "bench-replay-" + run_tag;
    auto first = start_setup_run(addresses.front(), auth, key, start_body);
    if (!first) {
      return 1;
    }
    if (o.workload == "replay") {
      request.body = start_body;
      fixed.emplace_back("Idempotency-Key", key);
    } else {
      method = "GET";
      target =
          "/v1/runs/" + durin::json::parse(*first).at("id").get<std::string>();
      fixed.erase(fixed.begin());
    }
  } else {
    std::cerr << "unknown workload '" << o.workload << "'\n";
    return 2;
  }
  for (std::size_t i = 0; i < targets.size(); ++i) {
    auto& head = targets[i].head;
    head = method + " " + target + " HTTP/1.1\r\nHost: " + addresses[i].host +
           ":" + addresses[i].port + "\r\n";
    for (const auto& [name, value] : fixed) {
      head += name + ": " + value + "\r\n";
    }
    if (method != "GET") {
      head += "Content-Length: " + std::to_string(request.body.size()) + "\r\n";
    }
  }
  return 0;
}

// The p-th fraction of sorted latencies, in ms; 0 when there are none.
double percentile_ms(const std::vector<std::int64_t>& sorted, double p) {
  if (sorted.empty()) {
    return 0;
  }
  auto index =
      static_cast<std::size_t>(p * static_cast<double>(sorted.size() - 1));
  return static_cast<double>(sorted[index]) / 1000.0;
}

// The CPU seconds all `pids` used so far; -1 when one is unknown.
double cpu_seconds_of_all(const std::vector<long>& pids) {
  if (pids.empty()) {
    return -1;
  }
  double total = 0;
  for (const auto pid : pids) {
    const auto seconds = cpu_seconds_of(pid);
    if (seconds < 0) {
      return -1;
    }
    total += seconds;
  }
  return total;
}

// Every worker's results in one, the latencies sorted.
worker_result merge(std::vector<worker_result>& results) {
  worker_result all;
  auto append = [](std::vector<std::int64_t>& to,
                   const std::vector<std::int64_t>& from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  for (auto& result : results) {
    append(all.latencies_us, result.latencies_us);
    append(all.local_latencies_us, result.local_latencies_us);
    append(all.forwarded_latencies_us, result.forwarded_latencies_us);
    for (const auto& [status, count] : result.statuses) {
      all.statuses[status] += count;
    }
    all.timeouts += result.timeouts;
    all.errors += result.errors;
    if (all.first_error.empty()) {
      all.first_error = result.first_error;
    }
  }
  for (auto* latencies : {&all.latencies_us, &all.local_latencies_us,
                          &all.forwarded_latencies_us}) {
    std::sort(latencies->begin(), latencies->end());
  }
  return all;
}

// Prints one line: throughput, latency percentiles, CPU of both sides, the
// answers by status and, when split, local and forwarded answers.
void report(const load_options& o, int threads, double elapsed,
            double client_cpu, double server_cpu_before,
            double server_cpu_after, const stop_condition& stop,
            std::vector<worker_result>& results) {
  const auto all = merge(results);
  std::printf(
      "workload=%s connections=%d threads=%d seconds=%.1f ok=%zu errors=%llu "
      "throughput=%.0f/s p50=%.2fms p99=%.2fms client_cpu=%.2f",
      o.workload.c_str(), o.connections, threads, elapsed,
      all.latencies_us.size(), static_cast<unsigned long long>(all.errors),
      static_cast<double>(all.latencies_us.size()) / elapsed,
      percentile_ms(all.latencies_us, 0.50),
      percentile_ms(all.latencies_us, 0.99), client_cpu);
  if (server_cpu_before >= 0 && server_cpu_after >= 0) {
    std::printf(" server_cpu=%.2f",
                (server_cpu_after - server_cpu_before) / elapsed);
  }
  std::printf(" servers=%zu statuses=", o.servers.size());
  const char* separator = "";
  for (const auto& [status, count] : all.statuses) {
    std::printf("%s%u:%llu", separator, status,
                static_cast<unsigned long long>(count));
    separator = ",";
  }
  if (all.statuses.empty()) {
    std::printf("-");
  }
  if (!o.local_shards.empty()) {
    const auto& local = all.local_latencies_us;
    const auto& forwarded = all.forwarded_latencies_us;
    std::printf(
        " local=%zu local_p50=%.2fms local_p99=%.2fms forwarded=%zu "
        "forwarded_p50=%.2fms forwarded_p99=%.2fms",
        local.size(), percentile_ms(local, 0.50), percentile_ms(local, 0.99),
        forwarded.size(), percentile_ms(forwarded, 0.50),
        percentile_ms(forwarded, 0.99));
  }
  if (o.request_timeout_ms > 0) {
    std::printf(" timeouts=%llu",
                static_cast<unsigned long long>(all.timeouts));
  }
  if (stop.status != 0) {
    std::printf(" until=%u met_at_unix_us=%lld", stop.status,
                static_cast<long long>(stop.met_at_unix_us.load()));
  }
  std::printf(" loadavg=%s\n", load_average().c_str());
  if (all.errors > 0) {
    std::printf("first error: %s\n", all.first_error.c_str());
  }
  if (stop.met) {
    std::printf("met: %s\n", stop.met_answer.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"HTTP load generator for durin serve"};
  load_options o;
  add_options(app, o);
  CLI11_PARSE(app, argc, argv);

  std::vector<durin::client::server_address> addresses;
  std::vector<target> targets;
  if (!make_targets(o, addresses, targets)) {
    return 2;
  }
  request_template request;
  request.timeout = std::chrono::milliseconds(o.request_timeout_ms);
  request.pause = std::chrono::milliseconds(o.pause_ms);
  if (int failed = build_request(o, addresses, request, targets); failed != 0) {
    return failed;
  }
  const durin::services::shard_map map(std::max(o.shard_count, 1u));
  const auto* split = o.local_shards.empty() ? nullptr : &map;

  const int threads = std::min(o.threads, o.connections);
  std::vector<worker_result> results(static_cast<std::size_t>(threads));
  stop_condition stop;
  stop.status = o.until_status;
  const double cpu_before = cpu_seconds_self();
  const double server_cpu_before = cpu_seconds_of_all(o.server_pids);
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
      driver(targets, request, split, deadline, stop, mine).run(indexes);
    });
  }
  for (auto& thread : pool) {
    thread.join();
  }
  const double elapsed =
      std::chrono::duration<double>(clock_type::now() - began).count();
  const double client_cpu = (cpu_seconds_self() - cpu_before) / elapsed;
  const double server_cpu_after = cpu_seconds_of_all(o.server_pids);
  report(o, threads, elapsed, client_cpu, server_cpu_before, server_cpu_after,
         stop, results);
  // A status awaited and never seen is a failure the caller must notice.
  return stop.status != 0 && !stop.met ? 3 : 0;
}
