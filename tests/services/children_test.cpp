// Goal: the rules of runs that make runs, end to end on a real node (real
// RocksDB in a temp dir, real actors, four shards so that children and
// successors live in other shards than their parents): child runs and their
// parent_close, continue-as-new and its atomic hand-over of the instance
// id, version markers over runs in flight across a changed deployment, and
// a cold replay after the run's actor was evicted. Restarts close the
// runtime and open a new one over the same directory; the process-level
// crash rule (kill -9) is in tests/process/children_crash_test.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <set>
#include <thread>

#include "bin/example_flows.hpp"
#include "durin/durin.hpp"
#include "persistence/store.hpp"
#include "tests/support/shard_dirs.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin {
namespace {

using namespace std::chrono_literals;
using testing::eventually;

constexpr auto wait_max = std::chrono::milliseconds(20'000);

// A child that sleeps for an hour, then returns its input.
flow<json> sleeper(context& ctx, json input) {
  co_await ctx.sleep(1h);
  co_return input;
}

class ChildrenTest : public ::testing::Test {
 protected:
  std::unique_ptr<runtime> open(const registry& flows,
                                std::shared_ptr<durin::clock> clock = nullptr,
                                std::chrono::milliseconds passivate_after =
                                    std::chrono::milliseconds(2000)) {
    runtime_options options;
    options.data_dir = dir_.path();
    options.step_threads = 4;
    options.shards = 4;
    options.clock = std::move(clock);
    options.passivate_after = passivate_after;
    auto opened = runtime::open(options, flows);
    EXPECT_TRUE(opened.ok()) << (opened ? "" : opened.error().to_string());
    return opened ? std::move(*opened) : nullptr;
  }

  static run_info finished(runtime& rt, const std::string& id) {
    auto done = rt.wait(id, wait_max);
    EXPECT_TRUE(done.ok()) << done.error().to_string();
    return done.ok() ? *done : run_info{};
  }

  static std::vector<run_info> runs_of(runtime& rt, const std::string& flow) {
    run_filter filter;
    filter.flow = flow;
    filter.limit = 1000;
    auto page = rt.list(filter);
    EXPECT_TRUE(page.ok());
    return page.ok() ? page->runs : std::vector<run_info>{};
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
};

TEST_F(ChildrenTest, ChildRunsNameTheirParentAndTheirOutputsReachIt) {
  registry flows;
  examples::register_examples(flows);
  auto rt = open(flows);
  json orders = json::array({"A-1", "A-2", "A-3", "A-4", "A-5"});
  auto parent = rt->start("acme.parent", {{"orders", orders}});
  ASSERT_TRUE(parent.ok()) << parent.error().to_string();
  auto done = finished(*rt, parent->id);
  ASSERT_EQ(done.status, run_status::completed) << done.output.dump();
  ASSERT_EQ(done.output["results"].size(), 5u);
  auto children = runs_of(*rt, "acme.review-order");
  ASSERT_EQ(children.size(), 5u);
  std::set<std::string> shards;
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(done.output["results"][i]["orderId"], orders[i]);
  }
  for (auto& child : children) {
    EXPECT_EQ(child.parent_run_id, parent->id);
    EXPECT_EQ(child.status, run_status::completed);
    EXPECT_EQ(child.to_json()["parentRunId"], parent->id);
    shards.insert(child.id.substr(child.id.size() - 2));
  }
  // Children are spread over the shards (their command ids hash apart).
  EXPECT_GT(shards.size(), 1u);
}

TEST_F(ChildrenTest, ExactlyOneChildPerParentCallAcrossRestarts) {
  auto clock = std::make_shared<manual_clock>(1'800'000'000'000);
  registry flows;
  flows.flow("child.sleeper", sleeper);
  flows.flow("parent.two", [](context& ctx, json) -> flow<json> {
    // Inputs built before the co_await (g++ 12: no literals in it).
    json one = {{"n", 1}};
    json two = {{"n", 2}};
    auto first = co_await ctx.start_child("child.sleeper", one);
    auto second = co_await ctx.start_child("child.sleeper", two);
    json a = co_await first.return_value<json>();
    json b = co_await second.return_value<json>();
    co_return json{{"a", a}, {"b", b}};
  });
  std::string parent_id;
  {
    auto rt = open(flows, clock);
    auto parent = rt->start("parent.two", json::object());
    ASSERT_TRUE(parent.ok());
    parent_id = parent->id;
    ASSERT_TRUE(
        eventually([&] { return runs_of(*rt, "child.sleeper").size() == 2; }));
  }
  for (int restart = 0; restart < 3; ++restart) {
    auto rt = open(flows, clock);
    // Replays find the recorded children: no third one.
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(runs_of(*rt, "child.sleeper").size(), 2u);
  }
  auto rt = open(flows, clock);
  clock->advance_ms(2 * 3600 * 1000);
  auto done = finished(*rt, parent_id);
  ASSERT_EQ(done.status, run_status::completed);
  EXPECT_EQ(done.output, (json{{"a", {{"n", 1}}}, {"b", {{"n", 2}}}}));
  EXPECT_EQ(runs_of(*rt, "child.sleeper").size(), 2u);
}

// parent.close starts one child per policy, then fails.
registry parent_close_flows() {
  registry flows;
  flows.flow("child.sleeper", sleeper);
  flows.flow("parent.close", [](context& ctx, json) -> flow<json> {
    json terminate = {{"policy", "terminate"}};
    json cancel = {{"policy", "cancel"}};
    json abandon = {{"policy", "abandon"}};
    child_options cancelling;
    cancelling.parent_close = parent_close_policy::cancel;
    child_options abandoning;
    abandoning.parent_close = parent_close_policy::abandon;
    co_await ctx.start_child("child.sleeper", terminate);
    co_await ctx.start_child("child.sleeper", cancel, cancelling);
    co_await ctx.start_child("child.sleeper", abandon, abandoning);
    throw std::runtime_error("the parent gives up");
  });
  return flows;
}

TEST_F(ChildrenTest, ParentCloseTerminatesOneCancelsOneAndAbandonLeavesOne) {
  auto rt = open(parent_close_flows());
  auto parent = rt->start("parent.close", json::object());
  ASSERT_TRUE(parent.ok());
  EXPECT_EQ(finished(*rt, parent->id).status, run_status::failed);
  std::map<std::string, run_info> by_policy;
  ASSERT_TRUE(eventually([&] {
    by_policy.clear();
    for (auto& child : runs_of(*rt, "child.sleeper")) {
      by_policy[child.input["policy"]] = child;
    }
    return by_policy.size() == 3 &&
           by_policy["terminate"].status == run_status::terminated &&
           by_policy["cancel"].status == run_status::cancelled;
  }));
  EXPECT_EQ(by_policy["abandon"].status, run_status::waiting);
  EXPECT_NE(by_policy["cancel"].error->message.find(parent->id),
            std::string::npos);
}

TEST_F(ChildrenTest, AChildWhoseParentEndedUnheardEndsItselfOnActivation) {
  // The parent's end is durable but its children never heard of it (as
  // after a kill -9 right after that write): the parent's record is ended
  // behind the node's back, and on the next open the children that are not
  // abandoned end themselves, although they sleep for an hour.
  registry flows;
  flows.flow("child.sleeper", sleeper);
  flows.flow("parent.sleeps", [](context& ctx, json) -> flow<json> {
    json terminate = {{"policy", "terminate"}};
    json abandon = {{"policy", "abandon"}};
    child_options abandoning;
    abandoning.parent_close = parent_close_policy::abandon;
    co_await ctx.start_child("child.sleeper", terminate);
    co_await ctx.start_child("child.sleeper", abandon, abandoning);
    co_await ctx.sleep(1h);
    co_return json();
  });
  std::string parent_id;
  {
    auto rt = open(flows);
    auto parent = rt->start("parent.sleeps", json::object());
    ASSERT_TRUE(parent.ok());
    parent_id = parent->id;
    ASSERT_TRUE(eventually([&] {
      auto children = runs_of(*rt, "child.sleeper");
      return children.size() == 2 &&
             children[0].status == run_status::waiting &&
             children[1].status == run_status::waiting &&
             rt->get(parent_id)->status == run_status::waiting;
    }));
  }
  {
    auto store = persistence::store::open(
        testing::run_store_dir(dir_.path(), parent_id));
    ASSERT_TRUE(store.ok());
    auto record = (*store)->get_run(parent_id);
    ASSERT_TRUE(record.ok() && record->has_value());
    auto ended = **record;
    ended.status = run_status::failed;
    ended.error_code = "flow-error";
    ended.completed_at_ms = ended.created_at_ms + 1;
    auto batch = (*store)->batch();
    batch.put_run(ended);
    batch.delete_active(parent_id);
    ASSERT_TRUE((*store)->write(batch).ok());
  }
  auto rt = open(flows);
  std::map<std::string, run_info> by_policy;
  ASSERT_TRUE(eventually([&] {
    by_policy.clear();
    for (auto& child : runs_of(*rt, "child.sleeper")) {
      by_policy[child.input["policy"]] = child;
    }
    return by_policy["terminate"].status == run_status::terminated;
  }));
  EXPECT_EQ(by_policy["abandon"].status, run_status::waiting);
  EXPECT_NE(by_policy["terminate"].error->message.find(parent_id),
            std::string::npos);
}

TEST_F(ChildrenTest,
       AChildStartRefusedForAHeldInstanceIdRaisesChildStartError) {
  registry flows;
  examples::register_examples(flows);
  flows.flow("child.holder", [](context& ctx, json) -> flow<json> {
    co_await ctx.sleep(1h);
    co_return json();
  });
  flows.flow("parent.conflict", [](context& ctx, json) -> flow<json> {
    child_options keyed;
    keyed.instance_id = "order-7";
    auto empty = json::object();
    try {
      co_await ctx.start_child("child.holder", empty, keyed);
    } catch (const child_start_error& e) {
      co_return json{{"code", e.code()}, {"owner", e.owner_run_id()}};
    }
    co_return json{{"code", "none"}};
  });
  auto rt = open(flows);
  start_options held;
  held.instance_id = "order-7";
  auto holder = rt->start("child.holder", json::object(), held);
  ASSERT_TRUE(holder.ok());
  auto parent = rt->start("parent.conflict", json::object());
  ASSERT_TRUE(parent.ok());
  auto done = finished(*rt, parent->id);
  EXPECT_EQ(done.output,
            (json{{"code", "hook-conflict"}, {"owner", holder->id}}));
  // The refusal is recorded: the parent's history holds the child's
  // identity and the start's outcome, and no second holder exists.
  EXPECT_EQ(count_events(*rt, parent->id, "value-recorded"), 2u);
  EXPECT_EQ(runs_of(*rt, "child.holder").size(), 1u);
}

// A child starts with the memo and search attributes its parent gives it,
// found by a query like any run's; a replay of the parent after a restart
// starts nothing again.
TEST_F(ChildrenTest, AChildCarriesTheMemoAndSearchAttributesItsParentGaveIt) {
  auto flows = [] {
    registry made;
    examples::register_examples(made);
    made.flow("child.tagged", [](context& ctx, json) -> flow<json> {
      co_await ctx.sleep(1h);
      co_return json();
    });
    made.flow("parent.tagging", [](context& ctx, json input) -> flow<json> {
      child_options tagged;
      tagged.memo = {{"from", "parent"}};
      tagged.search = {{"customer", search_value::keyword(input["customer"])},
                       {"priority", search_value::of_int(3)}};
      auto empty = json::object();
      auto child = co_await ctx.start_child("child.tagged", empty, tagged);
      co_await ctx.sleep(1h);
      co_return json{{"child", child.run_id()}};
    });
    return made;
  };
  std::string child_id;
  {
    auto rt = open(flows());
    auto parent = rt->start("parent.tagging", {{"customer", "c-1"}});
    ASSERT_TRUE(parent.ok()) << parent.error().to_string();
    ASSERT_TRUE(
        eventually([&] { return runs_of(*rt, "child.tagged").size() == 1; },
                   std::chrono::seconds(10)));
    child_id = runs_of(*rt, "child.tagged").front().id;
  }
  auto rt = open(flows());  // the parent replays its start
  auto child = rt->get(child_id);
  ASSERT_TRUE(child.ok()) << child.error().to_string();
  EXPECT_EQ(child->memo, (json{{"from", "parent"}}));
  EXPECT_EQ(child->search_attributes.at("customer"),
            search_value::keyword("c-1"));
  EXPECT_EQ(child->search_attributes.at("priority"), search_value::of_int(3));
  run_filter filter;
  filter.query = "customer = 'c-1' AND priority > 2";
  auto found = rt->list(filter);
  ASSERT_TRUE(found.ok()) << found.error().to_string();
  ASSERT_EQ(found->runs.size(), 1u);
  EXPECT_EQ(found->runs.front().id, child_id);
  EXPECT_EQ(runs_of(*rt, "child.tagged").size(), 1u);
}

TEST_F(ChildrenTest, RollingCountsToItsLimitContinuingAsNewEveryFewSteps) {
  registry flows;
  examples::register_examples(flows);
  auto rt = open(flows);
  start_options keyed;
  keyed.instance_id = "counter-1";
  auto first = rt->start("acme.rolling", {{"limit", 10}, {"every", 3}}, keyed);
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  // Follow the chain of runs: each one's output names its successor.
  std::vector<run_info> chain{finished(*rt, first->id)};
  while (chain.back().output.contains("continuedAs")) {
    auto next = chain.back().output["continuedAs"].get<std::string>();
    chain.push_back(finished(*rt, next));
    ASSERT_EQ(chain.back().continued_from, chain[chain.size() - 2].id);
    ASSERT_EQ(chain.back().instance_id, "counter-1");
    ASSERT_LE(chain.size(), 10u);
  }
  ASSERT_EQ(chain.size(), 4u);
  EXPECT_EQ(chain.back().output, (json{{"count", 10}, {"runs", 4}}));
  // Each run has a history of its own: at most `every` steps.
  for (auto& run : chain) {
    EXPECT_LE(count_events(*rt, run.id, "step-completed"), 3u);
  }
  // The instance id is free once the last run ended.
  EXPECT_TRUE(rt->start("acme.rolling", {{"limit", 1}}, keyed).ok());
}

TEST_F(ChildrenTest,
       ContinueAsNewHandsTheInstanceIdOverWithNoGapForADuplicate) {
  // A duplicate start hammers the instance id while the runs hand it over:
  // it is refused every time, naming an active run of the chain.
  registry flows;
  examples::register_examples(flows);
  auto rt = open(flows);
  start_options keyed;
  keyed.instance_id = "counter-2";
  auto first = rt->start("acme.rolling", {{"limit", 60}, {"every", 2}}, keyed);
  ASSERT_TRUE(first.ok());
  std::size_t refused = 0;
  std::string last = first->id;
  for (;;) {
    auto duplicate = rt->start("acme.rolling", {{"limit", 1}}, keyed);
    if (duplicate.ok()) {
      // Only once the whole chain ended.
      auto ended = rt->get(last);
      ASSERT_TRUE(ended.ok());
      auto tail = *ended;
      while (tail.output.contains("continuedAs")) {
        tail = finished(*rt, tail.output["continuedAs"].get<std::string>());
      }
      EXPECT_TRUE(is_terminal(tail.status));
      EXPECT_EQ(tail.output, (json{{"count", 60}, {"runs", 30}}));
      EXPECT_LT(tail.completed_at_ms, duplicate->created_at_ms + 1);
      break;
    }
    ASSERT_EQ(duplicate.error().code, errc::hook_conflict)
        << duplicate.error().to_string();
    ++refused;
    last = duplicate.error().run_id;
  }
  EXPECT_GT(refused, 0u);
}

TEST_F(ChildrenTest,
       ContinueAsNewKeepsTheStartHookHeldAndDeliversToTheSuccessor) {
  registry flows;
  flows.flow("hooked.rolling", [](context& ctx, json input) -> flow<json> {
    auto round = input.value("round", 0);
    hook_options box;
    box.token = "box-1";
    auto inbox = ctx.create_hook<json>(box);
    auto note = co_await inbox;
    if (round < 2) {
      ctx.continue_as_new(json{{"round", round + 1}});
    }
    co_return json{{"round", round}, {"note", note}};
  });
  auto rt = open(flows);
  start_options hooked;
  hooked.hook = start_hook{"box-1", nullptr, nullptr};
  auto first = rt->start("hooked.rolling", json::object(), hooked);
  ASSERT_TRUE(first.ok());
  std::string current = first->id;
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(eventually(
        [&] { return rt->get(current)->status == run_status::waiting; }));
    auto to = rt->resume_hook("box-1", {{"n", round}});
    ASSERT_TRUE(to.ok()) << to.error().to_string();
    EXPECT_EQ(*to, current);
    auto ended = finished(*rt, current);
    if (round < 2) {
      current = ended.output["continuedAs"];
      auto hook = rt->get_hook_by_token("box-1");
      ASSERT_TRUE(hook.ok());
      EXPECT_EQ(hook->owner_run_id, current);
    } else {
      EXPECT_EQ(ended.output, (json{{"round", 2}, {"note", {{"n", 2}}}}));
    }
  }
}

// v1 of a flow: a, sleep, b, sleep, d. v2 puts a version marker after the
// first sleep: version 1 runs c instead of b.
flow<json> versioned(context& ctx, bool changed) {
  auto mark = [](std::string name) { return name; };
  json done = json::array();
  std::string a = "a", b = "b", c = "c", d = "d";
  done.push_back(co_await ctx.step("a", mark, a));
  co_await ctx.sleep(1h);
  if (changed && ctx.version("use-c", 0, 1) == 1) {
    done.push_back(co_await ctx.step("c", mark, c));
  } else {
    done.push_back(co_await ctx.step("b", mark, b));
  }
  co_await ctx.sleep(1h);
  done.push_back(co_await ctx.step("d", mark, d));
  co_return done;
}

TEST_F(ChildrenTest,
       VersionLetsAChangedFlowBranchForRunsInFlightWithoutDivergence) {
  auto clock = std::make_shared<manual_clock>(1'800'000'000'000);
  registry v1;
  v1.flow("versioned",
          [](context& ctx, json) { return versioned(ctx, false); });
  registry v2;
  v2.flow("versioned", [](context& ctx, json) { return versioned(ctx, true); });
  std::string past_b, before_b;
  {
    auto rt = open(v1, clock);
    past_b = rt->start("versioned", json::object())->id;
    ASSERT_TRUE(eventually(
        [&] { return count_events(*rt, past_b, "timer-armed") == 1; }));
    clock->advance_ms(3600 * 1000 + 1);
    // past_b has run b and sleeps again; before_b sleeps before b.
    ASSERT_TRUE(eventually(
        [&] { return count_events(*rt, past_b, "timer-armed") == 2; }));
    before_b = rt->start("versioned", json::object())->id;
    ASSERT_TRUE(eventually(
        [&] { return count_events(*rt, before_b, "timer-armed") == 1; }));
  }
  // Deploy v2 over the same store; a new run starts on v2 too.
  auto rt = open(v2, clock);
  auto fresh = rt->start("versioned", json::object())->id;
  ASSERT_TRUE(
      eventually([&] { return count_events(*rt, fresh, "timer-armed") == 1; }));
  for (int i = 0; i < 3; ++i) {
    clock->advance_ms(3600 * 1000 + 1);
    std::this_thread::sleep_for(50ms);
  }
  auto old_run = finished(*rt, past_b);
  auto mid_run = finished(*rt, before_b);
  auto new_run = finished(*rt, fresh);
  ASSERT_EQ(old_run.status, run_status::completed) << old_run.blocked_reason;
  EXPECT_EQ(old_run.output, (json{"a", "b", "d"}));
  // Reached the marker live, after the deployment: the new branch.
  EXPECT_EQ(mid_run.output, (json{"a", "c", "d"}));
  EXPECT_EQ(new_run.output, (json{"a", "c", "d"}));
  EXPECT_EQ(count_events(*rt, past_b, "value-recorded"), 0u);
  EXPECT_EQ(count_events(*rt, fresh, "value-recorded"), 1u);
}

TEST_F(ChildrenTest, AVersionTheCodeNoLongerSupportsHoldsTheRunAsBlocked) {
  registry v1;
  v1.flow("marked", [](context& ctx, json) -> flow<json> {
    auto v = ctx.version("x", 0, 1);
    hook_options marked;
    marked.token = "marked-hook";
    auto hook = ctx.create_hook<json>(marked);
    co_await hook;
    co_return v;
  });
  registry v2;
  v2.flow("marked", [](context& ctx, json) -> flow<json> {
    auto v = ctx.version("x", 2, 2);
    hook_options marked;
    marked.token = "marked-hook";
    auto hook = ctx.create_hook<json>(marked);
    co_await hook;
    co_return v;
  });
  std::string id;
  {
    auto rt = open(v1);
    id = rt->start("marked", json::object())->id;
    ASSERT_TRUE(
        eventually([&] { return rt->get(id)->status == run_status::waiting; }));
  }
  auto rt = open(v2);
  // A run waiting on a hook activates with its next payload.
  ASSERT_TRUE(rt->resume_hook("marked-hook", json::object()).ok());
  ASSERT_TRUE(eventually([&] {
    return rt->get(id)->status == run_status::blocked;
  })) << rt->get(id)->to_json().dump()
      << " " << [&] {
           json all = json::array();
           auto events = rt->history(id);
           for (auto& e : *events)
             all.push_back(e.to_json());
           return all.dump();
         }();
  EXPECT_NE(rt->get(id)->blocked_reason.find("version 1"), std::string::npos);
}

TEST_F(ChildrenTest,
       ColdReplayAfterTheActorIsEvictedMidFlightReachesTheSameState) {
  // The run idles on a hook between two halves of its work; its actor is
  // evicted (passivated after 50 ms idle) and the payload brings it back:
  // the replay must reach the state the warm actor had, recorded values and
  // step results included, and record nothing twice.
  std::atomic<int> step_runs{0};
  registry flows;
  flows.flow("sticky", [&](context& ctx, json) -> flow<json> {
    auto drawn = ctx.random();
    auto counted = [&step_runs] { return ++step_runs; };
    auto first = co_await ctx.step("count", counted);
    hook_options sticky;
    sticky.token = "sticky-1";
    auto hook = ctx.create_hook<json>(sticky);
    json payload = co_await hook;
    auto second = co_await ctx.step("count", counted);
    co_return json{{"drawn", drawn},
                   {"first", first},
                   {"second", second},
                   {"payload", payload}};
  });
  auto rt = open(flows, nullptr, 50ms);
  auto id = rt->start("sticky", json::object())->id;
  ASSERT_TRUE(
      eventually([&] { return rt->get(id)->status == run_status::waiting; }));
  auto before = rt->history(id);
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE(eventually([&] { return rt->active_run_actors() == 0; }))
      << "the run's actor was never evicted: " << rt->active_run_actors();
  ASSERT_TRUE(rt->resume_hook("sticky-1", {{"go", true}}).ok());
  auto done = finished(*rt, id);
  ASSERT_EQ(done.status, run_status::completed);
  auto after = rt->history(id);
  ASSERT_TRUE(after.ok());
  // The first part of the history is the same, and the output's values are
  // the recorded ones: the random draw of call 1 and the first step's.
  for (std::size_t i = 0; i < before->size(); ++i) {
    EXPECT_EQ((*after)[i].to_json(), (*before)[i].to_json());
  }
  EXPECT_EQ(done.output["drawn"], (*before)[1].detail["value"]);
  EXPECT_EQ(done.output["first"], 1);
  EXPECT_EQ(done.output["second"], 2);
  EXPECT_EQ(step_runs.load(), 2);
}

}  // namespace
}  // namespace durin
