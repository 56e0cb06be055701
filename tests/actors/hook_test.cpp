// Goal: every rule of seeds/000 (hook tokens as idempotency keys for whole
// runs), one test per rule, on a real store, real token and run actors.
// Method: flows below wait on hooks; the tests start, resume and restart
// them, and read tokens through get_hook_by_token. Time moves by a manual
// clock where retention is involved.
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <condition_variable>
#include <cstdlib>
#include <future>
#include <mutex>
#include <thread>

#include "actors/run_engine.hpp"
#include "bin/example_flows.hpp"
#include "durin/durin.hpp"
#include "persistence/keys.hpp"
#include "services/node.hpp"
#include "services/runtime_access.hpp"
#include "tests/support/runtime_fixture.hpp"
#include "tests/support/storage_faults.hpp"

namespace durin {
namespace {

using namespace std::chrono_literals;
using testing::eventually;

constexpr auto wait_max = std::chrono::milliseconds(20'000);

std::atomic<int> bodies_started{0};

// Reads its start hook (token "order:{orderId}") until {"done": true}.
flow<json> collect(context& ctx, json input) {
  ++bodies_started;
  auto hook = ctx.create_hook<json>({.token = input.at("token")});
  json got = json::array();
  while (auto payload = co_await hook.next()) {
    got.push_back((*payload)["n"]);
    if (payload->value("done", false)) {
      break;
    }
  }
  co_return got;
}

// Creates a hook on input.token and reports a conflict instead of waiting.
flow<json> report_conflict(context& ctx, json input) {
  auto hook = ctx.create_hook<json>({.token = input.at("token")});
  if (auto owner = co_await hook.conflict()) {
    std::string thrown;
    try {
      co_await hook;
    } catch (const hook_conflict_error& e) {
      thrown = e.run_id();
    }
    co_return json{{"conflict", owner->run_id()}, {"thrownOwner", thrown}};
  }
  co_return json{{"owned", true}};
}

// Waits on a durable sleep first, then reads its start hook.
flow<json> late_reader(context& ctx, json input) {
  co_await ctx.sleep(std::chrono::hours(1));
  co_return co_await collect(ctx, input);
}

flow<json> never_opens(context&, json) {
  co_return json("done");
}

flow<json> bad_bind(context& ctx, json input) {
  auto hook = ctx.create_hook<json>(
      {.token = input.at("token"), .metadata = json{{"x", 1}}});
  co_return json(hook.token());
}

// Reads one payload inside a scope that disposes the hook, then sleeps.
flow<json> scoped_then_sleep(context& ctx, json input) {
  json first;
  {
    auto hook = ctx.create_scoped_hook<json>({.token = input.at("token")});
    first = co_await hook;
  }
  co_await ctx.sleep(std::chrono::hours(1));
  co_return first;
}

// Force-claims input.token and reads one payload.
flow<json> superseder(context& ctx, json input) {
  auto hook =
      ctx.create_hook<json>({.token = input.at("token"), .force = true});
  if (auto owner = co_await hook.conflict()) {
    co_return json{{"conflict", owner->run_id()}};
  }
  json got = co_await hook;
  co_return json{{"got", got}};
}

// Reads until the token is force-claimed away, reporting what it got.
flow<json> superseded(context& ctx, json input) {
  auto hook = ctx.create_hook<json>({.token = input.at("token")});
  json got = json::array();
  std::string claimed_by;
  try {
    for (;;) {
      got.push_back(co_await hook);
    }
  } catch (const hook_force_claimed_error& e) {
    claimed_by = e.run_id();
  }
  co_return json{{"got", got}, {"claimedBy", claimed_by}};
}

// Reads one payload through a scoped hook (disposed as the scope ends),
// sleeps, then creates the hook on the same token again.
flow<json> dispose_then_again(context& ctx, json input) {
  std::string token = input.at("token");
  {
    auto hook = ctx.create_scoped_hook<json>({.token = token});
    co_await hook;
  }
  co_await ctx.sleep(std::chrono::hours(1));
  auto again = ctx.create_hook<json>({.token = token});
  if (auto owner = co_await again.conflict()) {
    co_return json{{"conflict", owner->run_id()}};
  }
  co_return json{{"owned", true}};
}

// A top-level hook with a retention, scoped or not, reading one payload.
flow<json> scoped_with_retention(context& ctx, json input) {
  auto hook = ctx.create_scoped_hook<json>(
      {.token = input.at("token"), .min_retention = "1h"});
  co_return co_await hook;
}

flow<json> plain_with_retention(context& ctx, json input) {
  auto hook = ctx.create_hook<json>(
      {.token = input.at("token"), .min_retention = "1h"});
  co_return co_await hook;
}

class HookTest : public testing::runtime_fixture {
 protected:
  HookTest() {
    flows_.flow("collect", collect);
    flows_.flow("report-conflict", report_conflict);
    flows_.flow("late-reader", late_reader);
    flows_.flow("never-opens", never_opens);
    flows_.flow("bad-bind", bad_bind);
    flows_.flow("scoped-then-sleep", scoped_then_sleep);
    flows_.flow("superseder", superseder);
    flows_.flow("superseded", superseded);
    flows_.flow("dispose-then-again", dispose_then_again);
    flows_.flow("scoped-with-retention", scoped_with_retention);
    flows_.flow("plain-with-retention", plain_with_retention);
    examples::register_examples(flows_);
    bodies_started = 0;
  }

  static start_options with_hook(std::string token,
                                 json min_retention = nullptr,
                                 json metadata = nullptr) {
    start_options options;
    options.hook = start_hook{std::move(token), std::move(min_retention),
                              std::move(metadata)};
    return options;
  }

  static bool hook_is_free(runtime& rt, std::string_view token) {
    auto hook = rt.get_hook_by_token(token);
    return !hook && hook.error().code == errc::hook_not_found;
  }
};

TEST_F(HookTest, TokensAreUniqueWhileActive) {
  auto rt = open();
  auto owner = rt->start("collect", {{"token", "order:1"}});
  ASSERT_TRUE(owner.ok());
  ASSERT_TRUE(eventually([&] {
    auto hook = rt->get_hook_by_token("order:1");
    return hook && hook->owner_run_id == owner->id;
  }));
  auto second = rt->start("report-conflict", {{"token", "order:1"}});
  auto done = rt->wait(second->id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->output["conflict"], owner->id);
  EXPECT_EQ(done->output["thrownOwner"], owner->id);
}

TEST_F(HookTest, DuplicateStartNamesTheOwnerAndNeverBecomesARun) {
  auto rt = open();
  auto first =
      rt->start("collect", {{"token", "order:A"}}, with_hook("order:A"));
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  auto again =
      rt->start("collect", {{"token", "order:A"}}, with_hook("order:A"));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, errc::hook_conflict);
  EXPECT_EQ(again.error().run_id, first->id);
  EXPECT_EQ(rt->list({})->runs.size(), 1u);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(bodies_started.load(), 1) << "the duplicate's code ran";
}

TEST_F(HookTest, PayloadsResumedBeforeTheFlowOpensTheHookAreKeptInOrder) {
  std::string id;
  {
    auto rt = open();
    auto run =
        rt->start("late-reader", {{"token", "order:B"}}, with_hook("order:B"));
    ASSERT_TRUE(run.ok());
    id = run->id;
    for (int n = 1; n <= 3; ++n) {
      json payload = {{"n", n}};
      if (n == 3) {
        payload["done"] = true;
      }
      auto resumed = rt->resume_hook("order:B", payload);
      ASSERT_TRUE(resumed.ok()) << resumed.error().to_string();
      EXPECT_EQ(*resumed, id);
    }
  }
  clock_->advance_ms(2 * 3'600'000);  // the sleep ends while the node is down
  auto rt = open();
  auto done = rt->wait(id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->output, json::array({1, 2, 3}));
}

TEST_F(HookTest, StartTokenBindsToTheStartHookWithoutANewRecord) {
  auto rt = open();
  auto run = rt->start("collect", {{"token", "order:C"}}, with_hook("order:C"));
  ASSERT_TRUE(run.ok());
  ASSERT_TRUE(rt->resume_hook("order:C", {{"n", 1}, {"done", true}}).ok());
  auto done = rt->wait(run->id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->output, json::array({1}));
  EXPECT_EQ(count_events(*rt, run->id, "hook-created"), 0u);
}

TEST_F(HookTest, OptionsOnTheStartHookAreAnErrorNamingTheOption) {
  auto rt = open();
  auto run =
      rt->start("bad-bind", {{"token", "order:D"}}, with_hook("order:D"));
  ASSERT_TRUE(run.ok());
  auto done = rt->wait(run->id, wait_max);
  ASSERT_EQ(done->status, run_status::failed);
  EXPECT_NE(done->error->message.find("'metadata'"), std::string::npos)
      << done->error->message;
}

TEST_F(HookTest, UnopenedStartHookCompletesAndReleasesTheToken) {
  auto rt = open();
  auto run = rt->start("never-opens", json::object(), with_hook("order:E"));
  ASSERT_TRUE(run.ok());
  ASSERT_EQ(rt->wait(run->id, wait_max)->status, run_status::completed);
  ASSERT_TRUE(eventually([&] { return hook_is_free(*rt, "order:E"); }));
  auto next = rt->start("never-opens", json::object(), with_hook("order:E"));
  ASSERT_TRUE(next.ok()) << next.error().to_string();
  EXPECT_NE(next->id, run->id);
}

// Rule 6, as a caller sees it: once the owner's end can be read, a start with
// its token is a new run at once (the get() loop spins to catch the moment
// the end is durable but its notice has not reached the token yet).
// An owner whose token needs nothing but a delete frees it in the write
// that records its end: once the end is durable, so is the release.
TEST_F(HookTest, AnOwnerFreesItsTokenInTheWriteThatRecordsItsEnd) {
  auto rt = open();
  auto run = rt->start("never-opens", json::object(), with_hook("order:R"));
  ASSERT_TRUE(run.ok());
  auto done = rt->wait(run->id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->status, run_status::completed);
  auto record =
      runtime_access::services(*rt)
          .shard_of_token(persistence::keys::token(default_tenant, "order:R"))
          .store->get_token(default_tenant, "order:R");
  ASSERT_TRUE(record.ok());
  EXPECT_FALSE(record->has_value());
  auto next = rt->start("never-opens", json::object(), with_hook("order:R"));
  ASSERT_TRUE(next.ok()) << next.error().to_string();
  EXPECT_NE(next->id, run->id);
}

// A start that reaches the token while its owner's end write (which frees
// the token) is in flight waits for that write, then finds the token free.
TEST_F(HookTest, AStartRacingTheOwnersEndWriteWaitsForItAndIsANewRun) {
  auto rt = open();
  struct gate {
    std::atomic<int> writes{0};
    std::promise<void> end_writing;
  };
  auto shared = std::make_shared<gate>();
  auto end_writing = shared->end_writing.get_future();
  // Write 1 admits the run; write 2 records its end: held up for a while.
  testing::inject_storage_faults(*rt, [shared] {
    if (++shared->writes == 2) {
      shared->end_writing.set_value();
      std::this_thread::sleep_for(300ms);
    }
    return testing::storage_fault::none;
  });
  auto first = rt->start("never-opens", json::object(), with_hook("order:S"));
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(end_writing.wait_for(wait_max), std::future_status::ready);
  auto second = rt->start("never-opens", json::object(), with_hook("order:S"));
  ASSERT_TRUE(second.ok()) << second.error().to_string();
  EXPECT_NE(second->id, first->id);
  // It was admitted only once the owner's end (and the token's release) was
  // durable: never two owners at once.
  EXPECT_EQ(rt->get(first->id)->status, run_status::completed);
  EXPECT_GE(shared->writes.load(), 3);
  EXPECT_EQ(rt->wait(first->id, wait_max)->status, run_status::completed);
  EXPECT_EQ(rt->wait(second->id, wait_max)->status, run_status::completed);
  testing::inject_storage_faults(*rt, nullptr);
}

// The owner's end write fails, having landed or not: the token follows the
// store, and a start after the end is seen is a new run.
TEST_F(HookTest, AFailedEndWriteLeavesTheTokenToWhatTheStoreHolds) {
  using testing::storage_fault;
  for (auto mode :
       {storage_fault::fail_after_write, storage_fault::fail_before_write}) {
    SCOPED_TRACE(static_cast<int>(mode));
    // A node of its own each time, quiet, so that write 2 is the end.
    auto rt = open();
    std::string token = "order:F" + std::to_string(static_cast<int>(mode));
    auto writes = std::make_shared<std::atomic<int>>(0);
    testing::inject_storage_faults(*rt, [writes, mode] {
      return ++*writes == 2 ? mode : storage_fault::none;
    });
    auto first = rt->start("never-opens", json::object(), with_hook(token));
    ASSERT_TRUE(first.ok());
    auto done = rt->wait(first->id, wait_max);
    ASSERT_TRUE(done.ok());
    EXPECT_EQ(done->status, run_status::completed);
    testing::inject_storage_faults(*rt, nullptr);
    auto second = rt->start("never-opens", json::object(), with_hook(token));
    ASSERT_TRUE(second.ok()) << second.error().to_string();
    EXPECT_NE(second->id, first->id);
  }
}

TEST_F(HookTest, AStartAfterTheOwnersEndIsSeenIsANewRun) {
  auto rt = open();
  std::string previous;
  for (int round = 0; round < 200; ++round) {
    auto run =
        rt->start("never-opens", json::object(), with_hook("order:seen"));
    ASSERT_TRUE(run.ok()) << "round " << round << ": "
                          << run.error().to_string();
    EXPECT_NE(run->id, previous);
    previous = run->id;
    for (;;) {
      auto now = rt->get(run->id);
      ASSERT_TRUE(now.ok());
      if (is_terminal(now->status)) {
        break;
      }
    }
  }
}

// A run idle on a hook leaves memory; each payload brings it back, in order.
TEST_F(HookTest, ARunWaitingOnAHookPassivatesAndPayloadsWakeIt) {
  auto rt = open(std::chrono::milliseconds(100));
  auto run = rt->start("collect", {{"token", "order:P"}}, with_hook("order:P"));
  ASSERT_TRUE(run.ok());
  ASSERT_TRUE(rt->resume_hook("order:P", {{"n", 1}}).ok());
  ASSERT_TRUE(eventually([&] { return rt->active_run_actors() == 0; }));
  EXPECT_EQ(rt->get(run->id)->status, run_status::waiting);
  ASSERT_TRUE(rt->resume_hook("order:P", {{"n", 2}}).ok());
  ASSERT_TRUE(rt->resume_hook("order:P", {{"n", 3}}).ok());
  ASSERT_TRUE(eventually([&] {
    return count_events(*rt, run->id, "hook-payload") == 3 &&
           rt->active_run_actors() == 0;
  })) << count_events(*rt, run->id, "hook-payload")
      << " payloads read, " << rt->active_run_actors() << " run actors";
  ASSERT_TRUE(rt->resume_hook("order:P", {{"n", 4}, {"done", true}}).ok());
  auto done = rt->wait(run->id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->output, json::array({1, 2, 3, 4}));
}

TEST_F(HookTest, RetentionKeepsFinishedOwnerUntilDeadline) {
  auto rt = open();
  auto run = rt->start("never-opens", json::object(),
                       with_hook("order:F", "1h", json{{"orderId", "F"}}));
  ASSERT_TRUE(run.ok());
  ASSERT_EQ(rt->wait(run->id, wait_max)->status, run_status::completed);
  ASSERT_TRUE(eventually([&] {
    auto hook = rt->get_hook_by_token("order:F");
    return hook && hook->state == "retained";
  }));
  auto hook = rt->get_hook_by_token("order:F");
  EXPECT_EQ(hook->owner_run_id, run->id);
  EXPECT_EQ(hook->metadata["orderId"], "F");
  EXPECT_EQ(hook->retain_until_ms, run->created_at_ms + 3'600'000);
  auto duplicate =
      rt->start("never-opens", json::object(), with_hook("order:F"));
  ASSERT_FALSE(duplicate.ok());
  EXPECT_EQ(duplicate.error().code, errc::hook_conflict);
  EXPECT_EQ(duplicate.error().run_id, run->id);
  EXPECT_EQ(rt->resume_hook("order:F", json::object()).error().code,
            errc::hook_not_found);
  rt.reset();  // retention survives a restart
  rt = open();
  EXPECT_EQ(rt->start("never-opens", json::object(), with_hook("order:F"))
                .error()
                .code,
            errc::hook_conflict);
  clock_->advance_ms(3'600'001);
  auto after = rt->start("never-opens", json::object(), with_hook("order:F"));
  ASSERT_TRUE(after.ok()) << after.error().to_string();
}

TEST_F(HookTest, RetentionBeyondTheCapIsRefused) {
  auto rt = open();
  auto run =
      rt->start("never-opens", json::object(), with_hook("order:G", "40 days"));
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.error().code, errc::invalid_argument);
  EXPECT_NE(run.error().message.find("cap"), std::string::npos);
  EXPECT_EQ(
      rt->start("never-opens", json::object(), with_hook("order:G", "soon"))
          .error()
          .code,
      errc::invalid_argument);
  EXPECT_TRUE(rt->list({})->runs.empty());
}

// Rule 7: a duration counts from the start, milliseconds too; an RFC 3339
// time is absolute; anything else, or beyond the cap, is refused.
TEST_F(HookTest, MinRetentionTakesADurationMillisecondsOrAnAbsoluteTime) {
  constexpr std::int64_t from = 1'796'032'800'000;  // 2026-11-30T10:00Z
  constexpr std::int64_t cap = 30LL * 86'400'000;
  EXPECT_EQ(*actors::retain_until("30 days", from, cap), from + cap);
  EXPECT_EQ(*actors::retain_until("2h", from, cap), from + 7'200'000);
  EXPECT_EQ(*actors::retain_until("500ms", from, cap), from + 500);
  EXPECT_EQ(*actors::retain_until(1500, from, cap), from + 1500);
  EXPECT_EQ(*actors::retain_until(nullptr, from, cap), 0);
  // 2026-12-01T10:00:00Z is 1,796,119,200,000 ms.
  EXPECT_EQ(*actors::retain_until("2026-12-01T10:00:00Z", from, cap),
            1'796'119'200'000);
  EXPECT_EQ(*actors::retain_until("2026-12-01T12:00:00.250+02:00", from, cap),
            1'796'119'200'250);
  for (json bad : {json("soon"), json("31 days"), json(-1), json::array()}) {
    auto refused = actors::retain_until(bad, from, cap);
    ASSERT_FALSE(refused.ok()) << bad.dump();
    EXPECT_EQ(refused.error().code, errc::invalid_argument);
    EXPECT_NE(refused.error().message.find("minRetention"), std::string::npos);
  }
  // Through a start: a number of milliseconds counts from the start.
  auto rt = open();
  auto run =
      rt->start("never-opens", json::object(), with_hook("order:MR", 90'000));
  ASSERT_TRUE(run.ok());
  ASSERT_EQ(rt->wait(run->id, wait_max)->status, run_status::completed);
  ASSERT_TRUE(eventually([&] {
    auto hook = rt->get_hook_by_token("order:MR");
    return hook && hook->state == "retained";
  }));
  EXPECT_EQ(rt->get_hook_by_token("order:MR")->retain_until_ms,
            run->created_at_ms + 90'000);
}

// Rule 7: the owner keeps its token until it ends, even once its
// retention has passed; then the token is free at once.
TEST_F(HookTest, TheOwnerHoldsItsTokenUntilItEndsEvenPastItsRetention) {
  auto rt = open();
  auto run = rt->start("collect", {{"token", "order:OH"}},
                       with_hook("order:OH", "1s"));
  ASSERT_TRUE(run.ok());
  ASSERT_TRUE(
      eventually([&] { return status_is(*rt, run->id, run_status::waiting); }));
  clock_->advance_ms(5'000);
  auto duplicate =
      rt->start("never-opens", json::object(), with_hook("order:OH"));
  ASSERT_FALSE(duplicate.ok());
  EXPECT_EQ(duplicate.error().code, errc::hook_conflict);
  EXPECT_EQ(duplicate.error().run_id, run->id);
  ASSERT_TRUE(rt->resume_hook("order:OH", {{"n", 1}, {"done", true}}).ok());
  ASSERT_EQ(rt->wait(run->id, wait_max)->status, run_status::completed);
  auto next = rt->start("never-opens", json::object(), with_hook("order:OH"));
  EXPECT_TRUE(next.ok()) << next.error().to_string();
}

// Rule 9: a run may create a hook it disposed again only if nobody took the
// token meanwhile; otherwise conflict() names the new owner.
TEST_F(HookTest, ARunMayCreateADisposedHookAgainOnlyIfNobodyTookIt) {
  auto rt = open();
  auto alone = rt->start("dispose-then-again", {{"token", "order:DA"}});
  auto crowded = rt->start("dispose-then-again", {{"token", "order:DB"}});
  ASSERT_TRUE(alone.ok() && crowded.ok());
  for (const char* token : {"order:DA", "order:DB"}) {
    ASSERT_TRUE(eventually([&] { return !hook_is_free(*rt, token); }));
    ASSERT_TRUE(rt->resume_hook(token, {{"n", 1}}).ok());
    ASSERT_TRUE(eventually([&] { return hook_is_free(*rt, token); }));
  }
  auto taker = rt->start("collect", {{"token", "order:DB"}});
  ASSERT_TRUE(taker.ok());
  ASSERT_TRUE(eventually([&] {
    auto hook = rt->get_hook_by_token("order:DB");
    return hook && hook->owner_run_id == taker->id;
  }));
  ASSERT_TRUE(eventually([&] {
    return status_is(*rt, alone->id, run_status::waiting) &&
           status_is(*rt, crowded->id, run_status::waiting);
  }));
  clock_->advance_ms(3'600'001);
  EXPECT_EQ(rt->wait(alone->id, wait_max)->output, json({{"owned", true}}));
  EXPECT_EQ(rt->wait(crowded->id, wait_max)->output,
            json({{"conflict", taker->id}}));
}

// Rule 10: a scoped hook at the flow's top level disposes as the run
// returns, so its retention never applies; a plain one keeps the token.
TEST_F(HookTest, AScopedTopLevelHookWithRetentionIsReleasedAsTheRunReturns) {
  auto rt = open();
  auto scoped = rt->start("scoped-with-retention", {{"token", "order:SR"}});
  auto plain = rt->start("plain-with-retention", {{"token", "order:PR"}});
  ASSERT_TRUE(scoped.ok() && plain.ok());
  for (const char* token : {"order:SR", "order:PR"}) {
    ASSERT_TRUE(eventually([&] { return !hook_is_free(*rt, token); }));
    ASSERT_TRUE(rt->resume_hook(token, {{"n", 1}}).ok());
  }
  ASSERT_EQ(rt->wait(scoped->id, wait_max)->status, run_status::completed);
  ASSERT_EQ(rt->wait(plain->id, wait_max)->status, run_status::completed);
  EXPECT_TRUE(eventually([&] { return hook_is_free(*rt, "order:SR"); }));
  auto retained = rt->get_hook_by_token("order:PR");
  ASSERT_TRUE(retained.ok());
  EXPECT_EQ(retained->state, "retained");
  auto next = rt->start("never-opens", json::object(), with_hook("order:SR"));
  EXPECT_TRUE(next.ok()) << next.error().to_string();
  auto refused =
      rt->start("never-opens", json::object(), with_hook("order:PR"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().run_id, plain->id);
}

TEST_F(HookTest, CancellingTheOwnerReleasesTheToken) {
  auto rt = open();
  auto run = rt->start("collect", {{"token", "order:H"}}, with_hook("order:H"));
  ASSERT_TRUE(run.ok());
  ASSERT_TRUE(
      eventually([&] { return status_is(*rt, run->id, run_status::waiting); }));
  ASSERT_TRUE(rt->cancel(run->id).ok());
  ASSERT_TRUE(eventually([&] {
    return rt->start("never-opens", json::object(), with_hook("order:H")).ok();
  }));
}

TEST_F(HookTest, DisposingReleasesTheTokenAtOnceWhileTheRunGoesOn) {
  auto rt = open();
  auto run = rt->start("scoped-then-sleep", {{"token", "order:I"}});
  ASSERT_TRUE(run.ok());
  ASSERT_TRUE(eventually([&] {
    auto hook = rt->get_hook_by_token("order:I");
    return hook && hook->owner_run_id == run->id;
  }));
  ASSERT_TRUE(rt->resume_hook("order:I", {{"n", 1}}).ok());
  ASSERT_TRUE(eventually([&] { return hook_is_free(*rt, "order:I"); }));
  EXPECT_EQ(rt->get(run->id)->status, run_status::waiting);
  EXPECT_EQ(count_events(*rt, run->id, "hook-disposed"), 1u);
  auto other = rt->start("report-conflict", {{"token", "order:I"}});
  EXPECT_EQ(rt->wait(other->id, wait_max)->output["owned"], true);
}

TEST_F(HookTest, ForceClaimDeliversEarlierPayloadsThenRaisesInTheOldOwner) {
  auto rt = open();
  auto old = rt->start("superseded", {{"token", "order:J"}});
  ASSERT_TRUE(eventually([&] {
    auto hook = rt->get_hook_by_token("order:J");
    return hook && hook->owner_run_id == old->id;
  }));
  ASSERT_TRUE(rt->resume_hook("order:J", {{"n", 1}}).ok());
  auto newer = rt->start("superseder", {{"token", "order:J"}});
  ASSERT_TRUE(eventually([&] {
    auto hook = rt->get_hook_by_token("order:J");
    return hook && hook->owner_run_id == newer->id;
  }));
  auto resumed = rt->resume_hook("order:J", {{"n", 2}});
  ASSERT_TRUE(resumed.ok());
  EXPECT_EQ(*resumed, newer->id);
  auto old_done = rt->wait(old->id, wait_max);
  ASSERT_TRUE(old_done.ok());
  EXPECT_EQ(old_done->output["got"], json::array({json{{"n", 1}}}));
  EXPECT_EQ(old_done->output["claimedBy"], newer->id);
  auto new_done = rt->wait(newer->id, wait_max);
  EXPECT_EQ(new_done->output["got"]["n"], 2);
}

TEST_F(HookTest, ResumeWithARecordedResumeIdIsNotRecordedAgain) {
  auto rt = open();
  auto run = rt->start("collect", {{"token", "order:K"}}, with_hook("order:K"));
  resume_options once;
  once.resume_id = "msg-1";
  ASSERT_TRUE(rt->resume_hook("order:K", {{"n", 1}}, once).ok());
  auto retried = rt->resume_hook("order:K", {{"n", 1}}, once);
  ASSERT_TRUE(retried.ok());
  EXPECT_EQ(*retried, run->id);
  ASSERT_TRUE(rt->resume_hook("order:K", {{"n", 2}, {"done", true}}).ok());
  EXPECT_EQ(rt->wait(run->id, wait_max)->output, json::array({1, 2}));
}

// resume_hook_async answers each payload once it is durable, without a
// thread waiting per payload; payloads sent from one thread keep their order.
TEST_F(HookTest, AsyncResumesAreAnsweredOnceDurableAndKeepTheirOrder) {
  constexpr int count = 200;
  std::string id;
  {
    auto rt = open();
    auto run =
        rt->start("late-reader", {{"token", "order:A"}}, with_hook("order:A"));
    ASSERT_TRUE(run.ok());
    id = run->id;
    std::mutex mutex;
    std::condition_variable all_in;
    std::vector<std::string> owners;
    for (int n = 1; n <= count; ++n) {
      json payload = {{"n", n}};
      if (n == count) {
        payload["done"] = true;
      }
      rt->resume_hook_async(
          "order:A", payload, {}, [&](result<std::string> resumed) {
            std::lock_guard lock(mutex);
            owners.push_back(resumed ? *resumed : resumed.error().to_string());
            all_in.notify_all();
          });
    }
    std::unique_lock lock(mutex);
    ASSERT_TRUE(all_in.wait_for(lock, wait_max,
                                [&] { return owners.size() == count; }));
    for (auto& owner : owners) {
      EXPECT_EQ(owner, id);
    }
  }
  // Every answered payload survives the node going away.
  clock_->advance_ms(2 * 3'600'000);
  auto rt = open();
  auto done = rt->wait(id, wait_max);
  ASSERT_TRUE(done.ok());
  json expected = json::array();
  for (int n = 1; n <= count; ++n) {
    expected.push_back(n);
  }
  EXPECT_EQ(done->output, expected);
}

TEST_F(HookTest, AsyncResumeRefusalsComeThroughTheCallback) {
  auto rt = open();
  std::promise<result<std::string>> unknown;
  rt->resume_hook_async(
      "order:none", json::object(), {},
      [&](result<std::string> resumed) { unknown.set_value(resumed); });
  auto missing = unknown.get_future().get();
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, errc::hook_not_found);
  std::promise<result<std::string>> empty;
  rt->resume_hook_async(
      "", json::object(), {},
      [&](result<std::string> resumed) { empty.set_value(resumed); });
  auto refused = empty.get_future().get();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::invalid_argument);
}

TEST_F(HookTest, ResumeOfAnUnknownTokenIsHookNotFound) {
  auto rt = open();
  auto missing = rt->resume_hook("order:none", json::object());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, errc::hook_not_found);
  EXPECT_EQ(rt->get_hook_by_token("").error().code, errc::invalid_argument);
}

TEST_F(HookTest, OrderNotesExampleReadsNotesUntilDone) {
  auto rt = open();
  auto run = rt->start("acme.order-notes", {{"orderId", "N-1"}, {"note", "a"}},
                       with_hook("order:N-1"));
  ASSERT_TRUE(run.ok());
  ASSERT_TRUE(rt->resume_hook("order:N-1", {{"note", "b"}}).ok());
  ASSERT_TRUE(
      rt->resume_hook("order:N-1", {{"note", "c"}, {"done", true}}).ok());
  auto done = rt->wait(run->id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->output["notes"], json::array({"a", "b", "c"}));
}

TEST_F(HookTest, SixtyFourStartsWithOneTokenMakeOneRun) {
  auto rt = open();
  // 1,000 races of 64 threads by default; DURIN_RACE_ROUNDS to change. The
  // same 64 threads race every round, released together by a barrier.
  int rounds = 1000;
  if (const char* env = std::getenv("DURIN_RACE_ROUNDS")) {
    rounds = std::max(1, std::atoi(env));
  }
  constexpr int racers = 64;
  std::vector<result<run_info>> outcomes(racers,
                                         make_error(errc::internal, "not run"));
  std::string token;
  std::barrier start_line(racers + 1);
  std::barrier finish_line(racers + 1);
  std::vector<std::thread> threads;
  for (int i = 0; i < racers; ++i) {
    threads.emplace_back([&, i] {
      for (int race = 0; race < rounds; ++race) {
        start_line.arrive_and_wait();
        outcomes[i] =
            rt->start("collect", {{"token", token}}, with_hook(token));
        finish_line.arrive_and_wait();
      }
    });
  }
  int failed_races = 0;
  for (int race = 0; race < rounds; ++race) {
    token = "race:" + std::to_string(race);
    start_line.arrive_and_wait();
    finish_line.arrive_and_wait();
    std::string winner;
    int wins = 0;
    for (auto& outcome : outcomes) {
      if (outcome) {
        ++wins;
        winner = outcome->id;
      }
    }
    bool losers_name_winner = true;
    for (auto& outcome : outcomes) {
      // The winner waits on its hook, so it holds the token throughout.
      if (!outcome && (outcome.error().code != errc::hook_conflict ||
                       outcome.error().run_id != winner)) {
        losers_name_winner = false;
      }
    }
    if (wins != 1 || !losers_name_winner) {
      ++failed_races;
      ADD_FAILURE() << "race " << race << ": " << wins << " winners";
    }
  }
  for (auto& thread : threads) {
    thread.join();
  }
  EXPECT_EQ(failed_races, 0);
}

}  // namespace
}  // namespace durin

namespace durin {
namespace {

TEST_F(HookTest, StartOutcomeUnknownThenRetryGivesOneRun) {
  auto rt = open();
  // The admission lands but is reported as failed: indefinite.
  testing::inject_storage_faults(
      *rt, [faults = std::make_shared<std::atomic<int>>(1)] {
        return faults->exchange(0) > 0
                   ? testing::storage_fault::fail_after_write
                   : testing::storage_fault::none;
      });
  auto first =
      rt->start("collect", {{"token", "order:U"}}, with_hook("order:U"));
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.error().code, errc::start_outcome_unknown);
  auto candidate = first.error().run_id;
  ASSERT_FALSE(candidate.empty());
  auto retry =
      rt->start("collect", {{"token", "order:U"}}, with_hook("order:U"));
  ASSERT_FALSE(retry.ok());
  EXPECT_EQ(retry.error().code, errc::hook_conflict);
  EXPECT_EQ(retry.error().run_id, candidate);
  // The candidate was admitted after all and runs without a restart.
  ASSERT_TRUE(rt->resume_hook("order:U", {{"n", 1}, {"done", true}}).ok());
  EXPECT_EQ(rt->wait(candidate, wait_max)->status, run_status::completed);
  EXPECT_EQ(rt->list({})->runs.size(), 1u);

