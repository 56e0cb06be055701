// Goal: every rule of the single-node runtime, proved end to end on a real
// RocksDB in a temporary directory, real actors and real threads. Restarts
// close the runtime and open a new one on the same directory; time-dependent
// rules use an injected manual clock rather than sleeping.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <set>

#include "bin/example_flows.hpp"
#include "durin/durin.hpp"
#include "persistence/keys.hpp"
#include "persistence/store.hpp"
#include "tests/support/shard_dirs.hpp"
#include "tests/support/temp_dir.hpp"

#include <rocksdb/db.h>

namespace durin {
namespace {

using namespace std::chrono_literals;
using testing::eventually;

constexpr auto wait_max = std::chrono::milliseconds(20'000);

retry_policy fast_retries(std::uint32_t attempts) {
  retry_policy policy;
  policy.max_attempts = attempts;
  policy.initial_backoff = 5ms;
  policy.max_backoff = 20ms;
  return policy;
}

class RuntimeTest : public ::testing::Test {
 protected:
  std::unique_ptr<runtime> open(const registry& flows,
                                std::shared_ptr<durin::clock> clock = nullptr,
                                std::chrono::milliseconds passivate_after =
                                    std::chrono::milliseconds(2000)) {
    runtime_options options;
    options.data_dir = dir_.path();
    options.step_threads = 4;
    options.clock = std::move(clock);
    options.passivate_after = passivate_after;
    auto opened = runtime::open(options, flows);
    EXPECT_TRUE(opened.ok()) << (opened ? "" : opened.error().to_string());
    return opened ? std::move(*opened) : nullptr;
  }

  static run_info run_to_end(runtime& rt, std::string_view flow, json input) {
    auto started = rt.start(flow, std::move(input));
    EXPECT_TRUE(started.ok()) << started.error().to_string();
    auto done = rt.wait(started->id, wait_max);
    EXPECT_TRUE(done.ok()) << done.error().to_string();
    return *done;
  }

  static std::vector<history_event> events_of(runtime& rt,
                                              const std::string& id,
                                              std::string_view kind = {}) {
    auto all = rt.history(id);
    EXPECT_TRUE(all.ok());
    std::vector<history_event> out;
    for (auto& event : *all) {
      if (kind.empty() || event.kind == kind) {
        out.push_back(event);
      }
    }
    return out;
  }

  static bool has_status(runtime& rt, const std::string& id,
                         run_status status) {
    auto now = rt.get(id);
    return now && now->status == status;
  }

  testing::temp_dir dir_;
};

TEST_F(RuntimeTest, ReviewOrderCompletesWithOneRecordPerStep) {
  registry flows;
  examples::register_examples(flows);
  auto rt = open(flows);
  auto done = run_to_end(*rt, "acme.review-order", {{"orderId", "A-100"}});
  ASSERT_EQ(done.status, run_status::completed);
  EXPECT_EQ(done.output["orderId"], "A-100");
  EXPECT_TRUE(done.output.contains("decision"));
  EXPECT_TRUE(done.output["score"].is_number_integer());
  EXPECT_GT(done.started_at_ms, 0);
  EXPECT_GE(done.completed_at_ms, done.started_at_ms);
  auto history = events_of(*rt, done.id);
  std::vector<std::string> kinds;
  for (std::size_t i = 0; i < history.size(); ++i) {
    EXPECT_EQ(history[i].sequence, i + 1);
    kinds.push_back(history[i].kind);
  }
  EXPECT_EQ(kinds,
            (std::vector<std::string>{"run-started", "step-completed",
                                      "step-completed", "run-completed"}));
  EXPECT_EQ(history[1].detail["name"], "score-order");
  EXPECT_EQ(history[1].detail["value"], done.output["score"]);
}

TEST_F(RuntimeTest, RetriesKeepStepIdAndChangeAttemptId) {
  std::mutex mutex;
  std::vector<step_info> attempts;
  registry flows;
  flows.flow("retrying", [&](context& ctx, json) -> flow<json> {
    co_return co_await ctx.step(
        step_options("charge", fast_retries(5)), [&]() -> json {
          std::lock_guard<std::mutex> lock(mutex);
          attempts.push_back(step_metadata());
          if (attempts.size() < 3) {
            throw std::runtime_error("payment gateway timed out");
          }
          return step_metadata().step_id;
        });
  });
  auto rt = open(flows);
  auto done = run_to_end(*rt, "retrying", json::object());
  ASSERT_EQ(done.status, run_status::completed);
  std::lock_guard<std::mutex> lock(mutex);
  ASSERT_EQ(attempts.size(), 3u);
  std::set<std::string> attempt_ids;
  for (std::size_t i = 0; i < attempts.size(); ++i) {
    EXPECT_EQ(attempts[i].step_id, attempts[0].step_id);
    EXPECT_EQ(attempts[i].attempt, i + 1);
    EXPECT_EQ(attempts[i].run_id, done.id);
    attempt_ids.insert(attempts[i].attempt_id);
  }
  EXPECT_EQ(attempt_ids.size(), 3u);
  EXPECT_EQ(done.output, attempts[0].step_id);
  EXPECT_EQ(events_of(*rt, done.id, "step-attempt-failed").size(), 2u);
  auto completed = events_of(*rt, done.id, "step-completed");
  ASSERT_EQ(completed.size(), 1u);
  EXPECT_EQ(completed[0].detail["attemptId"], attempts[2].attempt_id);
  EXPECT_EQ(completed[0].detail["stepId"], attempts[0].step_id);
}

TEST_F(RuntimeTest, FatalErrorStopsRetries) {
  std::atomic<int> runs{0};
  registry flows;
  flows.flow("fatal", [&](context& ctx, json) -> flow<json> {
    co_await ctx.step(step_options("validate", fast_retries(5)), [&]() -> int {
      ++runs;
      throw fatal_error("card number is invalid");
    });
    co_return json();
  });
  auto rt = open(flows);
  auto done = run_to_end(*rt, "fatal", json::object());
  EXPECT_EQ(runs.load(), 1);
  ASSERT_EQ(done.status, run_status::failed);
  ASSERT_TRUE(done.error.has_value());
  EXPECT_EQ(done.error->code, "step-failed");
  EXPECT_NE(done.error->message.find("card number is invalid"),
            std::string::npos);
  EXPECT_EQ(events_of(*rt, done.id, "step-failed").size(), 1u);
}

TEST_F(RuntimeTest, ExhaustedAttemptsFailTheStepAndTheFlowMayCatchIt) {
  std::atomic<int> runs{0};
  registry flows;
  flows.flow("catching", [&](context& ctx, json) -> flow<json> {
    try {
      co_await ctx.step(step_options("always-fails", fast_retries(3)),
                        [&]() -> int {
                          ++runs;
                          throw std::runtime_error("down");
                        });
    } catch (const step_failed_error& e) {
      co_return json{{"caught", e.code()}, {"attempts", e.attempts()}};
    }
    co_return json();
  });
  auto rt = open(flows);
  auto done = run_to_end(*rt, "catching", json::object());
  ASSERT_EQ(done.status, run_status::completed);
  EXPECT_EQ(runs.load(), 3);
  EXPECT_EQ(done.output["caught"], "step-failed");
  EXPECT_EQ(done.output["attempts"], 3);
}

TEST_F(RuntimeTest, RetryAfterFromTheStepSetsTheDelay) {
  std::atomic<int> runs{0};
  auto clock = std::make_shared<manual_clock>(1'000'000);
  registry flows;
  flows.flow("later", [&](context& ctx, json) -> flow<json> {
    co_return co_await ctx.step(step_options("rate-limited", fast_retries(2)),
                                [&]() -> int {
                                  if (++runs == 1) {
                                    throw retryable_error("429", 60'000ms);
                                  }
                                  return 7;
                                });
  });
  auto rt = open(flows, clock);
  auto started = rt->start("later", json::object());
  ASSERT_TRUE(started.ok());
  ASSERT_TRUE(eventually(
      [&] { return has_status(*rt, started->id, run_status::waiting); }));
  auto failed = events_of(*rt, started->id, "step-attempt-failed");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].detail["dueAtMs"], 1'000'000 + 60'000);
  clock->advance_ms(59'000);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(runs.load(), 1);
  clock->advance_ms(1'000);
  auto done = rt->wait(started->id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->output, 7);
  EXPECT_EQ(runs.load(), 2);
}

TEST_F(RuntimeTest, SleepSurvivesRestart) {
  registry flows;
  examples::register_examples(flows);
  std::string id;
  auto began = std::chrono::steady_clock::now();
  {
    auto rt = open(flows);
    auto started = rt->start("acme.sleep", {{"ms", 600}});
    ASSERT_TRUE(started.ok());
    id = started->id;
    ASSERT_TRUE(
        eventually([&] { return has_status(*rt, id, run_status::waiting); }));
  }
  auto rt = open(flows);
  auto done = rt->wait(id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->status, run_status::completed);
  EXPECT_EQ(done->output["sleptMs"], 600);
  EXPECT_GE(std::chrono::steady_clock::now() - began, 600ms);
  EXPECT_EQ(events_of(*rt, id, "timer-armed").size(), 1u);
  EXPECT_EQ(events_of(*rt, id, "timer-fired").size(), 1u);
}

TEST_F(RuntimeTest, LongSleepPassivatesTheRunActorAndTheTimerReactivatesIt) {
  auto clock = std::make_shared<manual_clock>(5'000'000);
  registry flows;
  examples::register_examples(flows);
  auto rt = open(flows, clock, 100ms);
  auto started = rt->start("acme.sleep", {{"ms", 3'600'000}});
  ASSERT_TRUE(started.ok());
  ASSERT_TRUE(eventually([&] {
    return has_status(*rt, started->id, run_status::waiting) &&
           rt->active_run_actors() == 0;
  }));
  clock->advance_ms(3'600'000);
  auto done = rt->wait(started->id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->status, run_status::completed);
}

TEST_F(RuntimeTest, CancelEndsAWaitingRunAndCannotBeRepeated) {
  auto clock = std::make_shared<manual_clock>(5'000'000);
  registry flows;
  examples::register_examples(flows);
  auto rt = open(flows, clock, 100ms);
  auto started = rt->start("acme.sleep", {{"ms", 3'600'000}});
  ASSERT_TRUE(started.ok());
  ASSERT_TRUE(eventually(
      [&] { return has_status(*rt, started->id, run_status::waiting); }));
  auto cancelled = rt->cancel(started->id, "customer withdrew");
  ASSERT_TRUE(cancelled.ok()) << cancelled.error().to_string();
  EXPECT_EQ(cancelled->status, run_status::cancelled);
  ASSERT_TRUE(cancelled->error.has_value());
  EXPECT_EQ(cancelled->error->code, "cancelled");
  EXPECT_EQ(cancelled->error->message, "customer withdrew");
  auto again = rt->cancel(started->id);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, errc::run_finished);
  clock->advance_ms(3'600'000);
  std::this_thread::sleep_for(100ms);
  auto history = events_of(*rt, started->id);
  EXPECT_EQ(history.back().kind, "run-cancelled");
  EXPECT_TRUE(events_of(*rt, started->id, "timer-fired").empty());
  EXPECT_EQ(rt->get(started->id)->status, run_status::cancelled);
}

TEST_F(RuntimeTest, CancelIgnoresALateStepResult) {
  std::promise<void> release;
  auto released = release.get_future().share();
  std::atomic<bool> entered{false};
  registry flows;
  flows.flow("slow", [&](context& ctx, json) -> flow<json> {
    co_return co_await ctx.step("slow-step", [&]() -> int {
      entered = true;
      released.wait();
      return 1;
    });
  });
  auto rt = open(flows);
  auto started = rt->start("slow", json::object());
  ASSERT_TRUE(started.ok());
  ASSERT_TRUE(eventually([&] { return entered.load(); }));
  auto cancelled = rt->cancel(started->id);
  ASSERT_TRUE(cancelled.ok());
  release.set_value();
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(rt->get(started->id)->status, run_status::cancelled);
  EXPECT_TRUE(events_of(*rt, started->id, "step-completed").empty());
}

TEST_F(RuntimeTest, SideEffectsAndNowReplayToTheRecordedValues) {
  std::atomic<int> produced{0};
  registry flows;
  flows.flow("values", [&](context& ctx, json) -> flow<json> {
    auto t = ctx.now();
    auto r = ctx.random();
    auto token = ctx.side_effect("token", [&] { return ++produced; });
    co_await ctx.sleep(500ms);
    co_return json{
        {"now", std::chrono::duration_cast<std::chrono::milliseconds>(
                    t.time_since_epoch())
                    .count()},
        {"random", r},
        {"token", token}};
  });
  std::string id;
  {
    auto rt = open(flows);
    auto started = rt->start("values", json::object());
    ASSERT_TRUE(started.ok());
    id = started->id;
    ASSERT_TRUE(
        eventually([&] { return has_status(*rt, id, run_status::waiting); }));
  }
  std::this_thread::sleep_for(20ms);
  auto rt = open(flows);
  auto done = rt->wait(id, wait_max);
  ASSERT_TRUE(done.ok());
  ASSERT_EQ(done->status, run_status::completed);
  auto values = events_of(*rt, id, "value-recorded");
  ASSERT_EQ(values.size(), 3u);
  EXPECT_EQ(done->output["now"], values[0].detail["value"]);
  EXPECT_EQ(done->output["random"], values[1].detail["value"]);
  EXPECT_EQ(done->output["token"], 1);
  EXPECT_EQ(produced.load(), 1) << "the replay ran the side effect again";
}

// The same flow name with different code: v1 steps "reserve" then sleeps,
// v2 calls "charge" first.
flow<json> booking_v1(context& ctx, json) {
  co_await ctx.step("reserve", [] { return 1; });
  co_await ctx.sleep(std::chrono::hours(1));
  co_return co_await ctx.step("confirm", [] { return 2; });
}
flow<json> booking_v2(context& ctx, json) {
  co_await ctx.step("charge", [] { return 1; });
  co_await ctx.sleep(std::chrono::hours(1));
  co_return co_await ctx.step("confirm", [] { return 2; });
}

TEST_F(RuntimeTest, ChangedFlowIsHeldAsBlockedAndResumesWhenCodeMatches) {
  auto clock = std::make_shared<manual_clock>(9'000'000);
  registry v1;
  v1.flow("booking", booking_v1);
  registry v2;
  v2.flow("booking", booking_v2);
  std::string id;
  std::size_t events_before = 0;
  {
    auto rt = open(v1, clock);
    auto started = rt->start("booking", json::object());
    ASSERT_TRUE(started.ok());
    id = started->id;
    ASSERT_TRUE(
        eventually([&] { return has_status(*rt, id, run_status::waiting); }));
    events_before = events_of(*rt, id).size();
  }
  clock->advance_ms(2 * 3'600'000);
  {
    auto rt = open(v2, clock);
    ASSERT_TRUE(
        eventually([&] { return has_status(*rt, id, run_status::blocked); }));
    auto held = rt->get(id);
    EXPECT_NE(held->blocked_reason.find("call 1"), std::string::npos)
        << held->blocked_reason;
    EXPECT_NE(held->blocked_reason.find("step 'reserve'"), std::string::npos)
        << held->blocked_reason;
    EXPECT_NE(held->blocked_reason.find("step 'charge'"), std::string::npos)
        << held->blocked_reason;
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(events_of(*rt, id).size(), events_before)
        << "a blocked run wrote to its history";
  }
  auto rt = open(v1, clock);
  auto done = rt->wait(id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->status, run_status::completed);
  EXPECT_EQ(done->output, 2);
}

TEST_F(RuntimeTest, BlockedRunCanBeCancelled) {
  registry v1;
  v1.flow("booking", booking_v1);
  registry v2;
  v2.flow("booking", booking_v2);
  auto clock = std::make_shared<manual_clock>(9'000'000);
  std::string id;
  {
    auto rt = open(v1, clock);
    auto started = rt->start("booking", json::object());
    id = started->id;
    ASSERT_TRUE(
        eventually([&] { return has_status(*rt, id, run_status::waiting); }));
  }
  clock->advance_ms(2 * 3'600'000);
  auto rt = open(v2, clock);
  ASSERT_TRUE(
      eventually([&] { return has_status(*rt, id, run_status::blocked); }));
  auto cancelled = rt->cancel(id, "operator");
  ASSERT_TRUE(cancelled.ok()) << cancelled.error().to_string();
  EXPECT_EQ(rt->get(id)->status, run_status::cancelled);
}

TEST_F(RuntimeTest, UnknownFlowIsRefusedAndAdmitsNothing) {
  registry flows;
  examples::register_examples(flows);
  auto rt = open(flows);
  auto started = rt->start("acme.nope", json::object());
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.error().code, errc::flow_not_found);
  EXPECT_NE(started.error().message.find("acme.nope"), std::string::npos);
  EXPECT_TRUE(rt->list({})->runs.empty());
}

struct order_input {
  std::string order_id;
  int quantity = 0;
};
void from_json(const json& in, order_input& out) {
  in.at("orderId").get_to(out.order_id);
  in.at("quantity").get_to(out.quantity);
}

TEST_F(RuntimeTest, InputThatDoesNotConvertIsRefused) {
  registry flows;
  flows.flow("typed", [](context&, order_input in) -> flow<int> {
    co_return in.quantity;
  });
  auto rt = open(flows);
  auto bad = rt->start("typed", {{"orderId", "A"}, {"quantity", "three"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, errc::invalid_input);
  EXPECT_TRUE(rt->list({})->runs.empty());
  auto good = run_to_end(*rt, "typed", {{"orderId", "A"}, {"quantity", 3}});
  EXPECT_EQ(good.output, 3);
}

TEST_F(RuntimeTest, RegisteredStepRunsByNameAndUnknownNameFailsTheRun) {
  registry flows;
  flows.step("add", [](int a, int b) { return a + b; });
  flows.flow("adder", [](context& ctx, json) -> flow<int> {
    co_return co_await ctx.step<int>("add", 2, 3);
  });
  flows.flow("typo", [](context& ctx, json) -> flow<int> {
    co_return co_await ctx.step<int>("ad", 2, 3);
  });
  auto rt = open(flows);
  EXPECT_EQ(run_to_end(*rt, "adder", json::object()).output, 5);
  auto failed = run_to_end(*rt, "typo", json::object());
  ASSERT_EQ(failed.status, run_status::failed);
  EXPECT_EQ(failed.error->code, "step-not-found");
  EXPECT_NE(failed.error->message.find("'ad'"), std::string::npos);
}

TEST_F(RuntimeTest, CorruptRecordFailsThatRequestAloneAndTheNodeServesOn) {
  registry flows;
  examples::register_examples(flows);
  std::string broken;
  std::string healthy;
  {
    auto rt = open(flows);
    broken = run_to_end(*rt, "acme.review-order", {{"orderId", "X"}}).id;
    healthy = run_to_end(*rt, "acme.review-order", {{"orderId", "Y"}}).id;
  }
  {
    auto store =
        persistence::store::open(testing::run_store_dir(dir_.path(), broken));
    ASSERT_TRUE(store.ok());
    auto& db = (*store)->raw_db();
    ASSERT_TRUE(db.Put(rocksdb::WriteOptions(),
                       (*store)->handle(persistence::family::runs),
                       persistence::keys::run(broken), "\x01garbage")
                    .ok());
  }
  auto rt = open(flows);
  auto bad = rt->get(broken);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, errc::corrupt_record);
  EXPECT_TRUE(rt->get(healthy).ok());
  auto fresh = run_to_end(*rt, "acme.review-order", {{"orderId", "Z"}});
  EXPECT_EQ(fresh.status, run_status::completed);
}

TEST_F(RuntimeTest, UnknownRunIdIsRunNotFound) {
  registry flows;
  auto rt = open(flows);
  auto missing = rt->get("run_00000000000000000000000000");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, errc::run_not_found);
  EXPECT_EQ(rt->cancel("run_x").error().code, errc::run_not_found);
  EXPECT_EQ(rt->history("").error().code, errc::invalid_argument);
}

TEST_F(RuntimeTest, StepMetadataOutsideAStepThrows) {
  EXPECT_THROW((void)step_metadata(), std::logic_error);
}

TEST_F(RuntimeTest, ListIsNewestFirstAndPaged) {
  registry flows;
  examples::register_examples(flows);
  auto rt = open(flows);
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(
        run_to_end(*rt, "acme.review-order", {{"orderId", std::to_string(i)}})
            .id);
    std::this_thread::sleep_for(2ms);  // distinct creation milliseconds
  }
  run_filter filter;
  filter.limit = 2;
  std::vector<std::string> seen;
  for (int page = 0; page < 5; ++page) {
    auto listed = rt->list(filter);
    ASSERT_TRUE(listed.ok());
    for (auto& run : listed->runs) {
      seen.push_back(run.id);
    }
    if (listed->next_cursor.empty()) {
      break;
    }
    filter.cursor = listed->next_cursor;
  }
  std::vector<std::string> expected(ids.rbegin(), ids.rend());
  EXPECT_EQ(seen, expected);
  run_filter bad;
  bad.limit = 0;
  EXPECT_EQ(rt->list(bad).error().code, errc::invalid_argument);
}

}  // namespace
}  // namespace durin

namespace durin {
namespace {

TEST_F(RuntimeTest, AnotherTenantsRunAnswersAsNotFound) {
  registry flows;
  examples::register_examples(flows);
  auto rt = open(flows);
  start_options acme;
  acme.tenant = "acme";
  auto started = rt->start("acme.review-order", {{"orderId", "T-1"}}, acme);
  ASSERT_TRUE(started.ok());
  ASSERT_TRUE(rt->wait(started->id, wait_max, "acme").ok());
  EXPECT_EQ(rt->get(started->id, "globex").error().code, errc::run_not_found);
  EXPECT_EQ(rt->get(started->id).error().code, errc::run_not_found);
  EXPECT_EQ(rt->history(started->id, "globex").error().code,
            errc::run_not_found);
  EXPECT_EQ(rt->cancel(started->id, "", "globex").error().code,
            errc::run_not_found);
  run_filter globex;
  globex.tenant = "globex";
  EXPECT_TRUE(rt->list(globex)->runs.empty());
  run_filter mine;
  mine.tenant = "acme";
  ASSERT_EQ(rt->list(mine)->runs.size(), 1u);
}

}  // namespace
}  // namespace durin
