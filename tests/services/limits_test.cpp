// Goal: the limits of issue 12 (items 7, 8, 10) on a real runtime with a
// real RocksDB in a temp dir: a run's history has an event and a byte limit
// and a run reaching either fails clearly (history-limit-exceeded, durable
// across a restart); durations and due times beyond durin's documented
// maxima are refused as invalid-argument wherever they enter, before any
// timer is armed; retries stop (the default policy's 4 attempts, the cap of
// 1000, the history limit); a page of runs stops at its byte cap. Limits
// are set small so that reaching them takes milliseconds.
#include <gtest/gtest.h>

#include <thread>

#include "bin/example_flows.hpp"
#include "durin/durin.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin {
namespace {

using namespace std::chrono_literals;
using testing::eventually;

constexpr auto wait_max = std::chrono::milliseconds(20'000);

class LimitsTest : public ::testing::Test {
 protected:
  // A runtime on the system clock unless `clock` is given.
  std::unique_ptr<runtime> open(std::uint64_t events_max = 50'000,
                                std::uint64_t bytes_max = 50ULL << 20,
                                std::shared_ptr<durin::clock> clock = nullptr) {
    runtime_options options;
    options.data_dir = dir_.path();
    options.step_threads = 2;
    options.clock = std::move(clock);
    options.history_events_max = events_max;
    options.history_bytes_max = bytes_max;
    auto opened = runtime::open(options, flows_);
    EXPECT_TRUE(opened.ok()) << (opened ? "" : opened.error().to_string());
    return opened ? std::move(*opened) : nullptr;
  }

  static std::size_t count(const std::vector<history_event>& events,
                           std::string_view kind) {
    std::size_t n = 0;
    for (const auto& event : events) {
      n += event.kind == kind ? 1 : 0;
    }
    return n;
  }

  // The run failed for its history limit: its record and its last event
  // say so, naming the limit.
  static void expect_history_limit_failure(runtime& rt, const std::string& id,
                                           std::string_view limit_name) {
    auto done = rt.wait(id, wait_max);
    ASSERT_TRUE(done.ok()) << done.error().to_string();
    EXPECT_EQ(done->status, run_status::failed);
    ASSERT_TRUE(done->error.has_value());
    EXPECT_EQ(done->error->code, "history-limit-exceeded");
    EXPECT_NE(done->error->message.find(limit_name), std::string::npos)
        << done->error->message;
    auto events = rt.history(id);
    ASSERT_TRUE(events.ok());
    ASSERT_FALSE(events->empty());
    const auto& last = events->back();
    EXPECT_EQ(last.kind, "run-failed");
    EXPECT_EQ(last.detail["error"]["code"], "history-limit-exceeded");
    EXPECT_EQ(count(*events, "run-failed"), 1u);
  }

  testing::temp_dir dir_;
  registry flows_;
};

flow<json> endless_steps(context& ctx, json) {
  for (int i = 0;; ++i) {
    co_await ctx.step("tick", [i] { return i; });
  }
}

TEST_F(LimitsTest, ARunReachingItsHistoryLimitFailsClearly) {
  flows_.flow("endless", endless_steps);
  std::string id;
  {
    auto rt = open(20);
    auto run = rt->start("endless", json());
    ASSERT_TRUE(run.ok());
    id = run->id;
    expect_history_limit_failure(*rt, id, "20 events (history_events_max)");
    auto events = rt->history(id);
    // run-started, 18 steps, and the failure in the last slot: the limit
    // holds exactly.
    EXPECT_EQ(events->size(), 20u);
    EXPECT_EQ(count(*events, "step-completed"), 18u);
    // Its actor leaves once the end is durable.
    EXPECT_TRUE(
        eventually([&] { return rt->active_run_actors() == 0; }, wait_max));
  }
  // Durable: after a restart the run is still failed, nothing more ran.
  auto rt = open(20);
  auto again = rt->get(id);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->status, run_status::failed);
  EXPECT_EQ(again->error->code, "history-limit-exceeded");
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(rt->history(id)->size(), 20u);
}

flow<json> read_hook_forever(context& ctx, json) {
  auto inbox = ctx.create_hook<json>({.token = "big-payloads"});
  std::size_t read = 0;
  while (auto payload = co_await inbox.next()) {
    ++read;
  }
  co_return json(read);
}

// Limits apply to what a run writes from now: one that already holds more
// than a lowered limit fails at its next write, and only then.
TEST_F(LimitsTest, ARunAlreadyBeyondALoweredLimitFailsAtItsNextWrite) {
  flows_.flow("reader", read_hook_forever);
  std::string id;
  {
    auto rt = open();
    auto run = rt->start("reader", json());
    ASSERT_TRUE(run.ok());
    id = run->id;
    ASSERT_TRUE(eventually(
        [&] { return rt->resume_hook("big-payloads", json(0)).ok(); },
        wait_max));
    for (int i = 1; i < 6; ++i) {
      ASSERT_TRUE(rt->resume_hook("big-payloads", json(i)).ok());
    }
    ASSERT_TRUE(
        eventually([&] { return count(*rt->history(id), "hook-payload") == 6; },
                   wait_max));
  }
  auto rt = open(4);
  // Recovered and waiting on its hook: nothing written, nothing failed.
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(rt->get(id)->status, run_status::waiting);
  ASSERT_TRUE(rt->resume_hook("big-payloads", json(6)).ok());
  expect_history_limit_failure(*rt, id, "4 events (history_events_max)");
  EXPECT_EQ(count(*rt->history(id), "hook-payload"), 6u);
}

TEST_F(LimitsTest, ARunReachingItsHistoryByteLimitFailsClearly) {
  flows_.flow("reader", read_hook_forever);
  constexpr std::uint64_t bytes_max = 1ULL << 20;
  auto rt = open(50'000, bytes_max);
  auto run = rt->start("reader", json());
  ASSERT_TRUE(run.ok());
  json big = std::string(100'000, 'x');
  ASSERT_TRUE(eventually(
      [&] { return rt->resume_hook("big-payloads", big).ok(); }, wait_max));
  // 100 KB payloads: the run fails after about ten; later resumes find no
  // owner.
  bool refused = false;
  for (int i = 0; i < 40 && !refused; ++i) {
    auto resumed = rt->resume_hook("big-payloads", big);
    if (!resumed) {
      EXPECT_EQ(resumed.error().code, errc::hook_not_found);
      refused = true;
    }
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_TRUE(refused);
  expect_history_limit_failure(*rt, run->id,
                               "1048576 bytes (history_bytes_max)");
  auto events = rt->history(run->id);
  auto payloads = count(*events, "hook-payload");
  EXPECT_GE(payloads, 8u);
  EXPECT_LE(payloads, 10u);
  EXPECT_NE(events->back().detail["error"]["message"].get<std::string>().find(
                "at hook-payload"),
            std::string::npos);
}

TEST_F(LimitsTest, ACompletionWhoseOutputDoesNotFitFailsTheRun) {
  flows_.flow("huge-output", [](context&, json) -> flow<json> {
    co_return json(std::string(20'000, 'y'));
  });
  auto rt = open(50'000, 16'384);
  auto run = rt->start("huge-output", json());
  ASSERT_TRUE(run.ok());
  expect_history_limit_failure(*rt, run->id, "at run-completed");
  EXPECT_TRUE(rt->get(run->id)->output.is_null());
}

// Issue 12 item 10: whatever the policy, a run that keeps retrying stops at
// its history limit.
TEST_F(LimitsTest, RetriesThatReachTheHistoryLimitFailTheRun) {
  flows_.flow("always-retrying", [](context& ctx, json) -> flow<json> {
    retry_policy patient;
    patient.max_attempts = limits::retry_attempts_max;
    patient.initial_backoff = 0ms;
    patient.max_backoff = 1ms;
    co_return co_await ctx.step(step_options("flaky", patient), []() -> json {
      throw retryable_error("not yet", 0ms);
    });
  });
  auto rt = open(60);
  auto run = rt->start("always-retrying", json());
  ASSERT_TRUE(run.ok());
  expect_history_limit_failure(*rt, run->id, "60 events");
  auto events = rt->history(run->id);
  EXPECT_EQ(count(*events, "step-attempt-failed"), 58u);
}

// The default policy: 4 attempts in all, then the step fails for good (the
// run with it). The backoffs (1 s, 2 s, 4 s) pass on a manual clock.
TEST_F(LimitsTest, TheDefaultRetryPolicyStopsRetrying) {
  EXPECT_EQ(retry_policy{}.max_attempts, 4u);
  flows_.flow("always-failing", [](context& ctx, json) -> flow<json> {
    co_return co_await ctx.step("broken", []() -> json {
      throw std::runtime_error("the service is down");
    });
  });
  auto clock = std::make_shared<manual_clock>(1'800'000'000'000);
  auto rt = open(50'000, 50ULL << 20, clock);
  auto run = rt->start("always-failing", json());
  ASSERT_TRUE(run.ok());
  ASSERT_TRUE(eventually(
      [&] {
        clock->advance_ms(5000);
        auto now = rt->get(run->id);
        return now && now->status == run_status::failed;
      },
      wait_max));
  auto done = rt->get(run->id);
  EXPECT_EQ(done->error->code, "step-failed");
  EXPECT_NE(done->error->message.find("after 4 attempts"), std::string::npos)
      << done->error->message;
  auto events = rt->history(run->id);
  EXPECT_EQ(count(*events, "step-attempt-failed"), 3u);
  EXPECT_EQ(count(*events, "step-failed"), 1u);
}

// Issue 12 item 10: `acme.flaky {"failures": 1e9}` asked for a billion
// attempts and retried for ever. A policy beyond the cap is refused.
TEST_F(LimitsTest, ARetryPolicyBeyondItsCapIsRefused) {
  examples::register_examples(flows_);
  auto rt = open();
  auto run = rt->start("acme.flaky", json{{"failures", 1e9}});
  ASSERT_TRUE(run.ok());
  auto done = rt->wait(run->id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->status, run_status::failed);
  EXPECT_EQ(done->error->code, "invalid-argument");
  EXPECT_NE(done->error->message.find("max_attempts is 1000000001; it must "
                                      "be 1 to 1000"),
            std::string::npos)
      << done->error->message;
  auto events = rt->history(run->id);
  EXPECT_EQ(count(*events, "step-attempt-failed"), 0u);
  // Registered steps are checked when registered.
  retry_policy greedy;
  greedy.max_attempts = 5000;
  registry flows;
  EXPECT_THROW(flows.step(
                   "greedy", [] { return 1; }, greedy),
               invalid_argument_error);
  step_timeouts negative;
  negative.heartbeat = -1ms;
  EXPECT_THROW(
      flows.step(
          "negative", [] { return 1; }, step_config{.timeouts = negative}),
      invalid_argument_error);
}

// Every way a duration enters a flow, out of range, and the refusal each
// gets; the flow catches them, so it also shows nothing was recorded.
flow<json> bad_durations(context& ctx, json) {
  json refused = json::array();
  auto note = [&refused](const std::exception& e) {
    refused.push_back(std::string(e.what()));
  };
  try {
    (void)ctx.sleep(std::chrono::milliseconds(INT64_MAX));
  } catch (const invalid_argument_error& e) {
    note(e);
  }
  // The maximum itself is fine (not awaited: it would wait 100 years).
  (void)ctx.sleep(std::chrono::milliseconds(limits::duration_ms_max));
  try {
    (void)ctx.sleep_until(std::chrono::system_clock::time_point(-1ms));
  } catch (const invalid_argument_error& e) {
    note(e);
  }
  try {
    (void)ctx.sleep_until(std::chrono::system_clock::time_point(
        std::chrono::milliseconds(limits::time_ms_max + 1)));
  } catch (const invalid_argument_error& e) {
    note(e);
  }
  step_options slow_backoff("slow-backoff");
  slow_backoff.retry.initial_backoff =
      std::chrono::milliseconds(limits::duration_ms_max + 1);
  step_options negative_timeout("negative-timeout");
  negative_timeout.timeouts.start_to_close = -5ms;
  step_options no_attempts("no-attempts");
  no_attempts.retry.max_attempts = 0;
  for (const auto& options : {slow_backoff, negative_timeout, no_attempts}) {
    try {
      co_await ctx.step(options, [] { return 1; });
    } catch (const invalid_argument_error& e) {
      note(e);
    }
  }
  try {
    (void)ctx.create_hook({.token = "kept", .min_retention = json(1e300)});
  } catch (const invalid_argument_error& e) {
    note(e);
  }
  // A step body asking for a retry after INT64_MAX ms fails for good.
  try {
    co_await ctx.step("retry-never", []() -> json {
      throw retryable_error("later", std::chrono::milliseconds(INT64_MAX));
    });
  } catch (const step_failed_error& e) {
    refused.push_back(e.code() + ": " + e.what());
  }
  co_return refused;
}

TEST_F(LimitsTest, DurationsBeyondTheMaximumAreRefused) {
  flows_.flow("bad-durations", bad_durations);
  auto rt = open();
  auto run = rt->start("bad-durations", json());
  ASSERT_TRUE(run.ok());
  auto done = rt->wait(run->id, wait_max);
  ASSERT_TRUE(done.ok());
  ASSERT_EQ(done->status, run_status::completed)
      << (done->error ? done->error->message : "");
  const auto& refused = done->output;
  ASSERT_EQ(refused.size(), 8u) << refused.dump(2);
  auto says = [&](std::size_t i, std::string_view text) {
    auto message = refused[i].get<std::string>();
    EXPECT_NE(message.find(text), std::string::npos) << message;
  };
  says(0,
       "ctx.sleep: a duration of 9223372036854775807 ms is beyond the "
       "maximum of 3153600000000 ms");
  says(1, "ctx.sleep_until: a time of -1 ms");
  says(2, "outside 0 to 253402300799999");
  says(3, "step 'slow-backoff': retry_policy.initial_backoff");
  says(4,
       "step 'negative-timeout': step_timeouts.start_to_close: a "
       "duration of -5 ms is negative");
  says(5, "step 'no-attempts': retry_policy.max_attempts is 0");
  says(6, "minRetention exceeds the cap of 30 days");
  says(7, "invalid-argument: ");
  says(7, "retry_after: a duration of 9223372036854775807 ms");
  // Nothing refused was recorded: no timer, no hook, and of the steps only
  // the one whose body ran.
  auto events = rt->history(run->id);
  EXPECT_EQ(count(*events, "timer-armed"), 0u);
  EXPECT_EQ(count(*events, "hook-created"), 0u);
  EXPECT_EQ(count(*events, "step-failed"), 1u);
}

// Issue 12 item 8: acme.sleep {"ms": INT64_MAX} armed a timer at a negative
// time, which fired at once. Uncaught, the refusal fails the run clearly.
// The same given as a float beyond every integer is saturated, not wrapped
// into a negative sleep that ended at once with "sleptMs": INT64_MIN.
TEST_F(LimitsTest, ASleepBeyondTheMaximumFailsTheRunAsInvalidArgument) {
  examples::register_examples(flows_);
  auto rt = open();
  for (const json& ms : {json(INT64_MAX), json(1e300)}) {
    auto run = rt->start("acme.sleep", json{{"ms", ms}});
    ASSERT_TRUE(run.ok());
    auto done = rt->wait(run->id, wait_max);
    ASSERT_TRUE(done.ok());
    EXPECT_EQ(done->status, run_status::failed) << ms;
    ASSERT_TRUE(done->error.has_value()) << ms;
    EXPECT_EQ(done->error->code, "invalid-argument");
    EXPECT_EQ(count(*rt->history(run->id), "timer-armed"), 0u);
  }
}

TEST_F(LimitsTest, RuntimeOptionsBeyondTheirLimitsAreRefused) {
  auto refused = [&](auto change) {
    runtime_options options;
    options.data_dir = dir_.path();
    change(options);
    auto opened = runtime::open(options, flows_);
    return !opened.ok() && opened.error().code == errc::invalid_argument;
  };
  EXPECT_TRUE(refused([](runtime_options& o) {
    o.retention_max = std::chrono::milliseconds(limits::duration_ms_max + 1);
  }));
  EXPECT_TRUE(refused([](runtime_options& o) { o.command_retention = -1ms; }));
  EXPECT_TRUE(refused([](runtime_options& o) { o.passivate_after = -1ms; }));
  EXPECT_TRUE(refused([](runtime_options& o) { o.history_events_max = 1; }));
  EXPECT_TRUE(refused([](runtime_options& o) { o.history_bytes_max = 100; }));
  EXPECT_FALSE(refused([](runtime_options&) {}));
}

// Issue 12 item 7: a page of runs with huge inputs stops early and gives a
// cursor; following the cursors lists every run once.
TEST_F(LimitsTest, APageOfRunsStopsAtItsByteCapAndGivesACursor) {
  flows_.flow("echo", [](context&, json input) -> flow<json> {
    co_return json(input.size());
  });
  auto rt = open();
  std::set<std::string> started;
  for (int i = 0; i < 10; ++i) {
    auto run =
        rt->start("echo", json{{"i", i}, {"pad", std::string(100'000, 'p')}});
    ASSERT_TRUE(run.ok());
    started.insert(run->id);
  }
  run_filter filter;
  filter.page_bytes_max = 250'000;
  std::set<std::string> listed;
  int pages = 0;
  for (;;) {
    auto page = rt->list(filter);
    ASSERT_TRUE(page.ok()) << page.error().to_string();
    ++pages;
    // The third run of a page brings it past 250,000 bytes: it ends there.
    EXPECT_LE(page->runs.size(), 3u);
    EXPECT_GE(page->runs.size(), 1u);
    for (const auto& run : page->runs) {
      EXPECT_TRUE(listed.insert(run.id).second) << "listed twice: " << run.id;
    }
    if (page->next_cursor.empty()) {
      break;
    }
    filter.cursor = page->next_cursor;
  }
  EXPECT_EQ(listed, started);
  EXPECT_EQ(pages, 4);
  filter.page_bytes_max = 10;
  EXPECT_EQ(rt->list(filter).error().code, errc::invalid_argument);
}

// A command id keys a start, a cancel or a terminate: one length rule for
// all three (services::command_id_problem), and a refusal changes nothing.
TEST_F(LimitsTest, ACommandIdIsAtMostItsLimitOnAStartACancelAndATerminate) {
  flows_.flow("waits", [](context& ctx, json) -> flow<json> {
    co_await ctx.sleep(std::chrono::hours(1));
    co_return json();
  });
  auto rt = open();
  const std::string longest(limits::identity_bytes_max, 'c');
  const std::string too_long(limits::identity_bytes_max + 1, 'c');
  start_options refused_start;
  refused_start.command_id = too_long;
  auto refused = rt->start("waits", json(), refused_start);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::invalid_argument);
  EXPECT_NE(refused.error().message.find("a command id"), std::string::npos)
      << refused.error().message;
  start_options accepted;
  accepted.command_id = longest;
  auto run = rt->start("waits", json(), accepted);
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  cancel_options stop;
  stop.command_id = too_long;
  for (bool terminate : {false, true}) {
    auto answer =
        terminate ? rt->terminate(run->id, stop) : rt->cancel(run->id, stop);
    ASSERT_FALSE(answer.ok()) << terminate;
    EXPECT_EQ(answer.error().code, errc::invalid_argument) << terminate;
  }
  auto now = rt->get(run->id);
  ASSERT_TRUE(now.ok());
  EXPECT_FALSE(is_terminal(now->status)) << to_string(now->status);
  stop.command_id = longest;
  auto cancelled = rt->cancel(run->id, stop);
  ASSERT_TRUE(cancelled.ok()) << cancelled.error().to_string();
  EXPECT_EQ(cancelled->status, run_status::cancelled);
}

// A cursor is a run id a page gave: anything else (a typo, a cut-off id, a
// run id in lower case) is refused instead of listing an arbitrary slice.
TEST_F(LimitsTest, AListsCursorMustBeARunIdAPageGave) {
  flows_.flow("echo",
              [](context&, json input) -> flow<json> { co_return input; });
  auto rt = open();
  auto run = rt->start("echo", json(1));
  ASSERT_TRUE(run.ok());
  run_filter filter;
  for (const std::string& cursor :
       {std::string("garbage"), run->id.substr(0, run->id.size() - 1),
        run->id + "0", "RUN_" + run->id.substr(4),
        std::string("run_") + std::string(26, 'u'), std::string(300, 'x')}) {
    filter.cursor = cursor;
    auto page = rt->list(filter);
    ASSERT_FALSE(page.ok()) << cursor;
    EXPECT_EQ(page.error().code, errc::invalid_argument) << cursor;
  }
  filter.cursor = run->id;  // the run itself is not before its own id
  auto page = rt->list(filter);
  ASSERT_TRUE(page.ok()) << page.error().to_string();
  EXPECT_TRUE(page->runs.empty());
}

}  // namespace
}  // namespace durin
