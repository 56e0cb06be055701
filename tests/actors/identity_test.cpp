// Goal: the durable identities of seeds/004 that a caller sets: instance ids
// (one active run per instance, both duplicate policies) and command ids on
// start, cancel and resume (a repeat of a settled command gets its recorded
// outcome and records nothing new), on a real store, across restarts.
// Method: a flow that sleeps an hour on a manual clock stays active; the
// tests count runs with list() and events with history().
#include <gtest/gtest.h>

#include "durin/durin.hpp"
#include "tests/support/runtime_fixture.hpp"

namespace durin {
namespace {

using namespace std::chrono_literals;
using testing::eventually;

constexpr auto wait_max = std::chrono::milliseconds(20'000);

flow<json> sleeps_an_hour(context& ctx, json input) {
  co_await ctx.sleep(1h);
  co_return input;
}

// Reads its start hook until a payload says done; returns every "n".
flow<json> collects(context& ctx, json input) {
  auto hook = ctx.create_hook<json>({.token = input.at("token")});
  json got = json::array();
  while (auto payload = co_await hook.next()) {
    if (payload->value("done", false)) {
      break;
    }
    got.push_back((*payload)["n"]);
  }
  co_return got;
}

class IdentityTest : public testing::runtime_fixture {
 protected:
  IdentityTest() {
    flows_.flow("sleeps", sleeps_an_hour);
    flows_.flow("collects", collects);
  }

  static start_options instance(
      std::string id,
      duplicate_policy policy = duplicate_policy::reject_duplicate) {
    start_options options;
    options.instance_id = std::move(id);
    options.on_duplicate = policy;
    return options;
  }

  static start_options command(std::string id) {
    start_options options;
    options.command_id = std::move(id);
    return options;
  }

  static std::size_t run_count(runtime& rt) {
    run_filter filter;
    filter.limit = 1000;
    auto page = rt.list(filter);
    return page ? page->runs.size() : 0;
  }
};

TEST_F(IdentityTest, InstanceIdAllowsOneActiveRunAndRejectsDuplicates) {
  auto rt = open();
  auto first = rt->start("sleeps", json::object(), instance("order-7"));
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  EXPECT_EQ(first->instance_id, "order-7");
  EXPECT_EQ(first->to_json()["instanceId"], "order-7");
  auto duplicate = rt->start("sleeps", json::object(), instance("order-7"));
  ASSERT_FALSE(duplicate.ok());
  EXPECT_EQ(duplicate.error().code, errc::hook_conflict);
  EXPECT_EQ(duplicate.error().run_id, first->id);
  EXPECT_EQ(run_count(*rt), 1u);
  auto found = rt->get_instance("order-7");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->id, first->id);
  EXPECT_EQ(rt->get(first->id)->instance_id, "order-7");
}

TEST_F(IdentityTest, ReturnExistingActiveAnswersTheActiveRun) {
  auto rt = open();
  auto first = rt->start("sleeps", json::object(), instance("order-8"));
  ASSERT_TRUE(first.ok());
  auto again =
      rt->start("sleeps", json::object(),
                instance("order-8", duplicate_policy::return_existing_active));
  ASSERT_TRUE(again.ok()) << again.error().to_string();
  EXPECT_EQ(again->id, first->id);
  EXPECT_EQ(again->created_at_ms, first->created_at_ms);
  EXPECT_EQ(run_count(*rt), 1u);
}

TEST_F(IdentityTest, InstanceIdIsFreeAgainWhenItsRunEndsAndAcrossRestarts) {
  auto rt = open();
  auto first = rt->start("sleeps", json::object(), instance("order-9"));
  ASSERT_TRUE(first.ok());
  rt.reset();
  rt = open();  // the instance is still held after a restart
  EXPECT_EQ(
      rt->start("sleeps", json::object(), instance("order-9")).error().run_id,
      first->id);
  ASSERT_TRUE(rt->cancel(first->id).ok());
  EXPECT_EQ(rt->get_instance("order-9").error().code, errc::run_not_found);
  auto second = rt->start("sleeps", json::object(), instance("order-9"));
  ASSERT_TRUE(second.ok()) << second.error().to_string();
  EXPECT_NE(second->id, first->id);
}

TEST_F(IdentityTest, WithoutAnInstanceIdTheInstanceIsTheRun) {
  auto rt = open();
  auto run = rt->start("sleeps", json::object());
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->instance_id, run->id);
  EXPECT_EQ(rt->get(run->id)->instance_id, run->id);
}

TEST_F(IdentityTest, BadIdentitiesAreRefusedNamingTheProblem) {
  auto rt = open();
  auto both = instance("order-10");
  both.hook = start_hook{"order:10", nullptr, nullptr};
  auto refused = rt->start("sleeps", json::object(), both);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::invalid_argument);
  EXPECT_NE(refused.error().message.find("instance_id and hook"),
            std::string::npos);
  auto long_id =
      rt->start("sleeps", json::object(), instance(std::string(201, 'x')));
  EXPECT_NE(long_id.error().message.find("instance id"), std::string::npos);
  start_options reserved;
  reserved.hook = start_hook{"\x1fi:order-10", nullptr, nullptr};
  auto spoof = rt->start("sleeps", json::object(), reserved);
  EXPECT_EQ(spoof.error().code, errc::invalid_argument);
  EXPECT_NE(spoof.error().message.find("0x1F"), std::string::npos);
  EXPECT_EQ(rt->get_instance("").error().code, errc::invalid_argument);
  EXPECT_EQ(run_count(*rt), 0u);
}

