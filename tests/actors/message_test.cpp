// Goal: every rule of messages, updates, queries and terminate (issue 17),
// one test per rule, on a real store, real run and token actors.
// Method: the example flows acme.inbox and acme.counter and a few flows
// below; the tests send, repeat, restart and passivate, and read the runs'
// histories to see what was (and was not) recorded.
#include <gtest/gtest.h>

#include <string>

#include "bin/example_flows.hpp"
#include "durin/durin.hpp"
#include "tests/support/runtime_fixture.hpp"

namespace durin {
namespace {

using namespace std::chrono_literals;
using testing::eventually;

constexpr auto wait_max = std::chrono::milliseconds(20'000);

// Waits for "go", then reads two notes: notes sent before "go" are kept.
flow<json> read_after_go(context& ctx, json) {
  co_await ctx.message<json>("go");
  json first = co_await ctx.message<json>("note");
  json second = co_await ctx.message<json>("note");
  co_return json::array({first, second});
}

// An update whose handling calls a step, then completes; ends on "stop".
flow<json> stepping_updates(context& ctx, json) {
  ctx.on_update("double", [](const json&) { return std::string(); });
  const std::vector<std::string> inputs = {"double", "stop"};
  for (;;) {
    inbound in = co_await ctx.receive(inputs);
    if (in.name == "stop") {
      break;
    }
    auto twice = [n = in.payload.value("n", 0)] { return n * 2; };
    int doubled = co_await ctx.step("double", twice);
    ctx.complete_update(in, json{{"doubled", doubled}});
  }
  co_return json{{"done", true}};
}

// Reads one update, waits for "go", then completes it.
flow<json> slow_update(context& ctx, json) {
  ctx.on_update("job", [](const json&) { return std::string(); });
  const std::vector<std::string> jobs = {"job"};
  inbound job = co_await ctx.receive(jobs);
  co_await ctx.message<json>("go");
  ctx.complete_update(job, json{{"finished", job.payload}});
  co_await ctx.message<json>("stop");
  co_return json();
}

// A query whose handler tries a durable call.
flow<json> sneaky_query(context& ctx, json) {
  ctx.on_query("now", [&ctx](const json&) {
    return json(ctx.now().time_since_epoch().count());
  });
  co_await ctx.message<json>("stop");
  co_return json();
}

class MessageTest : public testing::runtime_fixture {
 protected:
  void SetUp() override {
    examples::register_examples(flows_);
    flows_.flow("read-after-go", read_after_go);
    flows_.flow("stepping-updates", stepping_updates);
    flows_.flow("sneaky-query", sneaky_query);
    flows_.flow("slow-update", slow_update);
  }

  static std::string start(runtime& rt, const std::string& flow,
                           start_options options = {}) {
    auto run = rt.start(flow, json::object(), options);
    EXPECT_TRUE(run.ok()) << (run ? "" : run.error().to_string());
    if (!run) {
      return "";
    }
    // Its first turn is durable: what a test reads of its history is fixed.
    EXPECT_TRUE(rt.wait_settled(run->id, wait_max).ok());
    return run->id;
  }

  static json output_of(runtime& rt, const std::string& id) {
    auto done = rt.wait(id, wait_max);
    EXPECT_TRUE(done.ok()) << (done ? "" : done.error().to_string());
    if (!done) {
      return nullptr;
    }
    EXPECT_EQ(done->status, run_status::completed)
        << (done->error ? done->error->message : "");
    return done->output;
  }

  static message_options keyed(std::string key) {
    message_options options;
    options.idempotency_key = std::move(key);
    return options;
  }
};

TEST_F(MessageTest, MessagesAreReadInTheOrderRecorded) {
  auto rt = open();
  auto id = start(*rt, "acme.inbox");
  for (int n = 1; n <= 3; ++n) {
    auto sent = rt->send_message(id, "note", {{"n", n}, {"done", n == 3}});
    ASSERT_TRUE(sent.ok()) << sent.error().to_string();
    EXPECT_EQ(sent->run_id, id);
    EXPECT_FALSE(sent->started);
  }
  auto notes = output_of(*rt, id)["notes"];
  ASSERT_EQ(notes.size(), 3u);
  for (int n = 1; n <= 3; ++n) {
    EXPECT_EQ(notes[n - 1]["n"], n);
  }
}

TEST_F(MessageTest, MessagesSentBeforeTheFlowReadsThemAreKept) {
  auto rt = open();
  auto id = start(*rt, "read-after-go");
  ASSERT_TRUE(rt->send_message(id, "note", json("a")).ok());
  ASSERT_TRUE(rt->send_message(id, "note", json("b")).ok());
  ASSERT_TRUE(rt->send_message(id, "go", nullptr).ok());
  EXPECT_EQ(output_of(*rt, id), json::array({"a", "b"}));
}

TEST_F(MessageTest, ARepeatedKeyRecordsNothingAndAnswersAsTheFirst) {
  auto rt = open();
  auto id = start(*rt, "acme.inbox");
  auto first = rt->send_message(id, "note", {{"n", 1}}, keyed("k-1"));
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  auto again = rt->send_message(id, "note", {{"n", 1}}, keyed("k-1"));
  ASSERT_TRUE(again.ok()) << again.error().to_string();
  EXPECT_EQ(again->to_json(), first->to_json());
  EXPECT_EQ(count_events(*rt, id, "message-received"), 1u);
  ASSERT_TRUE(rt->send_message(id, "note", {{"done", true}}).ok());
  EXPECT_EQ(output_of(*rt, id)["notes"].size(), 2u);
}

TEST_F(MessageTest, AKeyIsRecordedPerStreamName) {
  auto rt = open();
  auto id = start(*rt, "read-after-go");
  auto note = rt->send_message(id, "note", json("a"), keyed("same"));
  auto go = rt->send_message(id, "go", nullptr, keyed("same"));
  ASSERT_TRUE(note.ok() && go.ok());
  EXPECT_NE(note->sequence, go->sequence);
  EXPECT_EQ(count_events(*rt, id, "message-received"), 2u);
}

TEST_F(MessageTest, ARepeatedKeyAfterTheRunEndedAnswersAsTheFirst) {
  auto rt = open();
  auto id = start(*rt, "acme.inbox");
  auto first = rt->send_message(id, "note", {{"done", true}}, keyed("last"));
  ASSERT_TRUE(first.ok());
  output_of(*rt, id);
  auto again = rt->send_message(id, "note", {{"done", true}}, keyed("last"));
  ASSERT_TRUE(again.ok()) << again.error().to_string();
  EXPECT_EQ(again->to_json(), first->to_json());
  auto unkeyed = rt->send_message(id, "note", {{"done", true}});
  ASSERT_FALSE(unkeyed.ok());
  EXPECT_EQ(unkeyed.error().code, errc::run_finished);
}

TEST_F(MessageTest, MessagesSurviveARestartAndReplay) {
  auto id = [&] {
    auto rt = open();
    auto id = start(*rt, "acme.inbox");
    EXPECT_TRUE(rt->send_message(id, "note", {{"n", 1}}, keyed("one")).ok());
    EXPECT_TRUE(rt->send_message(id, "note", {{"n", 2}}).ok());
    return id;
  }();
  auto rt = open();
  // The key is still recorded after the restart.
  auto again = rt->send_message(id, "note", {{"n", 1}}, keyed("one"));
  ASSERT_TRUE(again.ok()) << again.error().to_string();
  ASSERT_TRUE(rt->send_message(id, "note", {{"n", 3}, {"done", true}}).ok());
  auto notes = output_of(*rt, id)["notes"];
  ASSERT_EQ(notes.size(), 3u);
  EXPECT_EQ(notes[2]["n"], 3);
}

TEST_F(MessageTest, APassivatedRunIsActivatedByAMessage) {
  auto rt = open(50ms);
  auto id = start(*rt, "acme.inbox");
  ASSERT_TRUE(rt->send_message(id, "note", {{"n", 1}}).ok());
  ASSERT_TRUE(eventually([&] { return rt->active_run_actors() == 0; }))
      << "a run waiting on a message passivates";
  ASSERT_TRUE(rt->send_message(id, "note", {{"done", true}}).ok());
  EXPECT_EQ(output_of(*rt, id)["notes"].size(), 2u);
}

TEST_F(MessageTest, AMessageByInstanceIdReachesItsActiveRun) {
  auto rt = open();
  start_options options;
  options.instance_id = "inbox-7";
  auto id = start(*rt, "acme.inbox", options);
  auto sent = rt->send_message_to_instance("inbox-7", "note", {{"done", true}});
  ASSERT_TRUE(sent.ok()) << sent.error().to_string();
  EXPECT_EQ(sent->run_id, id);
  output_of(*rt, id);
  auto none = rt->send_message_to_instance("inbox-7", "note", json());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, errc::run_not_found);
}

TEST_F(MessageTest, MessageWithStartStartsTheInstanceOnceAndDeliversToIt) {
  auto rt = open();
  message_start with{"acme.inbox", json::object()};
  auto first =
      rt->send_message_to_instance("box", "note", {{"n", 1}}, keyed("a"), with);
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  EXPECT_TRUE(first->started);
  EXPECT_EQ(first->sequence, 1u);
  auto second = rt->send_message_to_instance(
      "box", "note", {{"n", 2}, {"done", true}}, keyed("b"), with);
  ASSERT_TRUE(second.ok()) << second.error().to_string();
  EXPECT_FALSE(second->started);
  EXPECT_EQ(second->run_id, first->run_id);
  auto notes = output_of(*rt, first->run_id)["notes"];
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[0]["n"], 1);
}

TEST_F(MessageTest, MessageWithStartRetriedAfterTheRunClosedRecordsNothing) {
  auto rt = open();
  message_start with{"acme.inbox", json::object()};
  auto first = rt->send_message_to_instance("once", "note", {{"done", true}},
                                            keyed("only"), with);
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  output_of(*rt, first->run_id);
  // The answer was lost; the retry comes after the run closed.
  auto retry = rt->send_message_to_instance("once", "note", {{"done", true}},
                                            keyed("only"), with);
  ASSERT_TRUE(retry.ok()) << retry.error().to_string();
  EXPECT_EQ(retry->to_json(), first->to_json());
  run_filter all;
  all.flow = "acme.inbox";
  EXPECT_EQ(rt->list(all)->runs.size(), 1u) << "no second run started";
}

TEST_F(MessageTest, ABadNameIsInvalidArgumentAndRecordsNothing) {
  auto rt = open();
  auto id = start(*rt, "acme.inbox");
  for (const char* name : {"", "has space", "a/b"}) {
    auto sent = rt->send_message(id, name, json());
    ASSERT_FALSE(sent.ok()) << name;
    EXPECT_EQ(sent.error().code, errc::invalid_argument);
  }
  auto unknown = rt->send_message("run_nope", "note", json());
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, errc::run_not_found);
  EXPECT_EQ(count_events(*rt, id, "message-received"), 0u);
}

