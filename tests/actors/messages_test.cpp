// Goal: every message of the node's actors serialises, so it can cross a
// node: each registered type round-trips through CAF's binary serialiser,
// and a whole message (atom and payload) through the type names registered
// by durin::add_message_types.
// Method: one filled-in value per type, saved and loaded; the loaded value
// must print (CAF's inspector walks every field) and save exactly as the
// original.
#include <gtest/gtest.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/deep_to_string.hpp>
#include <caf/message.hpp>
#include <vector>

#include "actors/answers.hpp"
#include "actors/messages.hpp"
#include "actors/type_ids.hpp"
#include "durin/runtime.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin {
namespace {

using namespace actors;

class MessageTypes : public ::testing::Test {
 protected:
  MessageTypes() : system_(init(config_)) {}

  static caf::actor_system_config& init(caf::actor_system_config& config) {
    add_message_types(config);
    return config;
  }

  template <class T>
  std::vector<char> save(T& value) {
    std::vector<char> bytes;
    caf::binary_serializer sink{system_, bytes};
    auto failure = sink(value);
    EXPECT_FALSE(failure) << system_.render(failure);
    return bytes;
  }

  // Saves `value`, loads it into a fresh T and checks that nothing was lost.
  template <class T>
  T round_trip(T value) {
    auto bytes = save(value);
    T loaded;
    caf::binary_deserializer source{system_, bytes};
    auto failure = source(loaded);
    EXPECT_FALSE(failure) << system_.render(failure);
    EXPECT_EQ(save(loaded), bytes);
    EXPECT_EQ(caf::deep_to_string(loaded), caf::deep_to_string(value));
    return loaded;
  }

  caf::actor_system_config config_;
  caf::actor_system system_;
};

persistence::run_record a_run() {
  persistence::run_record run;
  run.id = "run_1";
  run.flow = "shop.ship";
  run.status = run_status::waiting;
  run.input = std::string("\x81\xa1x\x01", 4);
  run.output = "out";
  run.error_code = "step-failed";
  run.error_message = "no";
  run.created_at_ms = 1;
  run.started_at_ms = 2;
  run.completed_at_ms = 3;
  run.spec_version = 2;
  run.tenant = "acme";
  run.start_token = "order:1";
  run.memo = "m";
  run.search = {{"priority", search_value::of_int(3)},
                {"ratio", search_value::of_double(0.5)}};
  return run;
}

persistence::token_record a_token() {
  persistence::token_record token;
  token.tenant = "acme";
  token.token = "order:1";
  token.owner_run = "run_1";
  token.state = persistence::token_state::retained;
  token.start_hook = true;
  token.webhook = true;
  token.owner_call = 4;
  token.created_at_ms = 5;
  token.retain_until_ms = 6;
  token.metadata = "m";
  token.owner_spec_version = 2;
  token.next_payload = 7;
  token.previous_owner = "run_0";
  token.previous_owner_last_payload = 3;
  token.owner_command = "cmd";
  return token;
}

run_info an_info() {
  run_info info;
  info.id = "run_1";
  info.instance_id = "i";
  info.flow = "shop.ship";
  info.status = run_status::failed;
  info.input = json{{"orderId", "B-7"}, {"n", 1.5}};
  info.output = json::array({1, "two", nullptr});
  info.error = run_error{"step-failed", "it broke"};
  info.created_at_ms = 1;
  info.started_at_ms = 2;
  info.completed_at_ms = 3;
  info.blocked_reason = "b";
  info.start_token = "order:1";
  info.memo = json{{"note", "rush"}};
  info.search_attributes = {{"vip", search_value::of_bool(true)},
                            {"customer", search_value::keyword("acme")}};
  return info;
}

TEST_F(MessageTypes, PublicTypesRoundTrip) {
  auto info = round_trip(an_info());
  EXPECT_EQ(info.input, an_info().input);
  EXPECT_EQ(info.output, an_info().output);
  EXPECT_EQ(info.memo, an_info().memo);
  EXPECT_EQ(info.search_attributes, an_info().search_attributes);
  ASSERT_TRUE(info.error.has_value());
  EXPECT_EQ(info.error->message, "it broke");
  EXPECT_FALSE(round_trip(run_info{}).error.has_value());
  auto failure = round_trip(error{errc::hook_conflict, "held", "run_9"});
  EXPECT_EQ(failure.code, errc::hook_conflict);
  EXPECT_EQ(failure.run_id, "run_9");
  EXPECT_TRUE(round_trip(status{}).ok());
  auto failed = round_trip(status{make_error(errc::storage_error, "disk")});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().message, "disk");
}

start_answer an_answer() {
  persistence::start_key key;
  key.address = {"acme", "key_1", "idem-7"};
  key.fingerprint = "f";
  key.instance_id = "node-1";
  key.lease_ms = 30'000;
  key.keep_ms = 86'400'000;
  return start_answer{key, true};
}