  // Nothing lands: the retry becomes the owner. (Once the node is quiet, so
  // that the fault hits the admission.)
  ASSERT_TRUE(eventually([&] { return hook_is_free(*rt, "order:U"); }));
  std::this_thread::sleep_for(50ms);
  testing::inject_storage_faults(
      *rt, [calls = std::make_shared<std::atomic<int>>(1)] {
        return calls->exchange(0) > 0
                   ? testing::storage_fault::fail_before_write
                   : testing::storage_fault::none;
      });
  auto lost =
      rt->start("collect", {{"token", "order:V"}}, with_hook("order:V"));
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.error().code, errc::start_outcome_unknown);
  auto owner =
      rt->start("collect", {{"token", "order:V"}}, with_hook("order:V"));
  ASSERT_TRUE(owner.ok()) << owner.error().to_string();
  EXPECT_NE(owner->id, lost.error().run_id);
  EXPECT_EQ(rt->get(lost.error().run_id).error().code, errc::run_not_found);
}

// Claims input.token with metadata and a retention, then reads one payload.
flow<json> claims_with_metadata(context& ctx, json input) {
  auto hook = ctx.create_hook<json>({.token = input.at("token"),
                                     .metadata = json{{"k", "v"}},
                                     .min_retention = "1h"});
  co_return co_await hook;
}

// The writes after the admission fail before landing, so the claim is
// answered "unknown" and retried (or the run reloads and claims again): the
// claim that lands still carries its metadata and retention.
TEST_F(HookTest, ClaimRetriedAfterAFailedTokenWriteKeepsMetadataAndRetention) {
  flows_.flow("claims-with-metadata", claims_with_metadata);
  auto rt = open();
  testing::inject_storage_faults(
      *rt, [writes = std::make_shared<std::atomic<int>>(0)] {
        auto n = ++*writes;
        // The first write is the admission.
        return n == 2 || n == 3 ? testing::storage_fault::fail_before_write
                                : testing::storage_fault::none;
      });
  auto run = rt->start("claims-with-metadata", {{"token", "order:R"}});
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  ASSERT_TRUE(eventually([&] {
    auto hook = rt->get_hook_by_token("order:R");
    return hook && hook->owner_run_id == run->id;
  }));
  auto hook = rt->get_hook_by_token("order:R");
  EXPECT_EQ(hook->metadata, (json{{"k", "v"}}));
  EXPECT_GT(hook->retain_until_ms, run->created_at_ms);
  ASSERT_TRUE(
      eventually([&] { return status_is(*rt, run->id, run_status::waiting); }));
  testing::inject_storage_faults(*rt, nullptr);
  ASSERT_TRUE(rt->resume_hook("order:R", "go").ok());
  ASSERT_EQ(rt->wait(run->id, wait_max)->status, run_status::completed);
  ASSERT_TRUE(eventually([&] {
    auto kept = rt->get_hook_by_token("order:R");
    return kept && kept->state == "retained";
  }));
  EXPECT_EQ(rt->get_hook_by_token("order:R")->metadata, (json{{"k", "v"}}));
}

// A webhook's token is random; the flow publishes it through a step.
std::mutex webhook_mutex;
std::string webhook_token_seen;

flow<json> webhook_flow(context& ctx, json) {
  auto hook = ctx.create_webhook<json>();
  // Named, not a temporary in the co_await: g++ 12 destroys a lambda
  // temporary with a non-trivial capture twice inside a co_await expression.
  auto publish = [token = hook.token()] {
    std::lock_guard<std::mutex> lock(webhook_mutex);
    webhook_token_seen = token;
    return token;
  };
  co_await ctx.step("publish", publish);
  json got = co_await hook;
  co_return got;
}

TEST_F(HookTest, WebhookHasARandomTokenThatResumesIt) {
  flows_.flow("webhook", webhook_flow);
  {
    std::lock_guard<std::mutex> lock(webhook_mutex);
    webhook_token_seen.clear();  // from an earlier repetition
  }
  auto rt = open();
  auto run = rt->start("webhook", json::object());
  ASSERT_TRUE(run.ok());
  std::string token;
  ASSERT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> lock(webhook_mutex);
    token = webhook_token_seen;
    return !token.empty();
  }));
  EXPECT_EQ(token.rfind("wh_", 0), 0u);
  EXPECT_GE(token.size(), 35u);
  ASSERT_TRUE(eventually([&] {
    auto hook = rt->get_hook_by_token(token);
    return hook && hook->owner_run_id == run->id;
  }));
  ASSERT_TRUE(rt->resume_hook(token, {{"method", "POST"}}).ok());
  EXPECT_EQ(rt->wait(run->id, wait_max)->output["method"], "POST");
}