TEST_F(MessageTest, AnUpdateRejectedByValidationRecordsNothing) {
  auto rt = open();
  auto id = start(*rt, "acme.counter");
  auto before = rt->history(id)->size();
  auto refused = rt->update(id, "add", {{"by", -1}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::update_rejected);
  EXPECT_NE(refused.error().message.find("negative"), std::string::npos)
      << refused.error().message;
  EXPECT_EQ(rt->history(id)->size(), before);
}

TEST_F(MessageTest, AnUpdateIsAnsweredWithItsResultOnceCompleted) {
  auto rt = open();
  auto id = start(*rt, "acme.counter");
  auto added = rt->update(id, "add", {{"by", 5}});
  ASSERT_TRUE(added.ok()) << added.error().to_string();
  EXPECT_TRUE(added->completed);
  EXPECT_EQ(added->result, json({{"value", 5}}));
  ASSERT_TRUE(rt->send_message(id, "stop", nullptr).ok());
  EXPECT_EQ(output_of(*rt, id), json({{"value", 5}}));
}

TEST_F(MessageTest, ARepeatedUpdateIdGetsTheFirstUpdatesResult) {
  auto rt = open();
  auto id = start(*rt, "acme.counter");
  update_options options;
  options.update_id = "add-once";
  auto first = rt->update(id, "add", {{"by", 5}}, options);
  auto again = rt->update(id, "add", {{"by", 5}}, options);
  ASSERT_TRUE(first.ok() && again.ok());
  EXPECT_EQ(again->to_json(), first->to_json());
  EXPECT_EQ(*rt->query(id, "value"), json({{"value", 5}}));
}

TEST_F(MessageTest, AnUpdateWaitedForAcceptedAnswersItsHandle) {
  auto rt = open();
  auto id = start(*rt, "acme.counter");
  update_options options;
  options.update_id = "u1";
  options.wait_completed = false;
  auto accepted = rt->update(id, "add", {{"by", 2}}, options);
  ASSERT_TRUE(accepted.ok()) << accepted.error().to_string();
  EXPECT_EQ(accepted->update_id, "u1");
  EXPECT_TRUE(eventually(
      [&] { return count_events(*rt, id, "update-completed") == 1; }));
  options.wait_completed = true;
  auto completed = rt->update(id, "add", {{"by", 2}}, options);
  ASSERT_TRUE(completed.ok());
  EXPECT_TRUE(completed->completed);
  EXPECT_EQ(completed->result, json({{"value", 2}}));
}

TEST_F(MessageTest, AnUpdateHandledWithAStepCompletes) {
  auto rt = open();
  auto id = start(*rt, "stepping-updates");
  auto doubled = rt->update(id, "double", {{"n", 21}});
  ASSERT_TRUE(doubled.ok()) << doubled.error().to_string();
  EXPECT_EQ(doubled->result, json({{"doubled", 42}}));
}

TEST_F(MessageTest, AnUpdateReadBeforeARestartIsCompletedAfterIt) {
  update_options options;
  options.update_id = "job-1";
  std::string id;
  {
    auto rt = open();
    id = start(*rt, "slow-update");
    options.wait_completed = false;
    auto accepted = rt->update(id, "job", json(7), options);
    ASSERT_TRUE(accepted.ok()) << accepted.error().to_string();
    EXPECT_FALSE(accepted->completed);
    ASSERT_TRUE(
        eventually([&] { return count_events(*rt, id, "message-read") == 1; }));
  }
  auto rt = open();
  ASSERT_TRUE(rt->send_message(id, "go", nullptr).ok());
  options.wait_completed = true;
  auto completed = rt->update(id, "job", json(7), options);
  ASSERT_TRUE(completed.ok()) << completed.error().to_string();
  EXPECT_TRUE(completed->completed);
  EXPECT_EQ(completed->result, json({{"finished", 7}}));
  ASSERT_TRUE(rt->send_message(id, "stop", nullptr).ok());
  output_of(*rt, id);
}

TEST_F(MessageTest, AnUnknownUpdateOrQueryIsHandlerNotFound) {
  auto rt = open();
  auto id = start(*rt, "acme.counter");
  auto update = rt->update(id, "subtract", {{"by", 1}});
  ASSERT_FALSE(update.ok());
  EXPECT_EQ(update.error().code, errc::handler_not_found);
  auto query = rt->query(id, "nothing");
  ASSERT_FALSE(query.ok());
  EXPECT_EQ(query.error().code, errc::handler_not_found);
}

TEST_F(MessageTest, AQueryAnswersTheCurrentStateAndRecordsNothing) {
  auto rt = open();
  auto id = start(*rt, "acme.counter");
  ASSERT_TRUE(rt->update(id, "add", {{"by", 3}}).ok());
  auto before = rt->history(id)->size();
  auto value = rt->query(id, "value");
  ASSERT_TRUE(value.ok()) << value.error().to_string();
  EXPECT_EQ(*value, json({{"value", 3}}));
  EXPECT_EQ(rt->history(id)->size(), before);
}

TEST_F(MessageTest, AQueryOfAPassivatedRunReplaysIt) {
  auto rt = open(50ms);
  auto id = start(*rt, "acme.counter");
  ASSERT_TRUE(rt->update(id, "add", {{"by", 4}}).ok());
  ASSERT_TRUE(eventually([&] { return rt->active_run_actors() == 0; }));
  auto before = rt->history(id)->size();
  auto value = rt->query(id, "value");
  ASSERT_TRUE(value.ok()) << value.error().to_string();
  EXPECT_EQ(*value, json({{"value", 4}}));
  EXPECT_EQ(rt->history(id)->size(), before);
}

TEST_F(MessageTest, AQueryThatTriesToChangeStateIsRefused) {
  auto rt = open();
  auto id = start(*rt, "sneaky-query");
  auto before = rt->history(id)->size();
  auto refused = rt->query(id, "now");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::query_refused);
  EXPECT_EQ(rt->history(id)->size(), before);
  ASSERT_TRUE(rt->send_message(id, "stop", nullptr).ok());
  output_of(*rt, id);
}

TEST_F(MessageTest, TerminateEndsTheRunAsTerminatedOnce) {
  auto rt = open();
  auto id = start(*rt, "acme.counter");
  cancel_options options;
  options.reason = "enough";
  options.command_id = "term-1";
  auto stopped = rt->terminate(id, options);
  ASSERT_TRUE(stopped.ok()) << stopped.error().to_string();
  EXPECT_EQ(stopped->status, run_status::terminated);
  EXPECT_EQ(stopped->error->code, "terminated");
  EXPECT_EQ(count_events(*rt, id, "run-terminated"), 1u);
  auto again = rt->terminate(id, options);
  ASSERT_TRUE(again.ok()) << "a repeat of the command answers the run";
  EXPECT_EQ(again->status, run_status::terminated);
  auto cancel = rt->cancel(id);
  ASSERT_FALSE(cancel.ok());
  EXPECT_EQ(cancel.error().code, errc::run_finished);
  auto message = rt->send_message(id, "stop", nullptr);
  ASSERT_FALSE(message.ok());
  EXPECT_EQ(message.error().code, errc::run_finished);
}

}  // namespace
}  // namespace durin
