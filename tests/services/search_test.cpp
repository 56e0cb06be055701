// Goal: the rules of memos and search attributes on a real node (real
// RocksDB in a temp dir, real actors, four shards so that one query spans
// several stores): a memo and attributes given at start and changed by the
// flow are returned with the run and survive a restart, whose replay
// records nothing twice and does not diverge; runtime::list's query filters
// on attributes and built-ins, pages with the usual cursor, sees one
// tenant's runs only, and refuses what does not type. Restarts close the
// runtime and open a new one over the same directory.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "bin/example_flows.hpp"
#include "durin/durin.hpp"
#include "tests/support/search_flows.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin {
namespace {

using namespace std::chrono_literals;
using testing::eventually;

constexpr auto wait_max = std::chrono::milliseconds(20'000);

// Tags itself, sleeps an hour, tags itself again and ends.
flow<json> tag_then_sleep(context& ctx, json input) {
  ctx.set_memo({{"stage", "received"}, {"order", input.value("order", "")}});
  ctx.upsert_search_attributes(
      {{"customer", search_value::keyword(input.value("customer", ""))},
       {"priority", search_value::of_int(input.value("priority", 0))}});
  co_await ctx.sleep(1h);
  ctx.set_memo({{"stage", "shipped"}});
  ctx.upsert_search_attributes(
      {{"shippedAt", search_value::time_ms(1'800'000'000'000)},
       {"vip", search_value::of_bool(true)}});
  co_return json{{"done", true}};
}

// Tags itself, removes one attribute (and one it never had), sleeps an hour,
// removes the other and ends; a removal of a bad name is caught.
flow<json> tag_then_remove(context& ctx, json) {
  ctx.upsert_search_attributes({{"customer", search_value::keyword("acme")},
                                {"priority", search_value::of_int(3)}});
  ctx.remove_search_attributes({"priority", "neverSet"});
  std::string refused;
  try {
    ctx.remove_search_attributes({"status"});
  } catch (const invalid_argument_error& e) {
    refused = e.what();
  }
  co_await ctx.sleep(1h);
  ctx.remove_search_attributes({"customer"});
  co_return json{{"refused", refused}};
}

using testing::upsert_one;

class SearchTest : public ::testing::Test {
 protected:
  std::unique_ptr<runtime> open() {
    runtime_options options;
    options.data_dir = dir_.path();
    options.shards = 4;
    options.clock = clock_;
    auto opened = runtime::open(options, flows_);
    EXPECT_TRUE(opened.ok()) << (opened ? "" : opened.error().to_string());
    return opened ? std::move(*opened) : nullptr;
  }

  void SetUp() override {
    flows_.flow("tag-then-sleep", tag_then_sleep);
    flows_.flow("upsert-one", upsert_one);
    flows_.flow("tag-then-remove", tag_then_remove);
    flows_.flow("noop",
                [](context&, json input) -> flow<json> { co_return input; });
  }

  static std::string start(runtime& rt, const search_attributes& attributes,
                           std::string tenant = "default",
                           std::string flow = "noop") {
    start_options options;
    options.tenant = std::move(tenant);
    options.search = attributes;
    auto run = rt.start(flow, json::object(), options);
    EXPECT_TRUE(run.ok()) << run.error().to_string();
    return run.ok() ? run->id : std::string();
  }

  static result<std::set<std::string>> found(runtime& rt, std::string query,
                                             std::string tenant = "default") {
    run_filter filter;
    filter.tenant = std::move(tenant);
    filter.query = std::move(query);
    filter.limit = 1000;
    auto page = rt.list(filter);
    if (!page) {
      return page.error();
    }
    std::set<std::string> ids;
    for (auto& run : page->runs) {
      ids.insert(run.id);
    }
    return ids;
  }

  static std::size_t count_events(runtime& rt, const std::string& id,
                                  std::string_view kind) {
    std::size_t n = 0;
    auto events = rt.history(id);
    EXPECT_TRUE(events.ok());
    for (auto& event : *events) {
      n += event.kind == kind ? 1 : 0;
    }
    return n;
  }

  testing::temp_dir dir_;
  std::shared_ptr<manual_clock> clock_ =
      std::make_shared<manual_clock>(1'800'000'000'000);
  registry flows_;
};

using MemoTest = SearchTest;

TEST_F(MemoTest, AMemoGivenAtStartIsReturnedWithTheRun) {
  auto rt = open();
  start_options options;
  options.memo = {{"note", "from the caller"}, {"lines", {1, 2}}};
  auto run = rt->start("noop", json::object(), options);
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  EXPECT_EQ(run->memo, options.memo);
  auto got = rt->get(run->id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->memo, options.memo);
  EXPECT_EQ(got->to_json()["memo"], options.memo);
  auto plain = rt->start("noop", json::object());
  EXPECT_TRUE(rt->get(plain->id)->memo.is_null());
}

TEST_F(MemoTest, AMemoBeyondItsLimitIsRefusedAndNothingIsStarted) {
  auto rt = open();
  start_options options;
  options.memo = std::string(limits::memo_bytes_max + 1, 'x');
  auto run = rt->start("noop", json::object(), options);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.error().code, errc::invalid_argument);
  EXPECT_NE(run.error().message.find("memo"), std::string::npos);
  EXPECT_TRUE(rt->list(run_filter{})->runs.empty());
}

TEST_F(MemoTest, AMemoSetByTheFlowSurvivesARestartAndItsReplayDoesNotDiverge) {
  std::string id;
  {
    auto rt = open();
    auto run =
        rt->start("tag-then-sleep",
                  {{"order", "A-1"}, {"customer", "acme"}, {"priority", 3}});
    ASSERT_TRUE(run.ok());
    id = run->id;
    auto settled = rt->wait_settled(id, wait_max);
    ASSERT_TRUE(settled.ok());
    ASSERT_EQ(settled->status, run_status::waiting);
    EXPECT_EQ(settled->memo, (json{{"stage", "received"}, {"order", "A-1"}}));
    EXPECT_EQ(settled->search_attributes.at("priority"),
              search_value::of_int(3));
  }
  auto rt = open();
  auto reopened = rt->get(id);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ(reopened->memo, (json{{"stage", "received"}, {"order", "A-1"}}));
  EXPECT_EQ(reopened->search_attributes.at("customer"),
            search_value::keyword("acme"));
  clock_->advance_ms(3600 * 1000 + 1);
  auto done = rt->wait(id, wait_max);
  ASSERT_TRUE(done.ok());
  ASSERT_EQ(done->status, run_status::completed) << done->blocked_reason;
  EXPECT_EQ(done->memo, (json{{"stage", "shipped"}}));
  // Upserts add to what was there.
  EXPECT_EQ(done->search_attributes.size(), 4u);
  EXPECT_EQ(done->search_attributes.at("vip"), search_value::of_bool(true));
  EXPECT_EQ(done->search_attributes.at("shippedAt"),
            search_value::time_ms(1'800'000'000'000));
  // The replay after the restart recorded none of the first calls again.
  EXPECT_EQ(count_events(*rt, id, "memo-set"), 2u);
  EXPECT_EQ(count_events(*rt, id, "search-attributes-upserted"), 2u);
}

TEST_F(SearchTest,
       ARemovedAttributeLeavesTheRunAndItsQueriesAndSurvivesARestart) {
  std::string id;
  using ids = std::set<std::string>;
  {
    auto rt = open();
    auto run = rt->start("tag-then-remove", json::object());
    ASSERT_TRUE(run.ok()) << run.error().to_string();
    id = run->id;
    auto settled = rt->wait_settled(id, wait_max);
    ASSERT_TRUE(settled.ok());
    ASSERT_EQ(settled->status, run_status::waiting) << settled->blocked_reason;
    EXPECT_EQ(settled->search_attributes,
              (search_attributes{{"customer", search_value::keyword("acme")}}));
    EXPECT_EQ(*found(*rt, "priority = 3"), ids{});
    EXPECT_EQ(*found(*rt, "customer = 'acme'"), ids{id});
    // The tenant's type of a removed name stays.
    start_options options;
    options.search = {{"priority", search_value::keyword("high")}};
    auto other_type = rt->start("noop", json::object(), options);
    ASSERT_FALSE(other_type.ok());
    EXPECT_EQ(other_type.error().code, errc::invalid_argument);
  }
  auto rt = open();
  auto reopened = rt->get(id);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ(reopened->search_attributes.size(), 1u);
  clock_->advance_ms(3600 * 1000 + 1);
  auto done = rt->wait(id, wait_max);
  ASSERT_TRUE(done.ok());
  ASSERT_EQ(done->status, run_status::completed) << done->blocked_reason;
  EXPECT_TRUE(done->search_attributes.empty());
  EXPECT_EQ(*found(*rt, "customer = 'acme'"), ids{});
  EXPECT_NE(done->output["refused"].get<std::string>().find(
                "ctx.remove_search_attributes: search attribute 'status'"),
            std::string::npos)
      << done->output.dump();
  // Two removals recorded, none again by the replay, the refused one not.
  EXPECT_EQ(count_events(*rt, id, "search-attributes-removed"), 2u);
  EXPECT_EQ(count_events(*rt, id, "search-attributes-upserted"), 1u);
}

TEST_F(SearchTest, AQueryFindsRunsByAttributesAndBuiltInsAcrossShards) {
  auto rt = open();
  auto low = start(*rt, {{"customer", search_value::keyword("acme")},
                         {"priority", search_value::of_int(1)}});
  auto high = start(*rt, {{"customer", search_value::keyword("acme")},
                          {"priority", search_value::of_int(5)},
                          {"score", search_value::of_double(0.75)}});
  auto other = start(*rt, {{"customer", search_value::keyword("globex")},
                           {"priority", search_value::of_int(5)}});
  auto bare = start(*rt, {});
  for (const auto& id : {low, high, other, bare}) {
    ASSERT_TRUE(rt->wait(id, wait_max).ok());
  }
  using ids = std::set<std::string>;
  EXPECT_EQ(*found(*rt, "customer = 'acme'"), (ids{low, high}));
  EXPECT_EQ(*found(*rt, "priority > 2"), (ids{high, other}));
  EXPECT_EQ(*found(*rt, "priority >= 1 AND priority <= 1"), (ids{low}));
  EXPECT_EQ(*found(*rt, "customer != \"acme\""), (ids{other}));
  EXPECT_EQ(*found(*rt, "customer IN ('globex', 'initech')"), (ids{other}));
  EXPECT_EQ(*found(*rt, "score > 0.5"), (ids{high}));
  // AND binds tighter than OR; parentheses group.
  EXPECT_EQ(*found(*rt,
                   "customer = 'globex' OR customer = 'acme' AND "
                   "priority = 1"),
            (ids{other, low}));
  EXPECT_EQ(*found(*rt,
                   "(customer = 'globex' OR customer = 'acme') AND "
                   "priority = 5"),
            (ids{high, other}));
  EXPECT_EQ(*found(*rt,
                   "status = 'completed' and flow = 'noop' and "
                   "createdAt >= '2027-01-15T08:00:00Z'"),
            (ids{low, high, other, bare}));
  EXPECT_EQ(found(*rt, "createdAt < '2020-01-01T00:00:00Z'")->size(), 0u);
  // A run without the attribute matches no comparison of it, != included.
  EXPECT_EQ(found(*rt, "priority != 7")->count(bare), 0u);
  EXPECT_EQ(found(*rt, "")->size(), 4u);
}

TEST_F(SearchTest, AQueryOnAnIntAttributeComparedWithAStringIsRefused) {
  auto rt = open();
  start(*rt, {{"priority", search_value::of_int(1)}});
  auto refused = found(*rt, "priority = 'high'");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::invalid_argument);
  EXPECT_NE(refused.error().message.find("position 12"), std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find("attribute 'priority' is an int"),
            std::string::npos)
      << refused.error().message;
}

