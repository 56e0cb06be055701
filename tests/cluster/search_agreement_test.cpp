// Goal: a search attribute name has one type in a tenant across a cluster's
// nodes, agreed through etcd (cluster/search_agreement.hpp), and a node
// that cannot reach etcd fails closed: a start naming a new attribute is
// refused as unavailable (nothing started), and a flow upserting one waits,
// then goes on once etcd answers, its history as if nothing had happened.
// Method: real runtimes (real RocksDB in temp dirs, real actors) standing
// for two nodes, each with an agreement over a real etcd started on free
// ports; "etcd unreachable" is an agreement whose endpoint is a free port
// nobody listens on.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>

#include "cluster/etcd.hpp"
#include "cluster/search_agreement.hpp"
#include "durin/durin.hpp"
#include "services/node.hpp"
#include "services/runtime_access.hpp"
#include "tests/support/etcd_process.hpp"
#include "tests/support/free_port.hpp"
#include "tests/support/search_flows.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin {
namespace {

using namespace std::chrono_literals;

using testing::upsert_one;

class SearchAgreementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    flows_.flow("upsert-one", upsert_one);
    flows_.flow("noop",
                [](context&, json input) -> flow<json> { co_return input; });
  }

  std::unique_ptr<runtime> open(const testing::temp_dir& dir) {
    runtime_options options;
    options.data_dir = dir.path();
    options.shards = 2;
    auto opened = runtime::open(options, flows_);
    EXPECT_TRUE(opened.ok()) << (opened ? "" : opened.error().to_string());
    return opened ? std::move(*opened) : nullptr;
  }

  static void agree_through(runtime& rt, const std::string& endpoints) {
    auto agree =
        cluster::search_agreement(endpoints, cluster::layout("agree"), 500);
    ASSERT_TRUE(agree.ok()) << agree.error().to_string();
    runtime_access::services(rt).search.set_agreement(std::move(*agree));
  }

  static result<run_info> start(runtime& rt, const search_attributes& search,
                                std::string flow = "noop",
                                json input = json::object()) {
    start_options options;
    options.search = search;
    return rt.start(flow, std::move(input), options);
  }

  registry flows_;
  testing::temp_dir first_dir_;
  testing::temp_dir second_dir_;
};

