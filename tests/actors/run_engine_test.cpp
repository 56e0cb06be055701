// Goal: the run engine's ordering rules, checked step by step without actors,
// threads or disk: the test plays the run actor, inspecting what the engine
// asks for (writes, dispatches, timers) and feeding back commit and step
// outcomes in exactly the order it wants, including late and duplicate ones.
#include "actors/run_engine.hpp"

#include <gtest/gtest.h>

namespace durin::actors {
namespace {

using persistence::event_kind;
using persistence::event_record;

class RunEngineTest : public ::testing::Test {
 protected:
  RunEngineTest() : clock_(1'000'000) {}

  std::unique_ptr<run_engine> make(std::string flow,
                                   std::vector<event_record> history = {}) {
    persistence::run_record record;
    record.id = "run_TEST";
    record.flow = std::move(flow);
    record.status = history.empty() ? run_status::pending : run_status::running;
    record.input = encode_payload(json::object());
    engine_environment env{&flows_, &clock_, std::chrono::milliseconds(1000)};
    return std::make_unique<run_engine>(env, record, std::move(history));
  }

  // Acknowledges the engine's pending write and returns what it contained.
  static commit_plan commit(run_engine& engine, engine_output& out) {
    EXPECT_TRUE(out.commit.has_value());
    auto plan = std::move(*out.commit);
    engine.on_committed({});
    return plan;
  }

  static std::vector<event_kind> kinds(const commit_plan& plan) {
    std::vector<event_kind> out;
    for (auto& [sequence, event] : plan.events) {
      out.push_back(event.kind);
    }
    return out;
  }