TEST_F(SearchTest, AQueryThatDoesNotParseNamesThePositionAndTheToken) {
  auto rt = open();
  struct bad {
    const char* query;
    const char* says;
  };
  for (auto [query, says] : std::initializer_list<bad>{
           {"priority >", "position 11: expected a value"},
           {"priority = 1 AND", "position 17: expected a field name"},
           {"(priority = 1", "expected ')' to close the '(' at position 1"},
           {"priority = 1 priority = 2", "position 14: expected AND, OR"},
           {"priority ~ 1", "position 10: unexpected character '~'"},
           {"customer = 'acme", "position 12: a string is not closed"},
           {"status = 'sleeping'", "position 10: status is one of"},
           {"createdAt > 'yesterday'", "is not an RFC 3339 time"},
           {"status < 'running'", "compared only with =, != and IN"},
           {"customer IN ('a' 'b')", "expected ',' or ')'"},
           {"customer IN ()", "position 14: expected a value in the IN list"},
           {"customer IN (", "position 14: expected a value in the IN list"},
           {"customer IN ('a',)", "position 18: expected a value"}}) {
    auto refused = found(*rt, query);
    ASSERT_FALSE(refused.ok()) << query;
    EXPECT_EQ(refused.error().code, errc::invalid_argument);
    EXPECT_NE(refused.error().message.find(says), std::string::npos)
        << query << ": " << refused.error().message;
  }
}