TEST_F(MessageTypes, NodeMessagesRoundTrip) {
  auto fresh = round_trip(fresh_run{a_run(), an_answer(), an_info()});
  EXPECT_EQ(fresh.record, a_run());
  EXPECT_EQ(fresh.info.input, an_info().input);
  ASSERT_TRUE(fresh.answer.key.has_value());
  EXPECT_EQ(fresh.answer.key->address.key, "idem-7");
  EXPECT_TRUE(fresh.answer.when_settled);
  EXPECT_FALSE(round_trip(start_answer{}).key.has_value());
  step_outcome outcome;
  outcome.result = step_outcome::kind::retryable;
  outcome.value = json{{"k", "v"}};
  outcome.message = "m";
  outcome.retry_after_ms = 9;
  outcome.error_code = "timeout-heartbeat";
  auto report = round_trip(step_report{3, "att_1", outcome});
  EXPECT_EQ(report.outcome.value, outcome.value);
  EXPECT_EQ(report.outcome.result, step_outcome::kind::retryable);
  EXPECT_EQ(round_trip(cancel_request{"why", "cmd"}).command_id, "cmd");
  auto claim = round_trip(start_claim{a_run(), a_token(), an_answer()});
  EXPECT_EQ(claim.run, a_run());
  EXPECT_EQ(claim.token, a_token());
  EXPECT_EQ(claim.answer.key->fingerprint, "f");
  auto hook = round_trip(hook_claim{"run_1", 3, "meta", 9, true, true, 2});
  EXPECT_TRUE(hook.force);
  EXPECT_EQ(hook.spec_version, 2u);
  EXPECT_EQ(round_trip(claim_outcome{"t", 3, false, "run_2"}).owner, "run_2");
  EXPECT_EQ(round_trip(resume_request{"p", "r"}).resume_id, "r");
  EXPECT_EQ(round_trip(subscription{"run_1", 4}).from_sequence, 4u);
  EXPECT_EQ(round_trip(owner_notice{"run_1", 8}).at_ms, 8);
  EXPECT_EQ(round_trip(hook_delivery{"t", 2, "p"}).sequence, 2u);
  EXPECT_EQ(round_trip(hook_loss{"t", "run_2", 5}).last_sequence, 5u);
  EXPECT_TRUE(round_trip(cancel_request{"why", "cmd", true}).terminate);
  auto message = round_trip(
      actors::message_request{"note", "p", "k", "scope", true, true});
  EXPECT_EQ(message.scope, "scope");
  EXPECT_TRUE(message.update && message.wait_completed);
  EXPECT_EQ(round_trip(actors::message_receipt{"run_1", 7, true, "r"}).result,
            "r");
  EXPECT_EQ(round_trip(query_request{"value", "a"}).args, "a");
  start_claim with_message{a_run(), a_token(), an_answer()};
  with_message.first_events.push_back(
      {.kind = persistence::event_kind::message_received, .name = "note"});
  with_message.message_scope = "scope";
  with_message.message_key = "k";
  auto carried = round_trip(with_message);
  ASSERT_EQ(carried.first_events.size(), 1u);
  EXPECT_EQ(carried.first_events[0].name, "note");
  EXPECT_EQ(carried.message_key, "k");
  persistence::timer_record timer{9, "run_1", 4,
                                  persistence::timer_kind::token_retention};
  EXPECT_EQ(round_trip(timer), timer);
  EXPECT_TRUE(round_trip(report_answer{true, "r"}).recorded);
  auto child = round_trip(
      child_started{4, "run_c", "hook-conflict", "m", "run_o", true});
  EXPECT_EQ(child.owner_run_id, "run_o");
  EXPECT_TRUE(child.indefinite);
  EXPECT_EQ(round_trip(hand_over_request{"run_1"}).run_id, "run_1");
  auto ready = round_trip(hand_over_ready{"t", true, a_token()});
  EXPECT_EQ(ready.record, a_token());
  auto linked = a_run();
  linked.parent_run_id = "run_p";
  linked.parent_close = 2;
  linked.continued_from = "run_b";
  EXPECT_EQ(round_trip(fresh_run{linked, an_answer(), an_info()}).record,
            linked);
}

// A whole message needs every element's type registered by name: this is
// what a remote send does.
TEST_F(MessageTypes, MessagesRoundTripByRegisteredName) {
  auto original = caf::make_message(
      start_claim_atom::value, start_claim{a_run(), a_token(), an_answer()});
  auto bytes = save(original);
  caf::message loaded;
  caf::binary_deserializer source{system_, bytes};
  auto failure = source(loaded);
  ASSERT_FALSE(failure) << system_.render(failure);
  ASSERT_TRUE((loaded.match_elements<start_claim_atom, start_claim>()));
  EXPECT_EQ(loaded.get_as<start_claim>(1).token, a_token());
  auto answer = caf::make_message(an_info(), status{});
  bytes = save(answer);
  caf::binary_deserializer again{system_, bytes};
  ASSERT_FALSE(again(loaded));
  ASSERT_TRUE((loaded.match_elements<run_info, status>()));
  EXPECT_EQ(loaded.get_as<run_info>(0).output, an_info().output);
}

// A durin error answered by an actor reaches its requester whole.
TEST_F(MessageTypes, ErrorsTravelAsCafErrors) {
  auto sent = to_caf_error(error{errc::hook_conflict, "held", "run_9"});
  std::vector<char> bytes;
  caf::binary_serializer sink{system_, bytes};
  ASSERT_FALSE(sink(sent));
  caf::error loaded;
  caf::binary_deserializer source{system_, bytes};
  ASSERT_FALSE(source(loaded));
  auto back = from_caf_error(loaded);
  EXPECT_EQ(back.code, errc::hook_conflict);
  EXPECT_EQ(back.message, "held");
  EXPECT_EQ(back.run_id, "run_9");
  EXPECT_EQ(
      from_caf_error(caf::make_error(caf::sec::request_receiver_down)).code,
      errc::shutting_down);
}

// An embedder's system built without durin::add_message_types is refused
// at open, naming the call, rather than failing at the first remote send.
TEST_F(MessageTypes, RuntimeRefusesASystemWithoutThem) {
  caf::actor_system_config bare;
  caf::actor_system without{bare};
  EXPECT_FALSE(has_message_types(without));
  EXPECT_TRUE(has_message_types(system_));
  testing::temp_dir dir;
  auto opened = runtime::open({.data_dir = dir.path()}, registry{}, without);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.error().code, errc::invalid_argument);
  EXPECT_NE(opened.error().message.find("add_message_types"),
            std::string::npos);
}

}  // namespace
}  // namespace durin
