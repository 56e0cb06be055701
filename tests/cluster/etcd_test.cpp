// The etcd client keeps the rules the cluster will build ownership on: reads
// see writes with their revisions, bytes survive the gateway's base64,
// create-if-absent and compare-and-swap txns let exactly one writer win, a
// lease's keys live exactly as long as it is kept alive, and a dead endpoint
// costs one failed call before the next one takes over.
//
// Method: each test starts its own real single-member etcd
// (tests/support/etcd_process.hpp) and talks to it over the JSON gateway;
// the wire-format tests at the end need no etcd.
#include "cluster/etcd.hpp"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cluster/detail/etcd_wire.hpp"
#include "tests/support/etcd_process.hpp"

namespace durin::cluster {
namespace {

using namespace std::chrono_literals;
using durin::testing::etcd_process;
using clock_type = std::chrono::steady_clock;

// A 127.0.0.1 port held (bound, and listening when asked) for the life of
// the object, so nothing else takes it: unlistened it refuses connections,
// listened it accepts them into the backlog and never answers.
class held_port {
 public:
  explicit held_port(bool listening) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&address), length), 0);
    EXPECT_EQ(
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length), 0);
    if (listening) {
      EXPECT_EQ(::listen(fd_, 8), 0);
    }
    port_ = ntohs(address.sin_port);
  }
  ~held_port() { ::close(fd_); }
  held_port(const held_port&) = delete;
  held_port& operator=(const held_port&) = delete;

  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port_);
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

class EtcdClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto made = etcd_client::make(etcd_.endpoint());
    ASSERT_TRUE(made) << made.error().to_string();
    client_.emplace(std::move(made).value());
  }

  // Polls `key` every 50 ms until it is absent or `limit` passes; how long
  // that took, or nullopt when it was still there.
  std::optional<std::chrono::milliseconds> wait_absent(
      const std::string& key, std::chrono::milliseconds limit) {
    auto begin = clock_type::now();
    while (clock_type::now() - begin < limit) {
      auto read = client_->range(key);
      if (read && read->kvs.empty()) {
        return std::chrono::duration_cast<std::chrono::milliseconds>(
            clock_type::now() - begin);
      }
      std::this_thread::sleep_for(50ms);
    }
    return std::nullopt;
  }

  etcd_process etcd_;
  std::optional<etcd_client> client_;
};

TEST_F(EtcdClientTest, PutThenRangeReadsTheValueAndItsRevisions) {
  auto first = client_->put("/t/k", "v1");
  ASSERT_TRUE(first) << first.error().to_string();
  auto second = client_->put("/t/k", "v2");
  ASSERT_TRUE(second) << second.error().to_string();
  EXPECT_GT(*second, *first);

  auto read = client_->range("/t/k");
  ASSERT_TRUE(read) << read.error().to_string();
  ASSERT_EQ(read->kvs.size(), 1u);
  const auto& got = read->kvs[0];
  EXPECT_EQ(got.key, "/t/k");
  EXPECT_EQ(got.value, "v2");
  EXPECT_EQ(got.create_revision, *first);
  EXPECT_EQ(got.mod_revision, *second);
  EXPECT_EQ(got.version, 2);
  EXPECT_EQ(got.lease, 0);
  EXPECT_EQ(read->revision, *second);

  auto absent = client_->range("/t/none");
  ASSERT_TRUE(absent) << absent.error().to_string();
  EXPECT_TRUE(absent->kvs.empty());
  EXPECT_EQ(absent->revision, *second);
}

