// A watch hands its owner every change after its start revision exactly
// once, in revision order, also across a crash of etcd; when it cannot (the
// revisions it needs are compacted) it says so with on_lost, and the owner's
// re-read plus a new watch picks up from there. It stops promptly, however
// it is blocked.
//
// Method: real single-member etcd processes (tests/support/etcd_process.hpp)
// killed with SIGKILL and restarted on the same data; writes through
// etcd_client; the watch's callbacks record into a recorder the test reads.
// Where an event must be written but never delivered on the old stream, the
// watch reaches etcd through tests/support/tcp_proxy.hpp, paused and its
// connections dropped.
#include "cluster/etcd_watch.hpp"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cluster/etcd.hpp"
#include "tests/support/etcd_process.hpp"
#include "tests/support/tcp_proxy.hpp"

namespace durin::cluster {
namespace {

using namespace std::chrono_literals;
using durin::testing::etcd_process;
using clock_type = std::chrono::steady_clock;

// What a watch delivered, for the test thread to wait on and read.
class recorder {
 public:
  etcd_watch::events_handler on_events() {
    return [this](std::vector<watch_event> events, std::int64_t revision) {
      std::lock_guard lock(mutex_);
      batch_revisions_.push_back(revision);
      for (auto& event : events) {
        events_.push_back(std::move(event));
      }
      changed_.notify_all();
    };
  }
  etcd_watch::lost_handler on_lost() {
    return [this] {
      std::lock_guard lock(mutex_);
      ++lost_;
      changed_.notify_all();
    };
  }

  // True once `count` events arrived (or more) within `limit`.
  bool wait_events(std::size_t count, std::chrono::milliseconds limit = 10s) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, limit,
                             [&] { return events_.size() >= count; });
  }
  bool wait_lost(std::chrono::milliseconds limit = 10s) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, limit, [&] { return lost_ > 0; });
  }

  std::vector<watch_event> events() {
    std::lock_guard lock(mutex_);
    return events_;
  }
  std::vector<std::int64_t> batch_revisions() {
    std::lock_guard lock(mutex_);
    return batch_revisions_;
  }
  int lost() {
    std::lock_guard lock(mutex_);
    return lost_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<watch_event> events_;
  std::vector<std::int64_t> batch_revisions_;
  int lost_ = 0;
};

class EtcdWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto made = etcd_client::make(etcd_.endpoint());
    ASSERT_TRUE(made) << made.error().to_string();
    client_.emplace(std::move(made).value());
  }

  // A watch of `prefix` from the revision after the current one, so every
  // write the test makes next is delivered.
  std::optional<etcd_watch> watch_from_now(const std::string& prefix,
                                           recorder& into,
                                           const std::string& endpoints = "") {
    auto now = client_->range(prefix, true);
    EXPECT_TRUE(now) << now.error().to_string();
    watch_options options;
    options.key = prefix;
    options.prefix = true;
    options.start_revision = now->revision + 1;
    options.prev_kv = true;
    auto started =
        etcd_watch::start(endpoints.empty() ? etcd_.endpoint() : endpoints,
                          options, into.on_events(), into.on_lost());
    EXPECT_TRUE(started) << started.error().to_string();
    return std::move(started).value();
  }

  // A put that waits out etcd's restart: the first calls after a crash fail.
  std::int64_t put_retrying(const std::string& key, const std::string& value) {
    auto until = clock_type::now() + 10s;
    for (;;) {
      auto written = client_->put(key, value);
      if (written || clock_type::now() > until) {
        EXPECT_TRUE(written) << written.error().to_string();
        return written ? *written : 0;
      }
      std::this_thread::sleep_for(50ms);
    }
  }

  etcd_process etcd_;
  std::optional<etcd_client> client_;
};

