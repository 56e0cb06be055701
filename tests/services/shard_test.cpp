// Shards: the one function from ids to shards, and a node of several
// shards on real stores: a run started with a start token lives in the
// token's shard, a plain keyed start in its key's, plain starts spread over
// all, and a data directory keeps the shard count it was made with.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "durin/flow.hpp"
#include "durin/runtime.hpp"
#include "persistence/keys.hpp"
#include "services/node.hpp"
#include "services/runtime_access.hpp"
#include "services/shard_map.hpp"
#include "services/start.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin::testing {
namespace {

using services::shard_map;

TEST(ShardMapTest, ARunIdNamesItsShard) {
  shard_map map(64);
  for (std::uint32_t shard : {0u, 1u, 31u, 32u, 63u}) {
    auto id = "run_0123456789ABCDEFGHJKMN" + shard_map::run_id_suffix(shard);
    EXPECT_EQ(map.of_run(id), shard) << id;
  }
  EXPECT_EQ(shard_map(1).of_run("run_anything"), 0u);
}

TEST(ShardMapTest, TheHashIsFixedAcrossBuilds) {
  // Hash version 1: a change would move every token and key of every node.
  shard_map map(1024);
  EXPECT_EQ(map.of_token(persistence::keys::token("default", "order:1")),
            map.of_token(persistence::keys::token("default", "order:1")));
  const auto a = map.of_key({"default", "caller", "key-1"});
  EXPECT_EQ(a, shard_map(1024).of_key({"default", "caller", "key-1"}));
  // Parts are length-prefixed: moving a byte between them changes the hash.
  EXPECT_NE(map.of_key({"ab", "c", "k"}), map.of_key({"a", "bc", "k"}));
}

TEST(ShardMapTest, TokensSpreadOverEveryShard) {
  shard_map map(8);
  std::map<std::uint32_t, int> per_shard;
  for (int i = 0; i < 8000; ++i) {
    ++per_shard[map.of_token(
        persistence::keys::token("default", "order:" + std::to_string(i)))];
  }
  ASSERT_EQ(per_shard.size(), 8u);
  for (const auto& [shard, count] : per_shard) {
    EXPECT_GT(count, 800) << "shard " << shard;
    EXPECT_LT(count, 1200) << "shard " << shard;
  }
}

flow<json> echo(context&, json input) {
  co_return input;
}

// Holds its start token for the whole test: a run that ended would have
// freed it already.
flow<json> nap(context& ctx, json input) {
  co_await ctx.sleep(std::chrono::minutes(10));
  co_return input;
}

class ShardedNodeTest : public ::testing::Test {
 protected:
  std::unique_ptr<runtime> open(std::uint32_t shards) {
    registry flows;
    flows.flow("echo", echo);
    flows.flow("nap", nap);
    runtime_options options;
    options.data_dir = dir_.path();
    options.shards = shards;
    auto opened = runtime::open(options, std::move(flows));
    EXPECT_TRUE(opened.ok()) << opened.error().to_string();
    return opened ? std::move(*opened) : nullptr;
  }
  temp_dir dir_;
};

TEST_F(ShardedNodeTest, AStartWithATokenLivesInTheTokensShard) {
  auto rt = open(8);
  auto& node = runtime_access::services(*rt);
  for (int i = 0; i < 40; ++i) {
    start_options options;
    options.hook = start_hook{"order:" + std::to_string(i), nullptr, nullptr};
    auto run = rt->start("nap", json{{"i", i}}, options);
    ASSERT_TRUE(run.ok()) << run.error().to_string();
    auto token = persistence::keys::token(default_tenant, options.hook->token);
    EXPECT_EQ(node.map.of_run(run->id), node.map.of_token(token));
    auto& home = node.shard_of_run(run->id);
    auto stored = home.store->get_run(run->id);
    ASSERT_TRUE(stored.ok() && stored->has_value()) << run->id;
    auto held = home.store->get_token(default_tenant, options.hook->token);
    ASSERT_TRUE(held.ok() && held->has_value());
    EXPECT_EQ((*held)->owner_run, run->id);
  }
}

TEST_F(ShardedNodeTest, PlainStartsSpreadAndListNewestFirstAcrossShards) {
  auto rt = open(8);
  std::set<std::uint32_t> used;
  std::vector<std::string> started;
  for (int i = 0; i < 64; ++i) {
    auto run = rt->start("echo", json{{"i", i}});
    ASSERT_TRUE(run.ok());
    started.push_back(run->id);
    used.insert(runtime_access::services(*rt).map.of_run(run->id));
  }
  EXPECT_GE(used.size(), 6u);
  // Pages of 10 across the shards: every run once, newest first.
  run_filter filter;
  filter.limit = 10;
  std::vector<std::string> listed;
  for (;;) {
    auto page = rt->list(filter);
    ASSERT_TRUE(page.ok());
    for (const auto& run : page->runs) {
      listed.push_back(run.id);
    }
    if (page->next_cursor.empty()) {
      break;
    }
    filter.cursor = page->next_cursor;
  }
  auto newest_first = started;
  std::sort(newest_first.rbegin(), newest_first.rend());
  EXPECT_EQ(listed, newest_first);
}

TEST_F(ShardedNodeTest, APlainKeyedStartLivesInItsKeysShard) {
  auto rt = open(8);
  auto& node = runtime_access::services(*rt);
  for (int i = 0; i < 20; ++i) {
    services::start_request request;
    request.flow = "echo";
    request.input = json::object();
    request.answer.key = persistence::start_key{
        .address = {"default", "caller", "key-" + std::to_string(i)},
        .fingerprint = "fp",
        .instance_id = "test",
        .lease_ms = 30'000,
        .keep_ms = 3'600'000};
    auto id = services::draw_run_id(node, request);
    EXPECT_EQ(node.map.of_run(id),
              node.map.of_key(request.answer.key->address));
    request.run_id = id;
    EXPECT_TRUE(services::key_kept_with_admission(node, request));
  }
}

TEST_F(ShardedNodeTest, ADataDirectoryKeepsItsShardCount) {
  {
    auto rt = open(8);
    ASSERT_TRUE(rt);
    ASSERT_TRUE(rt->start("echo", json::object()).ok());
  }
  EXPECT_TRUE(std::filesystem::exists(dir_.path() + "/shards/007"));
  registry flows;
  flows.flow("echo", echo);
  runtime_options options;
  options.data_dir = dir_.path();
  options.shards = 4;
  auto refused = runtime::open(options, std::move(flows));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::invalid_argument);
  EXPECT_NE(refused.error().message.find("holds 8 shard(s)"), std::string::npos)
      << refused.error().message;
  EXPECT_EQ(refused.error().message.find(dir_.path()), std::string::npos)
      << "no file paths in errors";
  auto again = open(8);
  ASSERT_TRUE(again);
  auto page = again->list(run_filter{});
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->runs.size(), 1u);
}

TEST_F(ShardedNodeTest, AShardCountBeyondTheLimitIsRefused) {
  for (std::uint32_t shards : {0u, services::shards_max + 1}) {
    registry flows;
    runtime_options options;
    options.data_dir = dir_.path();
    options.shards = shards;
    auto refused = runtime::open(options, std::move(flows));
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.error().code, errc::invalid_argument);
  }
}

}  // namespace
}  // namespace durin::testing