TEST_F(SearchTest, AnAttributesTypeIsFixedByItsFirstUseInItsTenant) {
  auto rt = open();
  start(*rt, {{"priority", search_value::of_int(1)}});
  start_options options;
  options.search = {{"priority", search_value::keyword("high")}};
  auto keyword = rt->start("noop", json::object(), options);
  ASSERT_FALSE(keyword.ok());
  EXPECT_EQ(keyword.error().code, errc::invalid_argument);
  EXPECT_NE(keyword.error().message.find(
                "search attribute 'priority' is int in this tenant"),
            std::string::npos)
      << keyword.error().message;
  // Another tenant's names are its own.
  EXPECT_FALSE(
      start(*rt, {{"priority", search_value::keyword("high")}}, "globex")
          .empty());
  // A flow's upsert of another type is refused and records nothing.
  auto flow_run = rt->start("upsert-one", {{"value", "high"}});
  auto done = rt->wait(flow_run->id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_NE(done->output["refused"].get<std::string>().find(
                "'priority' is int in this tenant"),
            std::string::npos);
  EXPECT_EQ(count_events(*rt, flow_run->id, "search-attributes-upserted"), 0u);
  EXPECT_TRUE(done->search_attributes.empty());
}

// A start refused (here: its instance id is held) fixes no type: the node
// would not know it after a restart, so it must not know it before.
TEST_F(SearchTest, ARefusedStartFixesNoAttributesType) {
  auto rt = open();
  start_options held;
  held.instance_id = "only-one";
  ASSERT_TRUE(rt->start("tag-then-sleep", json::object(), held).ok());
  start_options again = held;
  again.search = {{"level", search_value::of_int(7)}};
  auto refused = rt->start("noop", json::object(), again);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::hook_conflict);
  EXPECT_FALSE(start(*rt, {{"level", search_value::keyword("high")}}).empty());
  // An admitted start's type is fixed, as before.
  start_options retyped;
  retyped.search = {{"level", search_value::of_int(7)}};
  auto other = rt->start("noop", json::object(), retyped);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.error().code, errc::invalid_argument);
}