TEST_F(EtcdClientTest, PrefixRangeAndEraseCoverOnlyKeysUnderThePrefix) {
  for (const char* key : {"/p/b", "/p/a", "/p/a/deep", "/p0", "/p", "/q"}) {
    ASSERT_TRUE(client_->put(key, key));
  }
  auto read = client_->range("/p/", true);
  ASSERT_TRUE(read) << read.error().to_string();
  std::vector<std::string> keys;
  for (const auto& item : read->kvs) {
    keys.push_back(item.key);
    EXPECT_EQ(item.value, item.key);
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"/p/a", "/p/a/deep", "/p/b"}));

  auto erased = client_->erase("/p/", true);
  ASSERT_TRUE(erased) << erased.error().to_string();
  EXPECT_EQ(*erased, 3);
  EXPECT_TRUE(client_->range("/p/", true)->kvs.empty());
  EXPECT_EQ(client_->range("/p0")->kvs.size(), 1u);
  EXPECT_EQ(client_->range("/p")->kvs.size(), 1u);
  EXPECT_EQ(*client_->erase("/p0"), 1);
  EXPECT_EQ(*client_->erase("/nothing"), 0);
}

TEST_F(EtcdClientTest, BinaryKeysAndValuesRoundTripThroughBase64) {
  std::string every_byte;
  for (int byte = 0; byte < 256; ++byte) {
    every_byte += static_cast<char>(byte);
  }
  const std::string binary_key("b/\0\xff\n\"\\", 7);
  ASSERT_TRUE(client_->put(binary_key, every_byte));
  auto read = client_->range(binary_key);
  ASSERT_TRUE(read) << read.error().to_string();
  ASSERT_EQ(read->kvs.size(), 1u);
  EXPECT_EQ(read->kvs[0].key, binary_key);
  EXPECT_EQ(read->kvs[0].value, every_byte);

  // Every padding length of base64, the empty value included.
  for (std::size_t length = 0; length < 5; ++length) {
    auto key = "len/" + std::to_string(length);
    ASSERT_TRUE(client_->put(key, every_byte.substr(250, length)));
    auto back = client_->range(key);
    ASSERT_TRUE(back);
    ASSERT_EQ(back->kvs.size(), 1u);
    EXPECT_EQ(back->kvs[0].value, every_byte.substr(250, length));
  }

  // A prefix ending in 0xff ends its range at the byte before it, + 1.
  const std::string prefix("\x01\xff", 2);
  for (const auto& key :
       {prefix + '\0', prefix + '\xff', std::string("\x02")}) {
    ASSERT_TRUE(client_->put(key, "x"));
  }
  auto under = client_->range(prefix, true);
  ASSERT_TRUE(under) << under.error().to_string();
  ASSERT_EQ(under->kvs.size(), 2u);
  EXPECT_EQ(under->kvs[0].key, prefix + '\0');
  EXPECT_EQ(under->kvs[1].key, prefix + '\xff');
}

TEST_F(EtcdClientTest, CreateIfAbsentTxnWinsForExactlyOneOfTwo) {
  constexpr int keys = 20;
  auto second = etcd_client::make(etcd_.endpoint());
  ASSERT_TRUE(second);
  std::optional<result<txn_result>> outcome[2][keys];
  std::atomic<int> ready{0};
  auto contend = [&](int who, etcd_client& client) {
    ++ready;
    while (ready < 2) {
    }
    for (int i = 0; i < keys; ++i) {
      auto key = "/owner/" + std::to_string(i);
      outcome[who][i].emplace(
          client.txn({{key, compare::target::create, compare::op::equal, 0}},
                     {{request_op::kind::put, key, who == 0 ? "a" : "b"}},
                     {{request_op::kind::range, key}}));
    }
  };
  std::thread other([&] { contend(1, *second); });
  contend(0, *client_);
  other.join();

  for (int i = 0; i < keys; ++i) {
    auto& a = *outcome[0][i];
    auto& b = *outcome[1][i];
    ASSERT_TRUE(a) << a.error().to_string();
    ASSERT_TRUE(b) << b.error().to_string();
    ASSERT_NE(a->succeeded, b->succeeded) << "key " << i;
    const auto& winner = a->succeeded ? *a : *b;
    const auto& loser = a->succeeded ? *b : *a;
    std::string winner_name = a->succeeded ? "a" : "b";
    EXPECT_TRUE(winner.ranges.empty());
    // The loser learns who won from its failure branch.
    ASSERT_EQ(loser.ranges.size(), 1u);
    ASSERT_EQ(loser.ranges[0].size(), 1u);
    EXPECT_EQ(loser.ranges[0][0].value, winner_name);
    EXPECT_EQ(loser.ranges[0][0].create_revision, winner.revision);
    auto read = client_->range("/owner/" + std::to_string(i));
    ASSERT_TRUE(read);
    ASSERT_EQ(read->kvs.size(), 1u);
    EXPECT_EQ(read->kvs[0].value, winner_name);
    EXPECT_EQ(read->kvs[0].version, 1);
  }
}