// Creates a hook on input.token: reports the owner on a conflict, else holds
// the token until one payload arrives.
flow<json> own_or_report(context& ctx, json input) {
  auto hook = ctx.create_hook<json>({.token = input.at("token")});
  if (auto owner = co_await hook.conflict()) {
    co_return json{{"conflict", owner->run_id()}};
  }
  json got = co_await hook;
  co_return json{{"owned", true}, {"got", got}};
}

TEST_F(HookTest, SixtyFourRunsCreatingOneTokenGiveOneOwner) {
  flows_.flow("own-or-report", own_or_report);
  auto rt = open();
  // 64 threads start at once, so the 64 claims reach the token together.
  std::vector<std::string> ids(64);
  std::barrier gate(64);
  std::vector<std::thread> starters;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    starters.emplace_back([&, i] {
      gate.arrive_and_wait();
      ids[i] = rt->start("own-or-report", {{"token", "shared:1"}})->id;
    });
  }
  for (auto& t : starters) {
    t.join();
  }
  // The owner holds the token until it gets a payload, so every other run
  // must see that one owner.
  auto ended = [&] {
    std::size_t n = 0;
    for (auto& id : ids) {
      n += rt->get(id)->status == run_status::completed ? 1 : 0;
    }
    return n;
  };
  ASSERT_TRUE(eventually([&] { return ended() == 63; }));
  auto hook = rt->get_hook_by_token("shared:1");
  ASSERT_TRUE(hook.ok());
  std::string owner = hook->owner_run_id;
  ASSERT_TRUE(rt->resume_hook("shared:1", "go").ok());
  auto done = rt->wait(owner, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->output["owned"], true);
  int owners = 0;
  for (auto& id : ids) {
    auto run = rt->get(id);
    if (run->output.value("owned", false)) {
      ++owners;
      EXPECT_EQ(id, owner);
    } else {
      EXPECT_EQ(run->output["conflict"], owner) << id;
    }
  }
  EXPECT_EQ(owners, 1);
}

}  // namespace
}  // namespace durin

