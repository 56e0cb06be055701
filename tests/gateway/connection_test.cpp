// End-to-end tests of how `durin serve` treats connections (issue 12, items
// 2, 4, 9 and 12): request framing that could smuggle a second request, the
// connection limit, descriptor exhaustion, the memory a refused connection
// costs, and SIGTERM under load; and HTTP rules clients rely on: 100
// Continue, HEAD, Allow, one Authorization header.
//
// Method: each test starts its own `durin serve` on 127.0.0.1 port 0 with the
// flags or descriptor limit it needs (tests/support/serve_process.hpp) and
// talks to it over raw sockets (tests/support/raw_connection.hpp), so the
// bytes on the wire and the way each connection ended are exactly known. The
// process's CPU time and memory come from /proc/PID.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/support/proc_stat.hpp"
#include "tests/support/raw_connection.hpp"
#include "tests/support/serve_process.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin::testing {
namespace {

using namespace std::chrono_literals;

json review(const std::string& order) {
  return {{"flow", "acme.review-order"}, {"input", {{"orderId", order}}}};
}

// A request as bytes: `headers` are whole lines without the CRLF.
std::string request_bytes(const std::string& method, const std::string& target,
                          const std::vector<std::string>& headers,
                          const std::string& body = "") {
  std::string text = method + " " + target + " HTTP/1.1\r\nHost: durin\r\n";
  for (const auto& header : headers) {
    text += header + "\r\n";
  }
  return text + "\r\n" + body;
}

// A keyed start with its Content-Length.
std::string keyed_start(const std::string& key, const std::string& secret,
                        const std::string& order) {
  auto body = review(order).dump();
  return request_bytes(
      "POST", "/v1/runs",
      {"Authorization: Bearer " + secret, "Content-Type: application/json",
       "Idempotency-Key: " + key,
       "Content-Length: " + std::to_string(body.size())},
      body);
}

// Raises this process's descriptor limit to its hard limit (a test holds
// thousands of connections); the limit now in force.
rlim_t raise_descriptor_limit() {
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &limit);
  ::getrlimit(RLIMIT_NOFILE, &limit);
  return limit.rlim_cur;
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t count = 0;
  for (auto at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

// The header line of `head` that begins with `name`, or empty.
std::string line_of(const std::string& head, const std::string& name) {
  auto at = head.find("\r\n" + name);
  if (at == std::string::npos) {
    return "";
  }
  auto end = head.find('\r', at + 2);
  return head.substr(at + 2, end == std::string::npos ? end : end - at - 2);
}

class ConnectionTest : public ::testing::Test {
 protected:
  void start(serve_setup setup = {}) {
    server_.reset();
    server_ = std::make_unique<serve_process>(dir_.path(), std::move(setup));
  }
  api_client admin() { return {server_->address(), server_->admin_key()}; }
  raw_connection connect() { return raw_connection(server_->port()); }

  // Runs of the default tenant whose input names `order`.
  int runs_for(const std::string& order) {
    auto client = admin();
    auto page = client.get("/v1/runs?limit=1000");
    EXPECT_EQ(page.status, 200u) << page.body;
    int count = 0;
    for (auto& run : page.value["runs"]) {
      if (run["input"].value("orderId", "") == order) {
        ++count;
      }
    }
    return count;
  }

  temp_dir dir_;
  std::unique_ptr<serve_process> server_;
};

// RFC 9112 6.3: the only transfer coding that frames a request is a single
// final chunked. Any other Transfer-Encoding, one with Content-Length, and
// two Content-Lengths are 400 and the connection closes; the bytes behind
// them, here a second complete request, are never run.
TEST_F(ConnectionTest, TransferCodingsOtherThanChunkedAreRefused) {
  start();
  const auto key = "Authorization: Bearer " + server_->admin_key();
  const auto smuggled_body = review("SMUGGLED").dump();
  const auto smuggled = request_bytes(
      "POST", "/v1/runs",
      {key, "Content-Length: " + std::to_string(smuggled_body.size())},
      smuggled_body);
  const auto chunk = [](const std::string& data) {
    char size[16];
    std::snprintf(size, sizeof size, "%zx", data.size());
    return std::string(size) + "\r\n" + data + "\r\n0\r\n\r\n";
  };
  struct attempt {
    std::vector<std::string> framing;
    std::string body;
  };
  const std::vector<attempt> attempts = {
      {{"Transfer-Encoding: gzip"}, ""},
      {{"Transfer-Encoding: identity"}, ""},
      {{"Transfer-Encoding: chunked, gzip"}, ""},
      {{"Transfer-Encoding: gzip, chunked"}, chunk("{}")},
      {{"Transfer-Encoding: gzip", "Transfer-Encoding: chunked"}, chunk("{}")},
      {{"Transfer-Encoding: chunked, chunked"}, chunk("{}")},
      {{"Transfer-Encoding: chunked", "Content-Length: 7"}, chunk("{}")},
      {{"Content-Length: 7", "Transfer-Encoding: chunked"}, chunk("{}")},
      {{"Transfer-Encoding: gzip", "Content-Length: 2"}, "{}"},
      {{"Content-Length: 2", "Content-Length: 2"}, "{}"},
      {{"Content-Length: 2, 2"}, "{}"},
      {{"Content-Length: 2", "Content-Length: 3"}, "{}"},
  };
  for (const auto& [framing, body] : attempts) {
    std::string described;
    for (const auto& line : framing) {
      described += line + "; ";
    }
    SCOPED_TRACE(described);
    auto headers = framing;
    headers.push_back(key);
    auto connection = connect();
    ASSERT_TRUE(connection.ok());
    ASSERT_TRUE(connection.send(
        request_bytes("POST", "/v1/runs", headers, body) + smuggled));
    bool closed = false;
    auto text = connection.read_all(5s, &closed);
    EXPECT_TRUE(closed) << "the connection stays open";
    EXPECT_EQ(text.rfind("HTTP/1.1 400 ", 0), 0u) << text;
    EXPECT_NE(text.find("\"code\":\"bad-request\""), std::string::npos) << text;
    EXPECT_NE(text.find("Connection: close"), std::string::npos) << text;
    EXPECT_EQ(count_of(text, "HTTP/1.1 "), 1u) << text;
  }
  // A chunked body is still read as one: the run starts once.
  auto body = review("CHUNKED").dump();
  auto connection = connect();
  ASSERT_TRUE(connection.send(request_bytes(
      "POST", "/v1/runs", {key, "Transfer-Encoding: chunked"}, chunk(body))));
  auto answer = connection.read_answer(10s);
  EXPECT_EQ(answer.status, 200u) << answer.head << answer.body;
  EXPECT_EQ(runs_for("CHUNKED"), 1);
  EXPECT_EQ(runs_for("SMUGGLED"), 0);
}

// RFC 9112 3.2: an HTTP/1.1 request without a Host header, or any request
// with two, is 400 and runs nothing; HTTP/1.0 may leave Host out.
TEST_F(ConnectionTest, ARequestWithoutExactlyOneHostIsRefused) {
  start();
  const auto key = "Authorization: Bearer " + server_->admin_key();
  const auto body = review("HOSTLESS").dump();
  const auto framing = "Content-Length: " + std::to_string(body.size());
  const auto without_host = [&](const std::string& version,
                                const std::vector<std::string>& headers) {
    std::string text = "POST /v1/runs " + version + "\r\n";
    for (const auto& header : headers) {
      text += header + "\r\n";
    }
    return text + key + "\r\n" + framing + "\r\n\r\n" + body;
  };
  for (const auto& bytes :
       {without_host("HTTP/1.1", {}),
        without_host("HTTP/1.1", {"Host: durin", "Host: elsewhere"}),
        without_host("HTTP/1.0", {"Host: durin", "Host: elsewhere"})}) {
    SCOPED_TRACE(bytes.substr(0, bytes.find("Authorization")));
    auto connection = connect();
    ASSERT_TRUE(connection.send(bytes));
    bool closed = false;
    auto text = connection.read_all(5s, &closed);
    EXPECT_TRUE(closed) << "the connection stays open";
    EXPECT_EQ(text.rfind("HTTP/1.1 400 ", 0), 0u) << text;
    EXPECT_NE(text.find("Host"), std::string::npos) << text;
  }
  EXPECT_EQ(runs_for("HOSTLESS"), 0);
  auto connection = connect();
  ASSERT_TRUE(connection.send(without_host("HTTP/1.0", {})));
  auto answer = connection.read_answer(10s);
  EXPECT_EQ(answer.status, 200u) << answer.head << answer.body;
  EXPECT_EQ(runs_for("HOSTLESS"), 1);
}

// --max-connections N: the connection beyond N is answered 503
// too-many-connections with Retry-After and closed; once one closes, a new
// connection is served again.
TEST_F(ConnectionTest, MaxConnectionsRefusesClearly) {
  start({.read_timeout_ms = 10'000, .flags = {"--max-connections", "8"}});
  const auto health = request_bytes("GET", "/healthz", {});
  std::vector<raw_connection> held;
  for (int i = 0; i < 8; ++i) {
    held.push_back(connect());
    ASSERT_TRUE(held.back().send(health));
    ASSERT_EQ(held.back().read_answer(5s).status, 200u) << i;
  }
  auto extra = connect();
  ASSERT_TRUE(extra.ok());
  ASSERT_TRUE(extra.send(health));
  auto refused = extra.read_answer(5s);
  EXPECT_EQ(refused.status, 503u) << refused.head;
  EXPECT_NE(refused.body.find("\"code\":\"too-many-connections\""),
            std::string::npos)
      << refused.body;
  EXPECT_TRUE(refused.has_header("Retry-After: 1")) << refused.head;
  EXPECT_TRUE(refused.has_header("Connection: close")) << refused.head;
  bool closed = false;
  EXPECT_EQ(extra.read_all(5s, &closed), "");
  EXPECT_TRUE(closed);
  // The held ones still work.
  ASSERT_TRUE(held.front().send(health));
  EXPECT_EQ(held.front().read_answer(5s).status, 200u);
  held.pop_back();
  EXPECT_TRUE(eventually([&] {
    auto again = connect();
    return again.send(health) && again.read_answer(5s).status == 200u;
  }));
}

// Under `prlimit --nofile=256` with more idle connections than descriptors,
// accept backs off instead of spinning (the process stays nearly idle), the
// newest idle connections are closed to free descriptors while the oldest
// keep being served, and once the flood is gone a write succeeds.
TEST_F(ConnectionTest, AcceptBacksOffWhenDescriptorsRunOut) {
  start({.read_timeout_ms = 30'000,
         .flags = {"--max-connections", "100000"},
         .descriptors_max = 256});
  const auto health = request_bytes("GET", "/healthz", {});
  std::vector<raw_connection> oldest;
  for (int i = 0; i < 16; ++i) {
    oldest.push_back(connect());
    ASSERT_TRUE(oldest.back().send(health));
    ASSERT_EQ(oldest.back().read_answer(5s).status, 200u);
  }
  std::vector<raw_connection> flood;
  for (int i = 0; i < 400; ++i) {
    flood.push_back(connect());
  }
  std::this_thread::sleep_for(1s);  // accept meets EMFILE and backs off
  auto cpu_before = proc_cpu_time(server_->pid());
  std::this_thread::sleep_for(3s);
  auto cpu_used = proc_cpu_time(server_->pid()) - cpu_before;
  // A spinning accept loop burns about a core: 3000 ms here.
  EXPECT_LT(cpu_used.count(), 600) << "CPU ms in 3 s";
  for (auto& connection : oldest) {
    ASSERT_TRUE(connection.send(health));
    EXPECT_EQ(connection.read_answer(5s).status, 200u);
  }
  std::size_t shed = 0;
  for (auto& connection : flood) {
    bool closed = false;
    connection.read_all(1ms, &closed);
    shed += closed ? 1 : 0;
  }
  EXPECT_GT(shed, 0u) << "no idle connection was closed";
  flood.clear();
  std::this_thread::sleep_for(200ms);
  auto client = admin();
  api_client::answer started;
  EXPECT_TRUE(eventually(
      [&] {
        started = client.post("/v1/runs", review("AFTER-FLOOD"), "after");
        return started.status == 200u;
      },
      10s))
      << started.status << " " << started.body << started.error;
  EXPECT_EQ(runs_for("AFTER-FLOOD"), 1);
}

// Thousands of connections that each send a malformed request and then hold
// the connection open: each is answered 400 and costs no drain buffer (a
// 64 KiB buffer each made 2,000 of them 128 MB).
TEST_F(ConnectionTest, RefusedConnectionsCostNoDrainBuffer) {
  const auto limit = raise_descriptor_limit();
  ASSERT_GT(limit, 1200u) << "too few descriptors for this test";
  const int connections = static_cast<int>(std::min<rlim_t>(2000, limit - 200));
  start({.read_timeout_ms = 10'000});
  {
    // Warm up: the io threads' and allocator's first costs.
    auto warm = connect();
    ASSERT_TRUE(warm.send("HELLO\x01\r\n\r\n"));
    EXPECT_EQ(warm.read_answer(5s).status, 400u);
  }
  const auto peak_before = proc_status_kb(server_->pid(), "VmHWM");
  std::vector<raw_connection> held;
  held.reserve(connections);
  for (int i = 0; i < connections; ++i) {
    held.push_back(connect());
    ASSERT_TRUE(held.back().ok()) << i;
    ASSERT_TRUE(held.back().send("HELLO\x01 not http\r\n\r\n")) << i;
  }
  int refused = 0;
  for (auto& connection : held) {
    refused += connection.read_answer(5s).status == 400u ? 1 : 0;
  }
  EXPECT_EQ(refused, connections);
  const auto peak_after = proc_status_kb(server_->pid(), "VmHWM");
  const auto grown_kb = peak_after - peak_before;
  RecordProperty("peak_rss_growth_kb", static_cast<int>(grown_kb));
  EXPECT_LT(grown_kb, 40 * 1024)
      << "peak RSS grew by " << grown_kb << " kB for " << connections
      << " refused connections";
  held.clear();
  EXPECT_EQ(admin().get("/healthz").status, 200u);
}

// One keyed start of the SIGTERM test, with what it got.
struct sent_request {
  std::string key;
  std::string order;
  std::chrono::steady_clock::time_point sent_at;
  raw_answer answer;
};

// `clients` threads, each sending keyed starts on one connection while
// `go`, until its connection ends or closes.
std::vector<std::thread> send_keyed_starts(
    int clients, int port, const std::string& secret,
    const std::atomic<bool>& go, std::mutex& mutex,
    std::vector<sent_request>& requests) {
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&, t] {
      raw_connection connection(port);
      for (int n = 0; connection.ok() && go; ++n) {
        sent_request request;
        request.key = "sig-" + std::to_string(t) + "-" + std::to_string(n);
        request.order = "SIG-" + std::to_string(t) + "-" + std::to_string(n);
        bool written =
            connection.send(keyed_start(request.key, secret, request.order));
        request.sent_at = std::chrono::steady_clock::now();
        if (written) {
          request.answer = connection.read_answer(30s);
        }
        bool ended = !written || request.answer.status == 0 ||
                     request.answer.has_header("Connection: close");
        std::lock_guard lock(mutex);
        requests.push_back(std::move(request));
        if (ended) {
          return;
        }
      }
    });
  }
  return threads;
}

// The same bytes again (the same Content-Type too): each is answered 200,
// an answered one with the same body, replayed.
void expect_replays(raw_connection& retries, const std::string& secret,
                    const std::vector<sent_request>& requests) {
  for (const auto& request : requests) {
    ASSERT_TRUE(retries.send(keyed_start(request.key, secret, request.order)));
    auto retry = retries.read_answer(30s);
    ASSERT_EQ(retry.status, 200u) << request.key << " " << retry.body;
    if (request.answer.status == 200u) {
      EXPECT_EQ(retry.body, request.answer.body) << request.key;
      EXPECT_TRUE(retry.has_header("Idempotent-Replayed: true"))
          << request.key << " " << retry.head;
    }
  }
}

// SIGTERM under load: every request the server received before the signal
// is answered, and the answers of the drain close their connections. No
// request is lost either way: after a restart, the retry of every key,
// answered or not, replays its run or starts the only one.
TEST_F(ConnectionTest, SigtermAnswersEveryAdmittedRequest) {
  start({.read_timeout_ms = 10'000});
  constexpr int clients = 6;
  std::mutex mutex;
  std::vector<sent_request> requests;
  std::atomic<bool> go{true};
  const auto secret = server_->admin_key();
  auto threads =
      send_keyed_starts(clients, server_->port(), secret, go, mutex, requests);
  std::this_thread::sleep_for(400ms);
  const auto signalled_at = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(server_->pid(), SIGTERM), 0);
  for (auto& thread : threads) {
    thread.join();
  }
  EXPECT_EQ(server_->terminate(), 0);
  int before_signal = 0;
  int drained = 0;
  for (const auto& request : requests) {
    if (request.sent_at < signalled_at) {
      ++before_signal;
      EXPECT_NE(request.answer.status, 0u)
          << request.key << " was sent before SIGTERM and not answered"
          << (request.answer.reset ? " (reset)" : "");
    }
    if (request.answer.status != 0) {
      EXPECT_EQ(request.answer.status, 200u)
          << request.key << " " << request.answer.body;
    }
    drained += request.answer.has_header("Connection: close") ? 1 : 0;
  }
  EXPECT_GT(before_signal, clients);
  EXPECT_GT(drained, 0) << "the signal came after the load";
  start();
  auto retries = connect();
  ASSERT_NO_FATAL_FAILURE(expect_replays(retries, secret, requests));
  auto client = admin();
  std::map<std::string, int> runs;
  ASSERT_NO_FATAL_FAILURE(count_runs_by_order(client, runs));
  for (const auto& request : requests) {
    EXPECT_EQ(runs[request.order], 1) << request.key;
  }
}

// A request still running when the drain timeout ends is answered 503
// shutting-down, its outcome unknown (the retry with its key tells), rather
// than cut off: here a waited start whose step waits for a worker that
// never comes, under --drain-timeout-ms 1000. The wait ends with the drain
// too, so the node exits then, not when the waited start's own 25 s would
// have run out.
TEST_F(ConnectionTest, RequestsOutlastingTheDrainAreAnsweredAsUnknown) {
  start({.flags = {"--drain-timeout-ms", "1000"}});
  auto body =
      json{{"flow", "acme.remote-echo"}, {"input", {{"value", 1}}}}.dump();
  auto connection = connect();
  ASSERT_TRUE(connection.send(
      request_bytes("POST", "/v1/runs",
                    {"Authorization: Bearer " + server_->admin_key(),
                     "Idempotency-Key: outlasts-the-drain",
                     "Content-Length: " + std::to_string(body.size())},
                    body)));
  std::this_thread::sleep_for(300ms);
  const auto began = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(server_->pid(), SIGTERM), 0);
  auto answer = connection.read_answer(10s);
  const auto took = std::chrono::steady_clock::now() - began;
  EXPECT_EQ(answer.status, 503u) << answer.head << answer.body;
  EXPECT_NE(answer.body.find("\"code\":\"shutting-down\""), std::string::npos)
      << answer.body;
  EXPECT_TRUE(answer.has_header("Connection: close")) << answer.head;
  EXPECT_GE(took, 900ms);
  EXPECT_LT(took, 4s);
  EXPECT_TRUE(eventually([&] { return !server_->running(); }, 8s))
      << "durin serve still runs "
      << std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now() - began)
             .count()
      << " ms after SIGTERM with --drain-timeout-ms 1000";
}

// RFC 9110 10.1.1: a client that sends `Expect: 100-continue` waits for
// `100 Continue` before it sends the body (curl does for bodies over 1 KiB,
// then gives up after 1 s). Here the client sends only the header and waits:
// the 100 comes before any byte of the body was sent, then the body gets
// its answer, for a Content-Length body and a chunked one alike. A request
// whose framing says it has no body gets its answer and no 100.
TEST_F(ConnectionTest, ExpectContinueIsAnsweredBeforeTheBody) {
  start({.read_timeout_ms = 10'000});
  const auto key = "Authorization: Bearer " + server_->admin_key();
  auto connection = connect();
  for (bool chunked : {false, true}) {
    SCOPED_TRACE(chunked ? "chunked" : "Content-Length");
    const std::string order = chunked ? "CONTINUE-CHUNKED" : "CONTINUE";
    // Blank space after the object keeps it JSON and makes it 2 KiB.
    auto body = review(order).dump() + std::string(2048, ' ');
    char size[16];
    std::snprintf(size, sizeof size, "%zx", body.size());
    std::string framing = "Content-Length: " + std::to_string(body.size());
    if (chunked) {
      framing = "Transfer-Encoding: chunked";
      body = std::string(size) + "\r\n" + body + "\r\n0\r\n\r\n";
    }
    ASSERT_TRUE(connection.send(request_bytes(
        "POST", "/v1/runs", {key, framing, "Expect: 100-continue"})));
    auto interim = connection.read_answer(5s);
    ASSERT_EQ(interim.status, 100u) << "no 100 Continue before the body";
    EXPECT_EQ(interim.head, "HTTP/1.1 100 Continue");
    ASSERT_TRUE(connection.send(body));
    auto answer = connection.read_answer(10s);
    EXPECT_EQ(answer.status, 200u) << answer.head << answer.body;
    EXPECT_EQ(runs_for(order), 1);
  }
  ASSERT_TRUE(connection.send(
      request_bytes("GET", "/healthz", {"Expect: 100-continue"})));
  auto health = connection.read_answer(5s);
  EXPECT_EQ(health.status, 200u) << health.head;
}

// Where the header alone decides a refusal (a Content-Length over the body
// limit: 413; framing that could smuggle a request: 400), the client gets
// that final answer instead of a 100, and the connection closes as it does
// without Expect.
TEST_F(ConnectionTest, ExpectContinueGetsTheRefusalTheHeaderDecides) {
  start({.read_timeout_ms = 10'000});
  const auto key = "Authorization: Bearer " + server_->admin_key();
  const std::vector<std::pair<std::string, std::string>> refusals = {
      {"Content-Length: " + std::to_string(2 << 20), "413"},
      {"Transfer-Encoding: gzip", "400"},
  };
  for (const auto& [framing, status] : refusals) {
    SCOPED_TRACE(framing);
    auto connection = connect();
    ASSERT_TRUE(connection.send(request_bytes(
        "POST", "/v1/runs", {key, framing, "Expect: 100-continue"})));
    bool closed = false;
    auto text = connection.read_all(5s, &closed);
    EXPECT_EQ(text.rfind("HTTP/1.1 " + status + " ", 0), 0u) << text;
    EXPECT_EQ(text.find("100 Continue"), std::string::npos) << text;
    EXPECT_EQ(count_of(text, "HTTP/1.1 "), 1u) << text;
    EXPECT_TRUE(closed) << "the connection stays open";
  }
}

// RFC 9110 9.3.2: an answer to a HEAD carries the GET's status and headers
// (its Content-Length the GET body's) and no body, on every route that
// answers GET: open, keyed, a worker route, the console. Each HEAD is
// followed by its GET on the same connection, which is answered as sent:
// a body after the HEAD's head would be read as the GET's answer.
TEST_F(ConnectionTest, AnAnswerToHeadIsTheGetsWithoutItsBody) {
  start();
  const auto key = "Authorization: Bearer " + server_->admin_key();
  auto started = admin().post("/v1/runs", review("HEAD-1"));
  ASSERT_EQ(started.status, 200u) << started.body;
  const std::string run = "/v1/runs/" + started.value["id"].get<std::string>();
  auto connection = connect();
  for (const auto& target : std::vector<std::string>{
           "/healthz", "/readyz", "/v1/runs", run, run + "/history",
           "/v1/tasks", "/v1/hooks/no-such-hook", "/console/"}) {
    SCOPED_TRACE(target);
    ASSERT_TRUE(connection.send(request_bytes("HEAD", target, {key})));
    auto head = connection.read_answer(5s, true);
    ASSERT_TRUE(connection.send(request_bytes("GET", target, {key})));
    auto get = connection.read_answer(5s);
    ASSERT_NE(get.status, 0u) << "the GET after the HEAD got no answer";
    EXPECT_EQ(head.status, get.status) << head.head;
    EXPECT_FALSE(get.body.empty());
    EXPECT_EQ(line_of(head.head, "Content-Length:"),
              "Content-Length: " + std::to_string(get.body.size()));
    EXPECT_EQ(line_of(head.head, "Content-Type:"),
              line_of(get.head, "Content-Type:"));
  }
  // Nothing came after the last GET's answer.
  bool closed = false;
  EXPECT_EQ(connection.read_all(200ms, &closed), "");
  EXPECT_FALSE(closed);
}

// RFC 9110 15.5.6: a 405 names the methods the path takes in `Allow`, from
// the route table (HEAD wherever GET is); a HEAD refused so gets no body.
TEST_F(ConnectionTest, MethodNotAllowedListsTheAllowedMethods) {
  start();
  const auto key = "Authorization: Bearer " + server_->admin_key();
  struct refusal {
    std::string method;
    std::string target;
    std::string allow;
  };
  const std::vector<refusal> refusals = {
      {"PUT", "/v1/runs", "GET, HEAD, POST"},
      {"GET", "/v1/runs/r-1/cancel", "POST"},
      {"HEAD", "/v1/runs/r-1/cancel", "POST"},
      {"DELETE", "/healthz", "GET, HEAD"},
      {"POST", "/v1/schedules/s-1", "DELETE, GET, HEAD"},
      {"GET", "/v1/api-keys/k-1", "DELETE"},
      {"DELETE", "/v1/tasks", "GET, HEAD"},
  };
  auto connection = connect();
  for (const auto& [method, target, allow] : refusals) {
    SCOPED_TRACE(method + " " + target);
    ASSERT_TRUE(connection.send(request_bytes(method, target, {key})));
    auto answer = connection.read_answer(5s, method == "HEAD");
    EXPECT_EQ(answer.status, 405u) << answer.head << answer.body;
    EXPECT_EQ(line_of(answer.head, "Allow:"), "Allow: " + allow);
    if (method != "HEAD") {
      EXPECT_NE(answer.body.find("\"code\":\"method-not-allowed\""),
                std::string::npos)
          << answer.body;
    }
  }
  ASSERT_TRUE(connection.send(request_bytes("GET", "/healthz", {})));
  EXPECT_EQ(connection.read_answer(5s).status, 200u);
}

// Two Authorization headers are refused as two Idempotency-Keys are: 400
// invalid-argument naming the header, never either value (a proxy in front
// may take the other one than this node would); nothing runs. One header
// on the same connection is served.
TEST_F(ConnectionTest, ARepeatedAuthorizationHeaderIsRefused) {
  start();
  const auto secret = server_->admin_key();
  const auto body = review("TWO-KEYS").dump();
  auto connection = connect();
  for (const auto& second : {secret, std::string("dk_wrong")}) {
    ASSERT_TRUE(connection.send(request_bytes(
        "POST", "/v1/runs",
        {"Authorization: Bearer " + secret, "Authorization: Bearer " + second,
         "Content-Length: " + std::to_string(body.size())},
        body)));
    auto answer = connection.read_answer(5s);
    EXPECT_EQ(answer.status, 400u) << answer.head << answer.body;
    auto value = json::parse(answer.body, nullptr, false);
    ASSERT_TRUE(value.is_object()) << answer.body;
    EXPECT_EQ(value["code"], "invalid-argument");
    EXPECT_EQ(value["message"],
              "send one Authorization header; this request has 2");
    EXPECT_EQ(answer.body.find(secret), std::string::npos);
  }
  ASSERT_TRUE(connection.send(
      request_bytes("GET", "/v1/runs", {"Authorization: Bearer " + secret})));
  EXPECT_EQ(connection.read_answer(5s).status, 200u);
  EXPECT_EQ(runs_for("TWO-KEYS"), 0);
}

}  // namespace
}  // namespace durin::testing