TEST_F(EtcdWatchTest, DeliversPutsAndDeletesInOrderWithTheirRevisions) {
  recorder seen;
  auto watch = watch_from_now("/w/", seen);
  auto first = client_->put("/w/a", "1");
  auto second = client_->put("/w/b", "2");
  ASSERT_TRUE(client_->put("/x/outside", "no"));
  ASSERT_EQ(*client_->erase("/w/a"), 1);
  auto erased_at = client_->range("/w/", true)->revision;
  auto again = client_->put("/w/a", "3");
  ASSERT_TRUE(first && second && again);

  ASSERT_TRUE(seen.wait_events(4));
  std::this_thread::sleep_for(100ms);  // nothing more may come
  auto events = seen.events();
  ASSERT_EQ(events.size(), 4u);
  using type = watch_event::type;
  EXPECT_EQ(events[0].what, type::put);
  EXPECT_EQ(events[0].now.key, "/w/a");
  EXPECT_EQ(events[0].now.value, "1");
  EXPECT_EQ(events[0].now.mod_revision, *first);
  EXPECT_EQ(events[0].previous.key, "");  // it did not exist
  EXPECT_EQ(events[1].what, type::put);
  EXPECT_EQ(events[1].now.key, "/w/b");
  EXPECT_EQ(events[1].now.mod_revision, *second);
  EXPECT_EQ(events[2].what, type::erase);
  EXPECT_EQ(events[2].now.key, "/w/a");
  EXPECT_EQ(events[2].now.mod_revision, erased_at);
  EXPECT_EQ(events[2].previous.value, "1");
  EXPECT_EQ(events[3].what, type::put);
  EXPECT_EQ(events[3].now.value, "3");
  EXPECT_EQ(events[3].now.mod_revision, *again);
  EXPECT_EQ(events[3].now.create_revision, *again);
  EXPECT_EQ(events[3].now.version, 1);

  // Each batch's revision is its last event's, and they only grow.
  auto revisions = seen.batch_revisions();
  ASSERT_FALSE(revisions.empty());
  EXPECT_EQ(revisions.back(), *again);
  for (std::size_t i = 1; i < revisions.size(); ++i) {
    EXPECT_LT(revisions[i - 1], revisions[i]);
  }
  EXPECT_EQ(seen.lost(), 0);
  EXPECT_EQ(watch->streams_created(), 1);
}

TEST_F(EtcdWatchTest, ResumesAfterEtcdIsKilledWithoutLosingOrRepeatingAnEvent) {
  // Through a proxy, so that in the second round the event written just
  // before the kill is held back and never reaches the old stream; in the
  // first it is delivered there (a resume must not repeat it).
  durin::testing::tcp_proxy proxy(etcd_.client_port());
  recorder seen;
  auto watch = watch_from_now("/r/", seen, proxy.url());
  std::vector<std::string> written;
  for (int round = 0; round < 2; ++round) {
    auto tag = std::to_string(round);
    bool hold = round == 1;
    put_retrying("/r/" + tag + "-before", "x");
    written.push_back("/r/" + tag + "-before");
    ASSERT_TRUE(seen.wait_events(written.size()));
    if (hold) {
      proxy.pause();
    }
    // Acknowledged, so durable on etcd's disk before the kill.
    put_retrying("/r/" + tag + "-last", "x");
    written.push_back("/r/" + tag + "-last");
    if (!hold) {
      ASSERT_TRUE(seen.wait_events(written.size()));
    }
    etcd_.kill();
    if (hold) {
      proxy.drop_connections();
      EXPECT_EQ(seen.events().size(), written.size() - 1);
      proxy.resume();
    }
    etcd_.restart();
    put_retrying("/r/" + tag + "-after", "x");
    written.push_back("/r/" + tag + "-after");
    ASSERT_TRUE(seen.wait_events(written.size()))
        << "round " << round << ": " << seen.events().size() << " events";
  }
  std::this_thread::sleep_for(200ms);  // a repeat would come now
  std::vector<std::string> keys;
  std::int64_t last = 0;
  for (const auto& event : seen.events()) {
    keys.push_back(event.now.key);
    EXPECT_GT(event.now.mod_revision, last);
    last = event.now.mod_revision;
  }
  EXPECT_EQ(keys, written);
  EXPECT_EQ(seen.lost(), 0);
  // Each crash broke the stream: the events after it came by a resume.
  EXPECT_GE(watch->streams_created(), 3);
}