namespace durin {
namespace {

TEST_F(HookTest, RunOfAnOlderSpecVersionCannotBeTakenFrom) {
  std::string old_owner;
  {
    runtime_options options;
    options.data_dir = dir_.path();
    options.clock = clock_;
    options.spec_version = 1;  // a node of an older release
    auto rt = runtime::open(options, flows_);
    ASSERT_TRUE(rt.ok());
    auto run = (*rt)->start("collect", {{"token", "order:old"}});
    old_owner = run->id;
    ASSERT_TRUE(eventually([&] {
      auto hook = (*rt)->get_hook_by_token("order:old");
      return hook && hook->owner_run_id == old_owner;
    }));
  }
  auto rt = open();
  auto forced = rt->start("superseder", {{"token", "order:old"}});
  auto done = rt->wait(forced->id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->output["conflict"], old_owner);
  EXPECT_EQ(rt->get_hook_by_token("order:old")->owner_run_id, old_owner);
}

}  // namespace
}  // namespace durin

// The seed's conflict-handling strategies, written as ordinary flow code.
namespace durin {
namespace {

runtime* current_runtime = nullptr;

// Adopt the owner's result: callers cannot tell which run did the work.
flow<json> adopt_owner(context& ctx, json input) {
  auto hook = ctx.create_scoped_hook<json>({.token = input.at("token")});
  if (auto owner = co_await hook.conflict()) {
    co_return co_await owner->return_value();
  }
  json work = co_await hook;  // the owner waits for its go-ahead
  co_return json{{"processedBy", ctx.run_id()}, {"work", work}};
}

// Inspect the owner: reuse a completed owner's result, reject the others.
flow<json> inspect_owner(context& ctx, json input) {
  auto hook = ctx.create_hook<json>(
      {.token = input.at("token"), .min_retention = "1h"});
  if (auto owner = co_await hook.conflict()) {
    if (co_await owner->status() == run_status::completed) {
      co_return co_await owner->return_value();
    }
    co_return json{{"status", "duplicate"}, {"runId", owner->run_id()}};
  }
  json work = co_await hook;
  co_return json{{"processedBy", ctx.run_id()}, {"work", work}};
}

// Forward to the owner: a step delivers this run's data to the owner's hook.
flow<json> forward_to_owner(context& ctx, json input) {
  auto hook = ctx.create_hook<json>({.token = input.at("token")});
  if (auto owner = co_await hook.conflict()) {
    // Not ended: forward. The owner may still read as pending: the token
    // records its claim in the token's own write, which can land before
    // the owner's write that records it running.
    auto status = co_await owner->status();
    if (!is_terminal(status)) {
      auto forward = [token = hook.token(), note = input.at("note")] {
        auto resumed = current_runtime->resume_hook(token, note);
        if (!resumed) {
          throw std::runtime_error(resumed.error().to_string());
        }
        return *resumed;
      };
      auto delivered_to = co_await ctx.step("forward", forward);
      co_return json{{"status", "forwarded"}, {"runId", delivered_to}};
    }
    co_return json{{"status", "duplicate"}, {"runId", owner->run_id()}};
  }
  json first = co_await hook;
  co_return json{{"status", "processed"}, {"note", first}};
}

// Fails at once, so that a handle on it has an error to report.
flow<json> fails_at_once(context&, json) {
  throw std::runtime_error("boom");
  co_return json();
}

// Asks through run handles about input.of (a run that failed) and an unknown
// run, then sleeps, so a restart replays the recorded answers.
flow<json> asks_about_runs(context& ctx, json input) {
  auto failed = ctx.run(input.at("of").get<std::string>());
  json out;
  out["status"] = std::string(to_string(co_await failed.status()));
  try {
    co_await failed.return_value();
  } catch (const run_failed_error& e) {
    out["code"] = e.code();
    out["message"] = e.what();
    out["endedAs"] = e.status();
  }
  try {
    co_await ctx.run("no-such-run").status();
  } catch (const run_failed_error& e) {
    out["unknown"] = e.status();
  }
  co_await ctx.sleep(std::chrono::hours(1));
  co_return out;
}

class HookPatternTest : public HookTest {
 protected:
  HookPatternTest() {
    flows_.flow("adopt-owner", adopt_owner);
    flows_.flow("inspect-owner", inspect_owner);
    flows_.flow("forward-to-owner", forward_to_owner);
    flows_.flow("fails-at-once", fails_at_once);
    flows_.flow("asks-about-runs", asks_about_runs);
  }
};

TEST_F(HookPatternTest, RunHandleGivesStatusAndReturnValueRecordedForReplay) {
  auto rt = open();
  auto failed = rt->start("fails-at-once", json::object());
  ASSERT_EQ(rt->wait(failed->id, wait_max)->status, run_status::failed);
  auto asker = rt->start("asks-about-runs", {{"of", failed->id}});
  ASSERT_TRUE(eventually(
      [&] { return status_is(*rt, asker->id, run_status::waiting); }));
  auto values_before = count_events(*rt, asker->id, "value-recorded");
  EXPECT_EQ(values_before, 3u);  // status, return value, unknown status
  rt.reset();
  rt = open();  // the answers are replayed from history, not asked again
  clock_->advance_ms(3'600'001);
  auto done = rt->wait(asker->id, wait_max);
  ASSERT_TRUE(done.ok());
  ASSERT_EQ(done->status, run_status::completed);
  EXPECT_EQ(done->output["status"], "failed");
  EXPECT_EQ(done->output["endedAs"], "failed");
  EXPECT_EQ(done->output["message"], "boom");
  EXPECT_EQ(done->output["unknown"], "not-found");
  EXPECT_EQ(count_events(*rt, asker->id, "value-recorded"), values_before);
}

TEST_F(HookPatternTest, AdoptTheOwnersResult) {
  auto rt = open();
  auto owner = rt->start("adopt-owner", {{"token", "p:1"}});
  ASSERT_TRUE(eventually([&] {
    auto hook = rt->get_hook_by_token("p:1");
    return hook && hook->owner_run_id == owner->id;
  }));
  auto duplicate = rt->start("adopt-owner", {{"token", "p:1"}});
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(rt->resume_hook("p:1", "go").ok());
  auto a = rt->wait(owner->id, wait_max);
  auto b = rt->wait(duplicate->id, wait_max);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->output, b->output);
  EXPECT_EQ(b->output["processedBy"], owner->id);
}

TEST_F(HookPatternTest, InspectTheOwnerBeforeDeciding) {
  auto rt = open();
  auto owner = rt->start("inspect-owner", {{"token", "p:2"}});
  ASSERT_TRUE(eventually([&] {
    auto hook = rt->get_hook_by_token("p:2");
    return hook && hook->owner_run_id == owner->id;
  }));
  auto early = rt->start("inspect-owner", {{"token", "p:2"}});
  auto rejected = rt->wait(early->id, wait_max);
  EXPECT_EQ(rejected->output["status"], "duplicate");
  EXPECT_EQ(rejected->output["runId"], owner->id);
  ASSERT_TRUE(rt->resume_hook("p:2", "go").ok());
  auto finished = rt->wait(owner->id, wait_max);
  // The owner retains the token for an hour: a late duplicate reuses it.
  auto late = rt->start("inspect-owner", {{"token", "p:2"}});
  auto reused = rt->wait(late->id, wait_max);
  EXPECT_EQ(reused->output, finished->output);
}

TEST_F(HookPatternTest, ForwardToTheOwner) {
  auto rt = open();
  current_runtime = rt.get();
  auto owner = rt->start("forward-to-owner", {{"token", "p:3"}, {"note", "a"}});
  ASSERT_TRUE(eventually([&] {
    auto hook = rt->get_hook_by_token("p:3");
    return hook && hook->owner_run_id == owner->id;
  }));
  auto second =
      rt->start("forward-to-owner", {{"token", "p:3"}, {"note", "b"}});
  auto forwarded = rt->wait(second->id, wait_max);
  EXPECT_EQ(forwarded->output["status"], "forwarded");
  EXPECT_EQ(forwarded->output["runId"], owner->id);
  auto processed = rt->wait(owner->id, wait_max);
  EXPECT_EQ(processed->output["note"], "b");
  current_runtime = nullptr;
}

TEST_F(HookPatternTest, StartOrRouteToTheOwnerNeedsAtMostTwoCalls) {
  auto rt = open();
  auto start_or_route =
      [&](const std::string& note) -> std::pair<int, std::string> {
    int calls = 0;
    for (int attempt = 0; attempt < 3; ++attempt) {
      ++calls;
      auto started =
          rt->start("acme.order-notes", {{"orderId", "R-1"}, {"note", note}},
                    with_hook("order:R-1"));
      if (started) {
        return {calls, started->id};
      }
      EXPECT_EQ(started.error().code, errc::hook_conflict);
      ++calls;
      auto resumed = rt->resume_hook("order:R-1", {{"note", note}});
      if (resumed) {
        return {calls, *resumed};
      }
      EXPECT_EQ(resumed.error().code, errc::hook_not_found);
    }
    return {calls, ""};
  };
  auto [first_calls, first_run] = start_or_route("one");
  auto [second_calls, second_run] = start_or_route("two");
  EXPECT_EQ(first_calls, 1);
  EXPECT_LE(second_calls, 2);
  EXPECT_EQ(second_run, first_run);
  ASSERT_TRUE(
      rt->resume_hook("order:R-1", {{"note", "three"}, {"done", true}}).ok());
  auto done = rt->wait(first_run, wait_max);
  EXPECT_EQ(done->output["notes"], json::array({"one", "two", "three"}));
}

}  // namespace
}  // namespace durin