  registry flows_;
  manual_clock clock_;
};

TEST_F(RunEngineTest, StepIsDispatchedOnlyAfterEarlierValuesAreDurable) {
  flows_.flow("f", [](context& ctx, json) -> flow<json> {
    auto t = ctx.now();
    (void)t;
    co_return co_await ctx.step("s", [] { return 1; });
  });
  auto engine = make("f");
  engine->start();
  auto out = engine->take_output();
  EXPECT_TRUE(out.dispatches.empty()) << "dispatched before now() was durable";
  auto plan = commit(*engine, out);
  EXPECT_EQ(kinds(plan), (std::vector<event_kind>{event_kind::run_started,
                                                  event_kind::value_recorded}));
  out = engine->take_output();
  ASSERT_EQ(out.dispatches.size(), 1u);
  EXPECT_EQ(out.dispatches[0].info.step_id, "run_TEST/2");
  EXPECT_EQ(out.dispatches[0].info.attempt, 1u);
}

TEST_F(RunEngineTest, LateAndDuplicateStepReportsRecordNothing) {
  flows_.flow("f", [](context& ctx, json) -> flow<json> {
    co_return co_await ctx.step("s", [] { return 1; });
  });
  auto engine = make("f");
  engine->start();
  auto out = engine->take_output();
  ASSERT_EQ(out.dispatches.size(), 1u);
  auto attempt_id = out.dispatches[0].info.attempt_id;
  step_outcome ok;
  ok.value = 41;
  engine->on_step_outcome(1, "att_someone_else", ok);
  EXPECT_FALSE(engine->take_output().commit.has_value());
  engine->on_step_outcome(1, attempt_id, ok);
  out = engine->take_output();
  auto plan = commit(*engine, out);
  ASSERT_EQ(plan.events.size(), 2u);  // run-started rides along
  EXPECT_EQ(plan.events[1].second.kind, event_kind::step_completed);
  EXPECT_EQ(plan.events[1].second.attempt_id, attempt_id);
  ok.value = 99;
  engine->on_step_outcome(1, attempt_id, ok);  // a duplicate report
  out = engine->take_output();
  ASSERT_TRUE(out.commit.has_value());
  EXPECT_EQ(kinds(*out.commit),
            std::vector<event_kind>{event_kind::run_completed});
  EXPECT_EQ(decode_payload(out.commit->events[0].second.data), 41);
}

TEST_F(RunEngineTest, ReplayReturnsRecordedOutcomesWithoutDispatching) {
  int runs = 0;
  flows_.flow("f", [&runs](context& ctx, json) -> flow<json> {
    auto a = co_await ctx.step("a", [&runs] { return ++runs; });
    co_return a;
  });
  std::vector<event_record> history = {{.kind = event_kind::run_started},
                                       {.kind = event_kind::step_completed,
                                        .call = 1,
                                        .name = "a",
                                        .attempt = 1,
                                        .attempt_id = "att_1",
                                        .data = encode_payload(7)}};
  auto engine = make("f", history);
  engine->start();
  auto out = engine->take_output();
  EXPECT_TRUE(out.dispatches.empty());
  auto plan = commit(*engine, out);
  EXPECT_EQ(kinds(plan), std::vector<event_kind>{event_kind::run_completed});
  EXPECT_EQ(plan.events[0].first, 3u) << "sequence continues the history";
  EXPECT_EQ(decode_payload(plan.events[0].second.data), 7);
  EXPECT_EQ(runs, 0);
  EXPECT_TRUE(engine->take_output().finished);
}

TEST_F(RunEngineTest, MismatchBlocksAndWritesNothing) {
  flows_.flow("f", [](context& ctx, json) -> flow<json> {
    co_await ctx.sleep(std::chrono::seconds(5));
    co_return 1;
  });
  std::vector<event_record> history = {{.kind = event_kind::run_started},
                                       {.kind = event_kind::step_completed,
                                        .call = 1,
                                        .name = "a",
                                        .data = encode_payload(1)}};
  auto engine = make("f", history);
  engine->start();
  auto out = engine->take_output();
  EXPECT_FALSE(out.commit.has_value());
  EXPECT_TRUE(out.dispatches.empty());
  EXPECT_TRUE(engine->blocked());
  EXPECT_EQ(engine->info().status, run_status::blocked);
  EXPECT_NE(engine->blocked_reason().find("step 'a'"), std::string::npos);
  EXPECT_NE(engine->blocked_reason().find("sleep"), std::string::npos);
}

TEST_F(RunEngineTest, FlowEndingBeforeRecordedCallsBlocks) {
  flows_.flow("f", [](context&, json) -> flow<json> { co_return 1; });
  std::vector<event_record> history = {{.kind = event_kind::run_started},
                                       {.kind = event_kind::value_recorded,
                                        .call = 1,
                                        .name = "now",
                                        .data = encode_payload(5)}};
  auto engine = make("f", history);
  engine->start();
  EXPECT_FALSE(engine->take_output().commit.has_value());
  EXPECT_TRUE(engine->blocked());
}

TEST_F(RunEngineTest, RetryWaitsForItsTimerAndKeepsTheStepId) {
  flows_.flow("f", [](context& ctx, json) -> flow<json> {
    retry_policy policy;
    policy.max_attempts = 2;
    co_return co_await ctx.step(step_options("s", policy), [] { return 1; });
  });
  auto engine = make("f");
  engine->start();
  auto out = engine->take_output();
  auto first = out.dispatches.at(0).info;
  step_outcome failed;
  failed.result = step_outcome::kind::retryable;
  failed.message = "busy";
  failed.retry_after_ms = 250;
  engine->on_step_outcome(1, first.attempt_id, failed);
  out = engine->take_output();
  auto plan = commit(*engine, out);
  ASSERT_EQ(plan.timer_puts.size(), 1u);
  EXPECT_EQ(plan.timer_puts[0].due_ms, 1'000'250);
  EXPECT_EQ(engine->info().status, run_status::waiting);
  out = engine->take_output();
  ASSERT_EQ(out.timers.size(), 1u) << "the timer is handed over once durable";
  EXPECT_TRUE(out.dispatches.empty());
  engine->on_timer(out.timers[0]);
  out = engine->take_output();
  ASSERT_EQ(out.dispatches.size(), 1u);
  EXPECT_EQ(out.dispatches[0].info.step_id, first.step_id);
  EXPECT_NE(out.dispatches[0].info.attempt_id, first.attempt_id);
  EXPECT_EQ(out.dispatches[0].info.attempt, 2u);
}

TEST_F(RunEngineTest, FailedWriteAsksForAReloadAndResumesNothing) {
  flows_.flow("f", [](context& ctx, json) -> flow<json> {
    co_return co_await ctx.step("s", [] { return 1; });
  });
  auto engine = make("f");
  engine->start();
  auto out = engine->take_output();
  step_outcome ok;
  ok.value = 1;
  engine->on_step_outcome(1, out.dispatches.at(0).info.attempt_id, ok);
  out = engine->take_output();
  ASSERT_TRUE(out.commit.has_value());
  engine->on_committed(make_error(errc::storage_error, "disk full"));
  EXPECT_TRUE(engine->must_reload());
  out = engine->take_output();
  EXPECT_FALSE(out.commit.has_value());
  EXPECT_FALSE(out.finished);
}

}  // namespace
}  // namespace durin::actors