// A repeated command is answered its first run and admits nothing: the
// types it names stay unfixed, as for a refused start.
TEST_F(SearchTest, ARepeatedCommandsStartFixesNoAttributesType) {
  auto rt = open();
  start_options first;
  first.command_id = "cmd-1";
  auto admitted = rt->start("noop", json::object(), first);
  ASSERT_TRUE(admitted.ok());
  start_options repeat = first;
  repeat.search = {{"level", search_value::of_int(7)}};
  auto answered = rt->start("noop", json::object(), repeat);
  ASSERT_TRUE(answered.ok());
  EXPECT_EQ(answered->id, admitted->id);
  EXPECT_TRUE(answered->search_attributes.empty());
  EXPECT_FALSE(start(*rt, {{"level", search_value::keyword("high")}}).empty());
}

TEST_F(SearchTest, TypesFixedBeforeARestartStayFixedAfterIt) {
  {
    auto rt = open();
    start(*rt, {{"priority", search_value::of_int(1)}});
  }
  auto rt = open();
  start_options options;
  options.search = {{"priority", search_value::keyword("high")}};
  auto keyword = rt->start("noop", json::object(), options);
  ASSERT_FALSE(keyword.ok());
  EXPECT_EQ(keyword.error().code, errc::invalid_argument);
  EXPECT_FALSE(found(*rt, "priority = 'high'").ok());
}