TEST_F(EtcdClientTest, ModRevisionCasRefusesAStaleRevision) {
  auto written = client_->put("/cas", "v1");
  ASSERT_TRUE(written);
  auto swap = [&](std::int64_t seen, const std::string& value) {
    return client_->txn(
        {{"/cas", compare::target::mod, compare::op::equal, seen}},
        {{request_op::kind::put, "/cas", value}},
        {{request_op::kind::range, "/cas"}});
  };
  auto fresh = swap(*written, "v2");
  ASSERT_TRUE(fresh) << fresh.error().to_string();
  EXPECT_TRUE(fresh->succeeded);
  EXPECT_GT(fresh->revision, *written);

  auto stale = swap(*written, "v3");
  ASSERT_TRUE(stale) << stale.error().to_string();
  EXPECT_FALSE(stale->succeeded);
  ASSERT_EQ(stale->ranges.size(), 1u);
  ASSERT_EQ(stale->ranges[0].size(), 1u);
  EXPECT_EQ(stale->ranges[0][0].value, "v2");
  EXPECT_EQ(stale->ranges[0][0].mod_revision, fresh->revision);
  EXPECT_EQ(client_->range("/cas")->kvs[0].value, "v2");

  // A value compare and a prefix erase in one branch.
  auto by_value = client_->txn(
      {{"/cas", compare::target::value, compare::op::equal, 0, "v2"}},
      {{request_op::kind::erase, "/ca", "", 0, true}});
  ASSERT_TRUE(by_value) << by_value.error().to_string();
  EXPECT_TRUE(by_value->succeeded);
  EXPECT_TRUE(client_->range("/cas")->kvs.empty());
}

TEST_F(EtcdClientTest,
       ALeaseKeyVanishesOnceTheLeaseExpiresAndKeepAliveSaysGone) {
  auto granted = client_->grant(2);
  ASSERT_TRUE(granted) << granted.error().to_string();
  auto granted_at = clock_type::now();
  EXPECT_EQ(granted->ttl_s, 2);
  ASSERT_TRUE(client_->put("/lease/k", "held", granted->id));
  auto read = client_->range("/lease/k");
  ASSERT_EQ(read->kvs.size(), 1u);
  EXPECT_EQ(read->kvs[0].lease, granted->id);

  ASSERT_TRUE(wait_absent("/lease/k", 10s)) << "the key outlived its lease";
  // Gone because the TTL ran out, not before.
  EXPECT_GE(clock_type::now() - granted_at, 1800ms);

  auto renewed = client_->keep_alive(granted->id);
  ASSERT_FALSE(renewed);
  EXPECT_EQ(renewed.error().code, errc::invalid_argument)
      << renewed.error().to_string();
}

TEST_F(EtcdClientTest, AKeptAliveLeaseKeepsItsKeyOverThreeTtls) {
  auto granted = client_->grant(2);
  ASSERT_TRUE(granted) << granted.error().to_string();
  ASSERT_TRUE(client_->put("/lease/kept", "held", granted->id));
  // Renewed every TTL/4, as a node will; checked at every renewal.
  auto until = clock_type::now() + 3 * 2s;
  int renewals = 0;
  while (clock_type::now() < until) {
    auto ttl = client_->keep_alive(granted->id);
    ASSERT_TRUE(ttl) << ttl.error().to_string();
    EXPECT_EQ(*ttl, 2);
    ASSERT_EQ(client_->range("/lease/kept")->kvs.size(), 1u)
        << "lost after " << renewals << " renewals";
    ++renewals;
    std::this_thread::sleep_for(500ms);
  }
  EXPECT_GE(renewals, 10);
  // And it was the renewals that kept it.
  EXPECT_TRUE(wait_absent("/lease/kept", 10s));
}