namespace durin {
namespace {

// Claims one token three times with different retentions.
flow<json> extend_retention(context& ctx, json input) {
  auto first = ctx.create_hook<json>(
      {.token = input.at("token"), .min_retention = "1h"});
  co_await first.conflict();
  auto longer = ctx.create_hook<json>(
      {.token = input.at("token"), .min_retention = "3h"});
  co_await longer.conflict();
  auto shorter = ctx.create_hook<json>(
      {.token = input.at("token"), .min_retention = "10m"});
  co_await shorter.conflict();
  co_return json();
}

TEST_F(HookTest, ALaterCreateHookExtendsARetentionAndNeverShortensIt) {
  flows_.flow("extend-retention", extend_retention);
  auto rt = open();
  auto run = rt->start("extend-retention", {{"token", "order:X"}});
  ASSERT_TRUE(run.ok());
  ASSERT_EQ(rt->wait(run->id, wait_max)->status, run_status::completed);
  ASSERT_TRUE(eventually([&] {
    auto hook = rt->get_hook_by_token("order:X");
    return hook && hook->state == "retained";
  }));
  EXPECT_EQ(rt->get_hook_by_token("order:X")->retain_until_ms,
            clock_->now_ms() + 3 * 3'600'000);
}

}  // namespace
}  // namespace durin