TEST_F(SearchAgreementTest, ANameTypedOnOneNodeHasThatTypeOnEveryNode) {
  testing::etcd_process etcd;
  auto first = open(first_dir_);
  auto second = open(second_dir_);
  ASSERT_TRUE(first && second);
  agree_through(*first, etcd.endpoint());
  agree_through(*second, etcd.endpoint());

  ASSERT_TRUE(start(*first, {{"tier", search_value::keyword("gold")}}).ok());
  // The second node never saw the name: only etcd can tell it.
  auto refused = start(*second, {{"tier", search_value::of_int(5)}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::invalid_argument);
  EXPECT_NE(refused.error().message.find("'tier' is keyword"),
            std::string::npos)
      << refused.error().message;
  // A flow's upsert is held to the same type.
  auto upsert = second->start("upsert-one", {{"name", "tier"}, {"value", 7}});
  ASSERT_TRUE(upsert.ok());
  auto done = second->wait(upsert->id, 20s);
  ASSERT_TRUE(done.ok()) << done.error().to_string();
  ASSERT_TRUE(done->output["refused"].is_string()) << done->output.dump();
  // Queries type their literals by the agreed type on every node.
  run_filter filter;
  filter.query = "tier = 5";
  auto listed = second->list(filter);
  ASSERT_FALSE(listed.ok());
  EXPECT_EQ(listed.error().code, errc::invalid_argument);
  filter.query = "tier = 'gold'";
  EXPECT_TRUE(second->list(filter).ok());
  // What etcd holds is the first claimant's type.
  auto client = cluster::etcd_client::make(etcd.endpoint());
  ASSERT_TRUE(client.ok());
  auto held = client->range("/durin/agree/search-types/7:default/tier");
  ASSERT_TRUE(held.ok());
  ASSERT_EQ(held->kvs.size(), 1u);
  EXPECT_EQ(held->kvs[0].value, "keyword");
}

TEST_F(SearchAgreementTest,
       AStartWithANewNameIsRefusedUnavailableWhileEtcdDoesNotAnswer) {
  auto rt = open(first_dir_);
  ASSERT_TRUE(rt);
  agree_through(*rt,
                "http://127.0.0.1:" + std::to_string(testing::free_port()));
  auto refused = start(*rt, {{"region", search_value::keyword("eu")}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::unavailable);
  EXPECT_NE(refused.error().message.find("'region'"), std::string::npos)
      << refused.error().message;
  // Nothing was started.
  run_filter filter;
  auto listed = rt->list(filter);
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->runs.empty());
  // Once etcd answers, the same start is taken.
  testing::etcd_process etcd;
  agree_through(*rt, etcd.endpoint());
  EXPECT_TRUE(start(*rt, {{"region", search_value::keyword("eu")}}).ok());
}

TEST_F(SearchAgreementTest, AnUpsertWaitsWhileEtcdDoesNotAnswerThenGoesOn) {
  auto rt = open(first_dir_);
  ASSERT_TRUE(rt);
  agree_through(*rt,
                "http://127.0.0.1:" + std::to_string(testing::free_port()));
  auto run = rt->start("upsert-one", {{"name", "tier"}, {"value", "gold"}});
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  // Several reloads' worth (the backoff starts at 50 ms): the run neither
  // fails nor ends, nor is the upsert refused to the flow.
  std::this_thread::sleep_for(1500ms);
  auto meanwhile = rt->get(run->id);
  ASSERT_TRUE(meanwhile.ok());
  EXPECT_FALSE(is_terminal(meanwhile->status))
      << to_string(meanwhile->status) << " " << meanwhile->output.dump();
  EXPECT_TRUE(meanwhile->search_attributes.empty());

  testing::etcd_process etcd;
  agree_through(*rt, etcd.endpoint());
  auto done = rt->wait(run->id, 20s);
  ASSERT_TRUE(done.ok()) << done.error().to_string();
  EXPECT_EQ(done->status, run_status::completed);
  EXPECT_TRUE(done->output["refused"].is_null()) << done->output.dump();
  ASSERT_EQ(done->search_attributes.count("tier"), 1u);
  EXPECT_EQ(done->search_attributes.at("tier").type,
            search_attribute_type::keyword);
}

TEST_F(SearchAgreementTest, ATypeANodeFixedAloneIsProposedWhenItJoins) {
  testing::etcd_process etcd;
  auto alone = open(first_dir_);
  ASSERT_TRUE(alone);
  ASSERT_TRUE(start(*alone, {{"tier", search_value::keyword("gold")}}).ok());
  // Its runs were stored before any cluster: joining proposes their type,
  // before any other node's claim could fix another.
  agree_through(*alone, etcd.endpoint());
  auto client = cluster::etcd_client::make(etcd.endpoint());
  ASSERT_TRUE(client.ok());
  EXPECT_TRUE(durin::testing::eventually([&] {
    auto held = client->range("/durin/agree/search-types/7:default/tier");
    return held.ok() && held->kvs.size() == 1 &&
           held->kvs[0].value == "keyword";
  }));
  auto other = open(second_dir_);
  ASSERT_TRUE(other);
  agree_through(*other, etcd.endpoint());
  auto refused = start(*other, {{"tier", search_value::of_int(5)}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::invalid_argument);
}

TEST_F(SearchAgreementTest, TheClustersTypeReplacesATypeANodeFixedAlone) {
  testing::etcd_process etcd;
  auto member = open(first_dir_);
  ASSERT_TRUE(member);
  agree_through(*member, etcd.endpoint());
  ASSERT_TRUE(start(*member, {{"tier", search_value::of_int(5)}}).ok());

  auto alone = open(second_dir_);
  ASSERT_TRUE(alone);
  ASSERT_TRUE(start(*alone, {{"tier", search_value::keyword("gold")}}).ok());
  // Restarted as a cluster node: its stored runs' type is learned at open,
  // and is not the cluster's.
  alone.reset();
  alone = open(second_dir_);
  ASSERT_TRUE(alone);
  agree_through(*alone, etcd.endpoint());
  auto& types = runtime_access::services(*alone).search;
  EXPECT_TRUE(durin::testing::eventually([&] {
    return types.type_of("default", "tier") == search_attribute_type::integer;
  }));
  auto refused = start(*alone, {{"tier", search_value::keyword("silver")}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::invalid_argument);
  EXPECT_TRUE(start(*alone, {{"tier", search_value::of_int(6)}}).ok());
  run_filter filter;
  filter.query = "tier >= 5";
  auto listed = alone->list(filter);
  ASSERT_TRUE(listed.ok()) << listed.error().to_string();
  EXPECT_EQ(listed->runs.size(), 1u);
}

TEST_F(SearchAgreementTest,
       ANameNobodyUsesIsAskedOfEtcdOnceAMissTimeNotEachList) {
  testing::etcd_process etcd;
  auto rt = open(first_dir_);
  auto other = open(second_dir_);
  ASSERT_TRUE(rt && other);
  auto agree =
      cluster::search_agreement(etcd.endpoint(), cluster::layout("agree"), 500);
  ASSERT_TRUE(agree.ok());
  auto asked = std::make_shared<std::atomic<int>>(0);
  runtime_access::services(*rt).search.set_agreement(
      [asked, inner = std::move(*agree)](
          std::string_view tenant, std::string_view name,
          std::optional<search_attribute_type> want) {
        asked->fetch_add(1);
        return inner(tenant, name, want);
      });
  agree_through(*other, etcd.endpoint());
  auto& types = runtime_access::services(*rt).search;
  for (int list = 0; list < 20; ++list) {
    EXPECT_FALSE(types.type_of("default", "nobody").has_value());
  }
  EXPECT_EQ(asked->load(), 1);
  // Fixed meanwhile through another node: seen once the miss is old.
  ASSERT_TRUE(start(*other, {{"nobody", search_value::of_int(1)}}).ok());
  EXPECT_TRUE(durin::testing::eventually([&] {
    return types.type_of("default", "nobody") == search_attribute_type::integer;
  }));
  EXPECT_GE(asked->load(), 2);
}

}  // namespace
}  // namespace durin