TEST_F(EtcdClientTest, ARevokedLeaseTakesItsKeysAtOnce) {
  auto granted = client_->grant(30);
  ASSERT_TRUE(granted);
  ASSERT_TRUE(client_->put("/revoke/a", "1", granted->id));
  ASSERT_TRUE(client_->put("/revoke/b", "2", granted->id));
  ASSERT_TRUE(client_->revoke(granted->id));
  auto read = client_->range("/revoke/", true);
  ASSERT_TRUE(read);
  EXPECT_TRUE(read->kvs.empty());

  auto renewed = client_->keep_alive(granted->id);
  ASSERT_FALSE(renewed);
  EXPECT_EQ(renewed.error().code, errc::invalid_argument);
  auto again = client_->revoke(granted->id);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, errc::invalid_argument)
      << again.error().to_string();
}

TEST_F(EtcdClientTest, ACompactedRevisionCannotBeCompactedAgain) {
  ASSERT_TRUE(client_->put("/k", "1"));
  auto last = client_->put("/k", "2");
  ASSERT_TRUE(last);
  ASSERT_TRUE(client_->compact(*last));
  auto again = client_->compact(*last - 1);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, errc::invalid_argument);
  auto future = client_->compact(*last + 100);
  ASSERT_FALSE(future);
  EXPECT_EQ(future.error().code, errc::invalid_argument);
}

TEST_F(EtcdClientTest, AFailedEndpointSendsTheNextCallToTheNextEndpoint) {
  held_port dead(false);
  auto made = etcd_client::make(dead.url() + "," + etcd_.endpoint());
  ASSERT_TRUE(made);
  auto& client = *made;

  auto first = client.put("/failover", "1");
  ASSERT_FALSE(first);
  EXPECT_EQ(first.error().code, errc::shutting_down);
  EXPECT_NE(first.error().message.find(dead.url()), std::string::npos)
      << first.error().message;
  auto second = client.put("/failover", "1");
  ASSERT_TRUE(second) << second.error().to_string();
  for (int call = 0; call < 3; ++call) {
    auto next = client.range("/failover");
    ASSERT_TRUE(next) << next.error().to_string();
    EXPECT_EQ(next->kvs.size(), 1u);
  }

  // The live one dies: a failure naming it, then the dead one, then back.
  etcd_.kill();
  auto lost = client.range("/failover");
  ASSERT_FALSE(lost);
  EXPECT_EQ(lost.error().code, errc::shutting_down);
  EXPECT_NE(lost.error().message.find(etcd_.endpoint()), std::string::npos)
      << lost.error().message;
  auto around = client.range("/failover");
  ASSERT_FALSE(around);
  EXPECT_NE(around.error().message.find(dead.url()), std::string::npos);
  etcd_.restart();
  auto back = client.range("/failover");
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->kvs.size(), 1u);
}

TEST(EtcdClientTransportTest, ACallToASilentEndpointTimesOut) {
  held_port silent(true);
  auto made = etcd_client::make(silent.url(), 300);
  ASSERT_TRUE(made);
  auto begin = clock_type::now();
  auto read = made->range("/k");
  auto took = clock_type::now() - begin;
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error().code, errc::timeout) << read.error().to_string();
  EXPECT_NE(read.error().message.find(silent.url()), std::string::npos);
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 2s);
}

// The wire format, without etcd.