TEST_F(EtcdWatchTest, AResumeAtACompactedRevisionReportsLost) {
  durin::testing::tcp_proxy proxy(etcd_.client_port());
  recorder seen;
  auto watch = watch_from_now("/rc/", seen, proxy.url());
  ASSERT_TRUE(client_->put("/rc/k", "1"));
  ASSERT_TRUE(seen.wait_events(1));
  // Two writes the watch never sees, then their history compacted away.
  proxy.pause();
  ASSERT_TRUE(client_->put("/rc/k", "2"));
  auto third = client_->put("/rc/k", "3");
  ASSERT_TRUE(third);
  ASSERT_TRUE(client_->compact(*third));
  proxy.drop_connections();
  proxy.resume();
  ASSERT_TRUE(seen.wait_lost());
  EXPECT_EQ(seen.events().size(), 1u);
}

TEST_F(EtcdWatchTest, ACompactedStartRevisionReportsLostAndAReReadResumes) {
  auto first = client_->put("/c/k", "1");
  ASSERT_TRUE(client_->put("/c/k", "2"));
  auto third = client_->put("/c/k", "3");
  ASSERT_TRUE(first && third);
  ASSERT_TRUE(client_->compact(*third));

  recorder stale;
  watch_options options;
  options.key = "/c/";
  options.prefix = true;
  options.start_revision = *first;
  auto watch = etcd_watch::start(etcd_.endpoint(), options, stale.on_events(),
                                 stale.on_lost());
  ASSERT_TRUE(watch) << watch.error().to_string();
  ASSERT_TRUE(stale.wait_lost());
  EXPECT_TRUE(stale.events().empty());

  // The owner's way back: read the prefix, watch from the read's revision.
  auto read = client_->range("/c/", true);
  ASSERT_TRUE(read);
  ASSERT_EQ(read->kvs.size(), 1u);
  EXPECT_EQ(read->kvs[0].value, "3");
  recorder fresh;
  options.start_revision = read->revision + 1;
  auto again = etcd_watch::start(etcd_.endpoint(), options, fresh.on_events(),
                                 fresh.on_lost());
  ASSERT_TRUE(again);
  auto fourth = client_->put("/c/k", "4");
  ASSERT_TRUE(fresh.wait_events(1));
  auto events = fresh.events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].now.value, "4");
  EXPECT_EQ(events[0].now.mod_revision, *fourth);
  EXPECT_EQ(stale.lost(), 1);
}

TEST_F(EtcdWatchTest, AWatchFailsOverPastADeadEndpoint) {
  int dead = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ASSERT_EQ(::bind(dead, reinterpret_cast<sockaddr*>(&address), length), 0);
  ASSERT_EQ(::getsockname(dead, reinterpret_cast<sockaddr*>(&address), &length),
            0);
  auto dead_url = "http://127.0.0.1:" + std::to_string(ntohs(address.sin_port));

  recorder seen;
  auto watch = watch_from_now("/f/", seen, dead_url + "," + etcd_.endpoint());
  auto written = client_->put("/f/k", "v");
  ASSERT_TRUE(seen.wait_events(1));
  EXPECT_EQ(seen.events()[0].now.mod_revision, *written);
  watch.reset();
  ::close(dead);
}

TEST_F(EtcdWatchTest, DestroyingAWatchStopsItPromptlyAndEndsItsCallbacks) {
  recorder seen;
  auto watch = watch_from_now("/s/", seen);
  ASSERT_TRUE(client_->put("/s/k", "1"));
  ASSERT_TRUE(seen.wait_events(1));
  // Blocked on a read of an idle stream.
  auto begin = clock_type::now();
  watch.reset();
  EXPECT_LT(clock_type::now() - begin, 200ms);
  ASSERT_TRUE(client_->put("/s/k", "2"));
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(seen.events().size(), 1u);

  // Waiting out its backoff against an etcd that is down.
  recorder none;
  auto waiting = watch_from_now("/s/", none);
  etcd_.kill();
  std::this_thread::sleep_for(600ms);
  begin = clock_type::now();
  waiting.reset();
  EXPECT_LT(clock_type::now() - begin, 200ms);
  EXPECT_EQ(none.lost(), 0);
}

}  // namespace
}  // namespace durin::cluster