TEST_F(SearchTest, AQuerySeesOnlyItsOwnTenantsRuns) {
  auto rt = open();
  auto mine = start(*rt, {{"customer", search_value::keyword("acme")}});
  auto theirs =
      start(*rt, {{"customer", search_value::keyword("acme")}}, "globex");
  EXPECT_EQ(*found(*rt, "customer = 'acme'"), (std::set<std::string>{mine}));
  EXPECT_EQ(*found(*rt, "customer = 'acme'", "globex"),
            (std::set<std::string>{theirs}));
  EXPECT_TRUE(found(*rt, "customer = 'acme'", "initech")->empty());
}

TEST_F(SearchTest, AQueryPagesWithTheCursorOfEveryList) {
  auto rt = open();
  std::set<std::string> wanted;
  for (int i = 0; i < 12; ++i) {
    auto id = start(*rt, {{"batch", search_value::of_int(i % 2)}});
    if (i % 2 == 1) {
      wanted.insert(id);
    }
    clock_->advance_ms(1);
  }
  run_filter filter;
  filter.query = "batch = 1";
  filter.limit = 4;
  std::set<std::string> seen;
  std::string last;
  for (int page_number = 0; page_number < 10; ++page_number) {
    auto page = rt->list(filter);
    ASSERT_TRUE(page.ok()) << page.error().to_string();
    for (auto& run : page->runs) {
      if (!last.empty()) {
        EXPECT_LT(run.id, last);  // newest first, no repeats
      }
      last = run.id;
      EXPECT_TRUE(seen.insert(run.id).second);
    }
    EXPECT_LE(page->runs.size(), 4u);
    if (page->next_cursor.empty()) {
      break;
    }
    filter.cursor = page->next_cursor;
  }
  EXPECT_EQ(seen, wanted);
}

TEST_F(SearchTest, AContinuedRunKeepsItsMemoAndAttributes) {
  flows_.flow("continue-once", [](context& ctx, json input) -> flow<json> {
    if (input.value("first", true)) {
      ctx.set_memo({{"kept", true}});
      ctx.upsert_search_attributes({{"round", search_value::of_int(1)}});
      ctx.continue_as_new({{"first", false}});
    }
    co_return json{{"second", true}};
  });
  auto rt = open();
  auto first = rt->start("continue-once", json::object());
  ASSERT_TRUE(first.ok());
  auto ended = rt->wait(first->id, wait_max);
  ASSERT_TRUE(ended.ok());
  auto next_id = ended->output["continuedAs"].get<std::string>();
  auto next = rt->wait(next_id, wait_max);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->memo, (json{{"kept", true}}));
  EXPECT_EQ(next->search_attributes.at("round"), search_value::of_int(1));
  EXPECT_EQ(*found(*rt, "round = 1"),
            (std::set<std::string>{first->id, next_id}));
}

}  // namespace
}  // namespace durin
