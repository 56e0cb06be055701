// Request idempotency on a real store with a fake clock: the lease of a key
// whose request stopped without answering (rule 3: within 30 s), markers of
// another process (free at once), expiry after 24 h and the sweep (rule 8),
// and the persistence of request records.
#include "gateway/idempotency.hpp"

#include <gtest/gtest.h>

#include <atomic>

#include "persistence/requests.hpp"
#include "tests/support/store_fixture.hpp"

namespace durin::gateway {
namespace {

class IdempotencyTest : public testing::store_fixture {
 protected:
  void SetUp() override {
    store_fixture::SetUp();
    if (HasFatalFailure()) {
      return;  // the store did not open
    }
    requests_ = std::make_unique<persistence::request_store>(*store_, *writer_);
  }
  std::unique_ptr<idempotency> make(const std::string& instance) {
    return std::make_unique<idempotency>(*requests_, instance,
                                         [this] { return now_ms_.load(); });
  }
  http_response ok(const std::string& body) {
    http_response response;
    response.body = body;
    return response;
  }

  std::unique_ptr<persistence::request_store> requests_;
  std::atomic<std::int64_t> now_ms_{1'000'000};
  persistence::request_address key_{"default", "key_a", "k"};
};

TEST_F(IdempotencyTest, Rule3_AHeldKeyIsFreeAfterItsThirtySecondLease) {
  auto keys = make("one");
  auto first = keys->begin(key_, "fp");
  ASSERT_EQ(first.kind, idempotency::outcome::proceed);
  now_ms_ += 29'000;
  auto during = keys->begin(key_, "fp");
  EXPECT_EQ(during.kind, idempotency::outcome::answered);
  EXPECT_EQ(during.response.status, 409u);
  now_ms_ += 1'001;
  auto after = keys->begin(key_, "fp");
  EXPECT_EQ(after.kind, idempotency::outcome::proceed);
  // The stale holder's finish does not release the new holder.
  (void)keys->finish(key_, "fp", first.generation, ok("{}"), false);
  (void)keys->finish(key_, "fp", after.generation, ok("{\"b\":1}"), false);
  auto replay = keys->begin(key_, "fp");
  EXPECT_EQ(replay.response.body, "{\"b\":1}");
}

TEST_F(IdempotencyTest, Rule3_KeysOfAnotherProcessAreFreeAtOnce) {
  auto old_process = make("old");
  ASSERT_EQ(old_process->begin(key_, "fp").kind, idempotency::outcome::proceed);
  ASSERT_TRUE(
      requests_
          ->put(key_, persistence::in_flight_marker(
                          old_process->start_key_of(key_, "fp"), now_ms_, ""))
          .ok());
  auto new_process = make("new");
  EXPECT_EQ(new_process->begin(key_, "fp").kind, idempotency::outcome::proceed);
}

// Holding a key costs no write: a keyed start's only write is its admission.
TEST_F(IdempotencyTest, BeginWritesNothingAndAFailedAnswerKeepsNothing) {
  auto keys = make("one");
  auto before = writer_->statistics().group_writes;
  auto held = keys->begin(key_, "fp");
  ASSERT_EQ(held.kind, idempotency::outcome::proceed);
  http_response refused;
  refused.status = 404;
  (void)keys->finish(key_, "fp", held.generation, refused, false);
  EXPECT_EQ(writer_->statistics().group_writes, before);
  auto stored = requests_->get(key_);
  ASSERT_TRUE(stored.ok());
  EXPECT_FALSE(stored->has_value());
  EXPECT_EQ(keys->begin(key_, "fp").kind, idempotency::outcome::proceed);
}

// A failed answer after an admission may have written a marker leaves the
// marker: the run it names may exist, and a retry must find it.
TEST_F(IdempotencyTest, AFailedAnswerAfterAnAdmissionLeavesItsMarker) {
  auto keys = make("one");
  auto held = keys->begin(key_, "fp");
  ASSERT_TRUE(
      requests_
          ->put(key_, persistence::in_flight_marker(
                          keys->start_key_of(key_, "fp"), now_ms_, "run_9"))
          .ok());
  http_response unknown;
  unknown.status = 503;
  (void)keys->finish(key_, "fp", held.generation, unknown, false,
                     idempotency::stored::marker);
  auto stored = requests_->get(key_);
  ASSERT_TRUE(stored.ok());
  ASSERT_TRUE(stored->has_value());
  EXPECT_EQ((*stored)->body, "run_9");
  auto after_restart = make("two")->begin(key_, "fp");
  EXPECT_EQ(after_restart.recorded_run_id, "run_9");
}

// An answer kept by the admission itself is not written again.
TEST_F(IdempotencyTest, AnAnswerKeptByTheAdmissionIsNotWrittenAgain) {
  auto keys = make("one");
  auto held = keys->begin(key_, "fp");
  auto answer = ok("{\"id\":\"run_1\"}");
  answer.status = 202;
  ASSERT_TRUE(
      requests_
          ->put(key_, persistence::kept_answer(keys->start_key_of(key_, "fp"),
                                               now_ms_, 202, answer.body))
          .ok());
  auto before = writer_->statistics().group_writes;
  auto sent = keys->finish(key_, "fp", held.generation, answer, false,
                           idempotency::stored::answer);
  EXPECT_EQ(writer_->statistics().group_writes, before);
  EXPECT_EQ(sent.body, answer.body);
  auto replay = keys->begin(key_, "fp");
  EXPECT_EQ(replay.response.status, 202u);
  EXPECT_EQ(replay.response.body, answer.body);
}

TEST_F(IdempotencyTest, Rule3_ARunRecordedByACrashedHolderIsAnsweredAgain) {
  auto old_process = make("old");
  ASSERT_EQ(old_process->begin(key_, "fp").kind, idempotency::outcome::proceed);
  ASSERT_TRUE(requests_
                  ->put(key_, persistence::in_flight_marker(
                                  old_process->start_key_of(key_, "fp"),
                                  now_ms_, "run_1"))
                  .ok());
  auto new_process = make("new");
  auto retry = new_process->begin(key_, "fp");
  EXPECT_EQ(retry.kind, idempotency::outcome::proceed);
  EXPECT_EQ(retry.recorded_run_id, "run_1");
  EXPECT_EQ(new_process->begin(key_, "other").response.status, 409u);
}

TEST_F(IdempotencyTest, Rule8_KeptAnswersExpireAfter24HoursAndAreSwept) {
  auto keys = make("one");
  auto first = keys->begin(key_, "fp");
  (void)keys->finish(key_, "fp", first.generation, ok("{}"), false);
  now_ms_ += 24LL * 3600 * 1000 - 1;
  EXPECT_EQ(keys->begin(key_, "fp").response.body, "{}");
  auto swept = requests_->sweep(now_ms_, "");
  ASSERT_TRUE(swept.ok());
  EXPECT_EQ(*swept, 0u);
  now_ms_ += 1;
  swept = requests_->sweep(now_ms_, "");
  ASSERT_TRUE(swept.ok());
  EXPECT_EQ(*swept, 1u);
  auto gone = requests_->get(key_);
  ASSERT_TRUE(gone.ok());
  EXPECT_FALSE(gone->has_value());
}

TEST_F(IdempotencyTest, RequestRecordsRoundTripAndRefuseCorruptBytes) {
  persistence::request_record record;
  record.state = persistence::request_state::kept;
  record.fingerprint = "POST\n/v1/runs\n{}";
  record.http_status = 200;
  record.body = std::string("\0{}", 3);
  record.expires_at_ms = 42;
  auto bytes = persistence::encode(record);
  auto back = persistence::decode_request(bytes);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->body, record.body);
  EXPECT_EQ(back->http_status, 200u);
  for (std::size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_FALSE(persistence::decode_request(bytes.substr(0, cut)).ok());
  }
  bytes[5] ^= 1;
  EXPECT_EQ(persistence::decode_request(bytes).error().code,
            errc::corrupt_record);
}

}  // namespace
}  // namespace durin::gateway