TEST_F(IdentityTest, RepeatedStartCommandGetsTheFirstRunAndStartsNothing) {
  auto rt = open();
  auto first = rt->start("sleeps", json{{"n", 1}}, command("cmd-start-1"));
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  auto repeat = rt->start("sleeps", json{{"n", 1}}, command("cmd-start-1"));
  ASSERT_TRUE(repeat.ok()) << repeat.error().to_string();
  EXPECT_EQ(repeat->id, first->id);
  EXPECT_EQ(repeat->created_at_ms, first->created_at_ms);
  // Once the run has ended, and after a restart, still the same run.
  ASSERT_TRUE(eventually([&] {
    return rt->get(first->id)->status == run_status::waiting;  // timer armed
  }));
  clock_->advance_ms(3'600'001);
  ASSERT_EQ(rt->wait(first->id, wait_max)->status, run_status::completed);
  rt.reset();
  rt = open();
  auto later = rt->start("sleeps", json{{"n", 1}}, command("cmd-start-1"));
  ASSERT_TRUE(later.ok()) << later.error().to_string();
  EXPECT_EQ(later->id, first->id);
  EXPECT_EQ(later->status, run_status::completed);
  EXPECT_EQ(run_count(*rt), 1u);
  // Another command id is another start.
  auto other = rt->start("sleeps", json{{"n", 1}}, command("cmd-start-2"));
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->id, first->id);
}

TEST_F(IdentityTest, StartCommandOnAnInstanceGetsItsOwnRunBackNotAConflict) {
  auto rt = open();
  auto options = instance("order-11");
  options.command_id = "cmd-11";
  auto first = rt->start("sleeps", json::object(), options);
  ASSERT_TRUE(first.ok());
  auto repeat = rt->start("sleeps", json::object(), options);
  ASSERT_TRUE(repeat.ok()) << repeat.error().to_string();
  EXPECT_EQ(repeat->id, first->id);
  options.command_id = "cmd-12";  // a different command: a real duplicate
  auto duplicate = rt->start("sleeps", json::object(), options);
  ASSERT_FALSE(duplicate.ok());
  EXPECT_EQ(duplicate.error().code, errc::hook_conflict);
}

TEST_F(IdentityTest, RepeatedCancelCommandGetsItsRecordedOutcome) {
  auto rt = open();
  auto run = rt->start("sleeps", json::object());
  ASSERT_TRUE(run.ok());
  cancel_options cancel;
  cancel.command_id = "cmd-cancel-1";
  cancel.reason = "customer asked";
  auto first = rt->cancel(run->id, cancel);
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  EXPECT_EQ(first->status, run_status::cancelled);
  rt.reset();
  rt = open();
  auto repeat = rt->cancel(run->id, cancel);
  ASSERT_TRUE(repeat.ok()) << repeat.error().to_string();
  EXPECT_EQ(repeat->status, run_status::cancelled);
  EXPECT_EQ(repeat->completed_at_ms, first->completed_at_ms);
  EXPECT_EQ(count_events(*rt, run->id, "run-cancelled"), 1u);
  cancel.command_id = "cmd-cancel-2";  // not the command that cancelled it
  EXPECT_EQ(rt->cancel(run->id, cancel).error().code, errc::run_finished);
  EXPECT_EQ(rt->cancel(run->id).error().code, errc::run_finished);
}

TEST_F(IdentityTest, RepeatedResumeCommandIsRecordedOnce) {
  auto rt = open();
  start_options options;
  options.hook = start_hook{"order:12", nullptr, nullptr};
  auto run = rt->start("collects", json{{"token", "order:12"}}, options);
  ASSERT_TRUE(run.ok());
  resume_options resume;
  resume.command_id = "cmd-resume-1";
  auto first = rt->resume_hook("order:12", json{{"n", 1}}, resume);
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  auto repeat = rt->resume_hook("order:12", json{{"n", 2}}, resume);
  ASSERT_TRUE(repeat.ok()) << repeat.error().to_string();
  EXPECT_EQ(*repeat, run->id);
  ASSERT_TRUE(rt->resume_hook("order:12", json{{"done", true}}).ok());
  auto done = rt->wait(run->id, wait_max);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->output, json::array({1}));
  resume.resume_id = "another";
  EXPECT_EQ(rt->resume_hook("order:12", json(1), resume).error().code,
            errc::invalid_argument);
}

}  // namespace
}  // namespace durin