TEST(EtcdWireTest, Base64RoundTripsEveryLengthAndRefusesMalformedText) {
  EXPECT_EQ(detail::base64_encode(""), "");
  EXPECT_EQ(detail::base64_encode("f"), "Zg==");
  EXPECT_EQ(detail::base64_encode("fo"), "Zm8=");
  EXPECT_EQ(detail::base64_encode("foobar"), "Zm9vYmFy");
  std::string bytes;
  for (int i = 0; i < 40; ++i) {
    auto back = detail::base64_decode(detail::base64_encode(bytes));
    ASSERT_TRUE(back);
    EXPECT_EQ(*back, bytes);
    bytes += static_cast<char>(i * 37 + 200);
  }
  for (const char* bad : {"Zg=", "Zg=a", "Z===", "====", "Zm9v!mFy", "=Zg="}) {
    auto decoded = detail::base64_decode(bad);
    ASSERT_FALSE(decoded) << bad;
    EXPECT_EQ(decoded.error().code, errc::internal);
  }
}

TEST(EtcdWireTest, PrefixEndIncrementsTheLastByteBelow0xff) {
  EXPECT_EQ(prefix_end("a"), "b");
  EXPECT_EQ(prefix_end("/p/"), "/p0");
  EXPECT_EQ(prefix_end(std::string("a\xff\xff", 3)), "b");
  EXPECT_EQ(prefix_end(std::string("\xff", 1)), std::string(1, '\0'));
  EXPECT_EQ(prefix_end(""), std::string(1, '\0'));
}

TEST(EtcdWireTest, MalformedAnswersAreErrorsNotExceptions) {
  for (const char* bad : {R"({"key": 5})", R"({"key": "YQ=", "version": "1"})",
                          R"({"mod_revision": "12x"})", R"({"version": true})",
                          R"([1])", R"({"lease": "99999999999999999999"})"}) {
    auto decoded = detail::decode_kv(json::parse(bad));
    ASSERT_FALSE(decoded) << bad;
    EXPECT_EQ(decoded.error().code, errc::internal);
  }
  auto fine = detail::decode_kv(json::parse(
      R"({"key": "YQ==", "create_revision": "3", "mod_revision": 4})"));
  ASSERT_TRUE(fine);
  EXPECT_EQ(fine->key, "a");
  EXPECT_EQ(fine->create_revision, 3);
  EXPECT_EQ(fine->mod_revision, 4);
  EXPECT_EQ(fine->version, 0);
  EXPECT_FALSE(detail::decode_kvs(json::parse(R"({"kvs": {}})")));

  auto gone = detail::gateway_error(
      "http://e:1", 404,
      R"({"error":"x","message":"lease not found","code":5})");
  EXPECT_EQ(gone.code, errc::invalid_argument);
  EXPECT_EQ(gone.message, "etcd http://e:1: lease not found");
  EXPECT_EQ(detail::gateway_error("e", 503, R"({"code":14})").code,
            errc::shutting_down);
  EXPECT_EQ(detail::gateway_error("e", 504, R"({"code":4})").code,
            errc::timeout);
  auto on_stream = detail::stream_error(
      "e", json{{"grpc_code", 14}, {"message", "no leader"}});
  EXPECT_EQ(on_stream.code, errc::shutting_down);
  EXPECT_EQ(on_stream.message, "etcd e: no leader");
  EXPECT_EQ(detail::stream_error("e", json("what")).code, errc::internal);
  auto garbage = detail::gateway_error("e", 502, "<html>");
  EXPECT_EQ(garbage.code, errc::internal);
  EXPECT_NE(garbage.message.find("HTTP 502"), std::string::npos);
}

TEST(EtcdWireTest, EndpointListsKeepTheirOrderAndRefuseMalformedEntries) {
  auto parsed = detail::parse_endpoints("http://a:1, http://b:2");
  ASSERT_TRUE(parsed);
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].url, "http://a:1");
  EXPECT_EQ((*parsed)[1].address.host, "b");
  EXPECT_EQ((*parsed)[1].address.port, "2");
  for (const char* bad : {"", "127.0.0.1:2379", "http://a:1,,http://b:2",
                          "http://a", "https://a:1"}) {
    auto made = etcd_client::make(bad);
    ASSERT_FALSE(made) << bad;
    EXPECT_EQ(made.error().code, errc::invalid_argument);
  }
  EXPECT_FALSE(etcd_client::make("http://a:1", 0));
}

}  // namespace
}  // namespace durin::cluster
