// Goal: every record kind survives encode/decode unchanged, the frame is
// byte for byte what persistence/README.md documents, and no bytes at all
// can crash a decoder: damaged values are corrupt-record. Method: round trips
// over every enum value; hand-built bodies wrapped in valid frames (so the
// body parser, not the checksum, must refuse them); and a randomized test
// (seed printed, DURIN_TEST_SEED replays it) that flips bits, truncates,
// extends and replaces thousands of encodings.
#include "persistence/codec.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "persistence/keys.hpp"
#include "test_support.hpp"

namespace durin::persistence {
namespace {

using namespace std::string_literals;

// Wraps `body` in a valid frame with the given version byte.
std::string frame(std::string_view body,
                  std::uint8_t version = codec::format_version) {
  std::string out(1, static_cast<char>(version));
  out.append(body);
  keys::put_u32(out, codec::crc32c(out));
  return out;
}

// The body of a valid frame.
std::string body_of(std::string_view framed) {
  return std::string(framed.substr(1, framed.size() - 5));
}

std::string u32_string(std::string_view text) {
  std::string out;
  keys::put_u32(out, static_cast<std::uint32_t>(text.size()));
  out.append(text);
  return out;
}

run_record sample_run() {
  run_record record;
  record.id = "run_01HZX";
  record.flow = "review-order";
  record.status = run_status::waiting;
  record.input =
      "\x81\xa7orderId\xa5"
      "A-100"s;
  record.output = "\x00\xff\x00"s;  // binary, with NULs
  record.error_code = "step-failed";
  record.error_message = "score-order failed for good";
  record.created_at_ms = 1'700'000'000'000;
  record.started_at_ms = -1;  // negative survives (two's complement)
  record.completed_at_ms = 0;
  record.spec_version = 7;
  return record;
}

event_record sample_event(event_kind kind) {
  event_record event;
  event.kind = kind;
  event.call = 0x0102030405060708ull;
  event.at_ms = 1'700'000'000'123;
  event.name = "score-order";
  event.attempt = 3;
  event.attempt_id = "att_9";
  event.data = "\x93\x01\x02\x03"s;
  event.error_code = "flow-error";
  event.error_message = "boom";
  event.due_ms = -7;
  return event;
}

TEST(CodecTest, Crc32cMatchesPublishedVectors) {
  EXPECT_EQ(codec::crc32c(""), 0u);
  EXPECT_EQ(codec::crc32c("123456789"), 0xE3069283u);
  // RFC 3720, B.4: 32 zero bytes, 32 0xFF bytes, bytes 0..31.
  EXPECT_EQ(codec::crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(codec::crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
  }
  EXPECT_EQ(codec::crc32c(ascending), 0x46DD794Eu);
}

// The hardware path (8 bytes at a time, then a tail) and the table agree on
// every length and alignment.
TEST(CodecTest, Crc32cHardwareAndTableAgree) {
  std::mt19937 random(7);
  std::string bytes;
  for (int length = 0; length < 300; ++length) {
    bytes.push_back(static_cast<char>(random()));
    for (std::size_t offset = 0; offset < 8 && offset <= bytes.size();
         ++offset) {
      std::string_view view(bytes);
      view.remove_prefix(offset);
      ASSERT_EQ(codec::crc32c(view), codec::crc32c_portable(view))
          << "length " << view.size();
    }
  }
  EXPECT_EQ(codec::crc32c_portable("123456789"), 0xE3069283u);
}

TEST(CodecTest, MarkerIsVersionByteAndItsChecksum) {
  const std::string marker = codec::encode_marker();
  std::string expected = "\x01"s;
  keys::put_u32(expected, codec::crc32c("\x01"));
  EXPECT_EQ(marker, expected);
  EXPECT_TRUE(codec::decode_marker(marker).ok());
}

TEST(CodecTest, RunRecordLayoutIsTheDocumentedOne) {
  run_record record;
  record.id = "r";
  record.flow = "f";
  record.status = run_status::completed;
  record.output = "o";
  record.created_at_ms = 1;
  record.started_at_ms = 2;
  record.completed_at_ms = 3;
  record.spec_version = 1;
  record.tenant = "t";
  record.start_token = "k";
  const std::string body =
      "\x00\x00\x00\x01r"                 // id
      "\x00\x00\x00\x01"                  // flow length
      "f"                                 // flow
      "\x04"                              // status: completed
      "\x00\x00\x00\x00"                  // input: empty
      "\x00\x00\x00\x01o"                 // output
      "\x00\x00\x00\x00"                  // error_code
      "\x00\x00\x00\x00"                  // error_message
      "\x00\x00\x00\x00\x00\x00\x00\x01"  // created_at_ms
      "\x00\x00\x00\x00\x00\x00\x00\x02"  // started_at_ms
      "\x00\x00\x00\x00\x00\x00\x00\x03"  // completed_at_ms
      "\x00\x00\x00\x01"                  // spec_version
      "\x00\x00\x00\x01t"                 // tenant
      "\x00\x00\x00\x01k"s;               // start_token
  EXPECT_EQ(codec::encode(record), frame(body));
}

// A run a schedule started has two trailing fields; a record without them
// (every other run, and every run written before them) still decodes.
TEST(CodecTest, ScheduledRunRecordAddsScheduleIdAndOccurrenceAtTheEnd) {
  run_record record;
  record.id = "r";
  record.flow = "f";
  record.tenant = "t";
  const auto plain = codec::encode(record);
  record.schedule_id = "s";
  record.occurrence_ms = 5;
  const auto scheduled = codec::encode(record);
  // The plain body, then str "s" and i64 5, under a new checksum.
  EXPECT_EQ(scheduled.substr(0, plain.size() - 4),
            plain.substr(0, plain.size() - 4));
  EXPECT_EQ(scheduled.substr(plain.size() - 4, 13),
            "\x00\x00\x00\x01s\x00\x00\x00\x00\x00\x00\x00\x05"s);
  auto decoded = codec::decode_run(scheduled);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, record);
  auto old = codec::decode_run(plain);
  ASSERT_TRUE(old.ok());
  EXPECT_TRUE(old->schedule_id.empty());
  EXPECT_EQ(old->occurrence_ms, 0);
}

TEST(CodecTest, EventRecordLayoutIsTheDocumentedOne) {
  event_record event;
  event.kind = event_kind::timer_armed;
  event.call = 2;
  event.at_ms = 3;
  event.name = "n";
  event.attempt = 4;
  event.due_ms = 5;
  const std::string body =
      "\x05"                                // kind: timer_armed
      "\x00\x00\x00\x00\x00\x00\x00\x02"    // call
      "\x00\x00\x00\x00\x00\x00\x00\x03"    // at_ms
      "\x00\x00\x00\x01n"                   // name
      "\x00\x00\x00\x04"                    // attempt
      "\x00\x00\x00\x00"                    // attempt_id
      "\x00\x00\x00\x00"                    // data
      "\x00\x00\x00\x00"                    // error_code
      "\x00\x00\x00\x00"                    // error_message
      "\x00\x00\x00\x00\x00\x00\x00\x05"s;  // due_ms
  EXPECT_EQ(codec::encode(event), frame(body));
}

TEST(CodecTest, RunRecordRoundTripsInEveryStoredStatus) {
  for (int status = 1; status <= 6; ++status) {
    run_record record = sample_run();
    record.status = static_cast<run_status>(status);
    auto decoded = codec::decode_run(codec::encode(record));
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    EXPECT_EQ(*decoded, record) << "status " << status;
  }
  const run_record empty;  // all defaults, empty strings
  auto decoded = codec::decode_run(codec::encode(empty));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, empty);
}

TEST(CodecTest, EventRecordRoundTripsForEveryKind) {
  for (int kind = 1; kind <= event_kind_max; ++kind) {
    const event_record event = sample_event(static_cast<event_kind>(kind));
    auto decoded = codec::decode_event(codec::encode(event));
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    EXPECT_EQ(*decoded, event) << "kind " << kind;
  }
}

TEST(CodecTest, BytesRoundTrip) {
  for (const std::string& value :
       {""s, "x"s, "\x00\x01\xff"s, std::string(100'000, 'z')}) {
    auto decoded = codec::decode_bytes(codec::encode_bytes(value));
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, value);
  }
}

TEST(CodecTest, UnknownFormatVersionIsCorruptRecord) {
  const std::string body = body_of(codec::encode(sample_run()));
  auto decoded = codec::decode_run(frame(body, 2));
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.error().code, errc::corrupt_record);
  EXPECT_NE(decoded.error().message.find("version 2"), std::string::npos);
}

TEST(CodecTest, ChecksumMismatchIsCorruptRecord) {
  std::string bytes = codec::encode(sample_event(event_kind::run_started));
  bytes.back() ^= 0x01;
  auto decoded = codec::decode_event(bytes);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.error().code, errc::corrupt_record);
  EXPECT_NE(decoded.error().message.find("checksum"), std::string::npos);
}

TEST(CodecTest, EnumsOutsideTheirRangeAreCorruptEvenWithAValidChecksum) {
  const std::string run_body = body_of(codec::encode(sample_run()));
  const std::size_t status_at =
      4 + sample_run().id.size() + 4 + sample_run().flow.size();
  for (const char status : {'\x00', '\x07', '\x09', '\xff'}) {
    std::string body = run_body;
    body[status_at] = status;
    auto decoded = codec::decode_run(frame(body));
    ASSERT_FALSE(decoded.ok()) << int(status);
    EXPECT_EQ(decoded.error().code, errc::corrupt_record);
  }
  const std::string event_body =
      body_of(codec::encode(sample_event(event_kind::run_started)));
  for (const char kind :
       {'\x00', static_cast<char>(event_kind_max + 1), '\xff'}) {
    std::string body = event_body;
    body[0] = kind;
    auto decoded = codec::decode_event(frame(body));
    ASSERT_FALSE(decoded.ok()) << int(kind);
    EXPECT_EQ(decoded.error().code, errc::corrupt_record);
  }
}

TEST(CodecTest, TrailingBytesAreCorruptRecord) {
  // After start_token come the optional groups (a schedule's, a lineage's,
  // then memo and search attributes): a stray byte where one begins is a
  // field cut short, and bytes after the last group are trailing.
  auto scheduled = sample_run();
  scheduled.schedule_id = "s";
  scheduled.occurrence_ms = 1;
  auto cut = codec::decode_run(frame(body_of(codec::encode(scheduled)) + "x"));
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.error().code, errc::corrupt_record);
  auto linked = sample_run();
  linked.parent_run_id = "run_p";
  linked.search = {{"a", search_value::of_bool(true)}};
  const std::string linked_body = body_of(codec::encode(linked));
  auto run = codec::decode_run(frame(linked_body + "x"));
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.error().code, errc::corrupt_record);
  EXPECT_NE(run.error().message.find("trailing"), std::string::npos);
  const std::string plain_body = body_of(codec::encode(sample_run()));
  auto partial = codec::decode_run(frame(plain_body + "x"));
  ASSERT_FALSE(partial.ok());
  EXPECT_EQ(partial.error().code, errc::corrupt_record);
  std::string empty_schedule = plain_body;
  keys::put_u32(empty_schedule, 0);
  keys::put_u64(empty_schedule, 1);
  auto empty = codec::decode_run(frame(empty_schedule));
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().code, errc::corrupt_record);
  EXPECT_EQ(codec::decode_marker(frame("x")).error().code,
            errc::corrupt_record);
  EXPECT_EQ(codec::decode_bytes(frame(u32_string("ab") + "c")).error().code,
            errc::corrupt_record);
}

TEST(CodecTest, LengthAboveTheFieldLimitIsRefusedBeforeReading) {
  // id claims 4 GiB - 1: must be refused by the limit, not attempted.
  std::string body;
  keys::put_u32(body, 0xFFFFFFFFu);
  auto decoded = codec::decode_run(frame(body));
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.error().code, errc::corrupt_record);
  EXPECT_NE(decoded.error().message.find("limit"), std::string::npos);
  // Within the limit but longer than what remains: truncated.
  std::string short_body;
  keys::put_u32(short_body, 1000);
  short_body += "abc";
  auto truncated = codec::decode_run(frame(short_body));
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.error().code, errc::corrupt_record);
  EXPECT_NE(truncated.error().message.find("'id'"), std::string::npos);
}

TEST(CodecTest, ATerminatedRunRoundTrips) {
  run_record terminated = sample_run();
  terminated.status = run_status::terminated;
  EXPECT_TRUE(codec::validate(terminated).ok());
  auto decoded = codec::decode_run(codec::encode(terminated));
  ASSERT_TRUE(decoded.ok()) << decoded.error().to_string();
  EXPECT_EQ(decoded->status, run_status::terminated);
}

TEST(CodecTest, ValidateRefusesWhatCouldNotBeReadBack) {
  EXPECT_TRUE(codec::validate(sample_run()).ok());
  run_record blocked = sample_run();
  blocked.status = run_status::blocked;
  EXPECT_EQ(codec::validate(blocked).error().code, errc::invalid_argument);
  run_record huge = sample_run();
  huge.input.assign(codec::field_bytes_max + 1, 'x');
  const auto refused = codec::validate(huge);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::invalid_argument);
  EXPECT_NE(refused.error().message.find("input"), std::string::npos);

  EXPECT_TRUE(codec::validate(sample_event(event_kind::run_failed)).ok());
  event_record unknown = sample_event(event_kind::run_failed);
  unknown.kind = static_cast<event_kind>(event_kind_max + 1);
  EXPECT_EQ(codec::validate(unknown).error().code, errc::invalid_argument);
}

TEST(CodecTest, EveryTruncationAndSingleBitFlipIsCorruptRecord) {
  // CRC-32C detects every single-bit error, so none may decode.
  const std::string run = codec::encode(sample_run());
  const std::string event =
      codec::encode(sample_event(event_kind::step_failed));
  for (std::size_t size = 0; size < run.size(); ++size) {
    EXPECT_EQ(codec::decode_run(run.substr(0, size)).error().code,
              errc::corrupt_record)
        << size;
  }
  for (std::size_t size = 0; size < event.size(); ++size) {
    EXPECT_EQ(codec::decode_event(event.substr(0, size)).error().code,
              errc::corrupt_record)
        << size;
  }
  for (std::size_t bit = 0; bit < run.size() * 8; ++bit) {
    std::string flipped = run;
    flipped[bit / 8] ^= static_cast<char>(1 << (bit % 8));
    EXPECT_EQ(codec::decode_run(flipped).error().code, errc::corrupt_record)
        << bit;
  }
  for (std::size_t bit = 0; bit < event.size() * 8; ++bit) {
    std::string flipped = event;
    flipped[bit / 8] ^= static_cast<char>(1 << (bit % 8));
    EXPECT_EQ(codec::decode_event(flipped).error().code, errc::corrupt_record)
        << bit;
  }
}

// ---- randomized -------------------------------------------------------------

std::string random_bytes(std::mt19937_64& random, std::size_t size_max) {
  std::string out(random() % (size_max + 1), '\0');
  for (auto& byte : out) {
    byte = static_cast<char>(random());
  }
  return out;
}

run_record random_run(std::mt19937_64& random) {
  run_record record;
  record.id = random_bytes(random, 40);
  record.flow = random_bytes(random, 20);
  record.status = static_cast<run_status>(1 + random() % 6);
  record.input = random_bytes(random, 200);
  record.output = random_bytes(random, 200);
  record.error_code = random_bytes(random, 20);
  record.error_message = random_bytes(random, 60);
  record.created_at_ms = static_cast<std::int64_t>(random());
  record.started_at_ms = static_cast<std::int64_t>(random());
  record.completed_at_ms = static_cast<std::int64_t>(random());
  record.spec_version = static_cast<std::uint32_t>(random());
  return record;
}

event_record random_event(std::mt19937_64& random) {
  event_record event;
  event.kind = static_cast<event_kind>(1 + random() % event_kind_max);
  event.call = random();
  event.at_ms = static_cast<std::int64_t>(random());
  event.name = random_bytes(random, 20);
  event.attempt = static_cast<std::uint32_t>(random());
  event.attempt_id = random_bytes(random, 20);
  event.data = random_bytes(random, 200);
  event.error_code = random_bytes(random, 20);
  event.error_message = random_bytes(random, 60);
  event.due_ms = static_cast<std::int64_t>(random());
  return event;
}

// Damages `bytes` in one of several ways.
std::string damage(std::mt19937_64& random, std::string bytes) {
  switch (random() % 4) {
    case 0: {  // flip 1..3 bits
      const int flips = 1 + static_cast<int>(random() % 3);
      for (int i = 0; i < flips; ++i) {
        const std::size_t bit = random() % (bytes.size() * 8);
        bytes[bit / 8] ^= static_cast<char>(1 << (bit % 8));
      }
      return bytes;
    }
    case 1:  // truncate
      return bytes.substr(0, random() % bytes.size());
    case 2:  // extend
      return bytes + random_bytes(random, 16).append(1, 'x');
    default:  // overwrite a run of bytes
    {
      const std::size_t at = random() % bytes.size();
      const std::size_t length = 1 + random() % 8;
      for (std::size_t i = at; i < bytes.size() && i < at + length; ++i) {
        bytes[i] = static_cast<char>(random());
      }
      return bytes;
    }
  }
}

// Decodes `bytes` with every decoder: each must give a value or
// corrupt-record, and must not crash (sanitizers catch any overread).
void decode_all(const std::string& bytes) {
  auto run = codec::decode_run(bytes);
  if (!run.ok()) {
    ASSERT_EQ(run.error().code, errc::corrupt_record);
  }
  auto event = codec::decode_event(bytes);
  if (!event.ok()) {
    ASSERT_EQ(event.error().code, errc::corrupt_record);
  }
  auto marker = codec::decode_marker(bytes);
  if (!marker.ok()) {
    ASSERT_EQ(marker.error().code, errc::corrupt_record);
  }
  auto raw = codec::decode_bytes(bytes);
  if (!raw.ok()) {
    ASSERT_EQ(raw.error().code, errc::corrupt_record);
  }
}

TEST(CodecTest, RandomRecordsRoundTrip) {
  std::mt19937_64 random(testing::test_seed());
  for (int i = 0; i < 2000; ++i) {
    const run_record record = random_run(random);
    auto run = codec::decode_run(codec::encode(record));
    ASSERT_TRUE(run.ok()) << run.error().message;
    ASSERT_EQ(*run, record);
    const event_record event = random_event(random);
    auto decoded = codec::decode_event(codec::encode(event));
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    ASSERT_EQ(*decoded, event);
  }
}

TEST(CodecTest, RandomDamageIsCorruptRecordAndNeverCrashes) {
  std::mt19937_64 random(testing::test_seed());
  for (int i = 0; i < 5000; ++i) {
    const bool is_run = random() % 2 == 0;
    const std::string good = is_run ? codec::encode(random_run(random))
                                    : codec::encode(random_event(random));
    const std::string bad = damage(random, good);
    if (bad == good) {
      continue;  // a flip pair that cancelled out
    }
    // Damage the checksum does not catch is possible only by a 2^-32 fluke.
    if (is_run) {
      auto decoded = codec::decode_run(bad);
      ASSERT_FALSE(decoded.ok()) << "iteration " << i;
      ASSERT_EQ(decoded.error().code, errc::corrupt_record);
    } else {
      auto decoded = codec::decode_event(bad);
      ASSERT_FALSE(decoded.ok()) << "iteration " << i;
      ASSERT_EQ(decoded.error().code, errc::corrupt_record);
    }
    decode_all(bad);
  }
}

TEST(CodecTest, RandomBodiesInValidFramesNeverCrash) {
  // With a correct checksum the body parser is all that stands between
  // garbage and a crash: damaged bodies, re-framed, must decode or be
  // corrupt-record.
  std::mt19937_64 random(testing::test_seed());
  for (int i = 0; i < 5000; ++i) {
    const std::string good = random() % 2 == 0
                                 ? codec::encode(random_run(random))
                                 : codec::encode(random_event(random));
    decode_all(frame(damage(random, body_of(good))));
    decode_all(frame(random_bytes(random, 64)));
    decode_all(random_bytes(random, 64));
  }
}

}  // namespace
}  // namespace durin::persistence

namespace durin::persistence {
namespace {

// The command id is a late field: records written before it decode with
// none, and a record with one round-trips.
TEST(CodecTest, TokenRecordCommandIdIsOptionalAndRoundTrips) {
  token_record record;
  record.tenant = "default";
  record.token = "order:1";
  record.owner_run = "run_1";
  record.metadata = "\x80";  // an empty MessagePack map
  auto without = codec::decode_token(codec::encode(record));
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(*without, record);
  record.owner_command = "cmd-1";
  auto with = codec::decode_token(codec::encode(record));
  ASSERT_TRUE(with.ok());
  EXPECT_EQ(with->owner_command, "cmd-1");
  EXPECT_EQ(*with, record);
}

// A child's parent and a successor's predecessor are late fields: a
// record with neither keeps its earlier layout (so records written before
// them decode as they are), a record with them round-trips, and a
// parent_close out of range is corrupt.
TEST(CodecTest, RunRecordParentAndPredecessorAreOptionalAndRoundTrip) {
  run_record record = sample_run();
  auto plain = codec::encode(record);
  auto without = codec::decode_run(plain);
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(*without, record);
  record.parent_run_id = "run_parent";
  record.parent_close = 2;
  record.continued_from = "run_before";
  auto linked = codec::encode(record);
  // An empty schedule group (str "", i64 0), then two strs and a u8.
  EXPECT_EQ(linked.size(), plain.size() + 4 + 8 + 4 + 10 + 1 + 4 + 10);
  auto with = codec::decode_run(linked);
  ASSERT_TRUE(with.ok());
  EXPECT_EQ(*with, record);
  std::string body = body_of(linked);
  body[body.size() - 4 - 10 - 1] = '\x04';
  auto bad = codec::decode_run(frame(body));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, errc::corrupt_record);
}

// A scheduled run can also be a successor (continue-as-new of a run a
// schedule started): both groups round-trip; a lineage group naming
// neither a parent nor a predecessor is never written, so it is corrupt.
TEST(CodecTest, RunRecordWithScheduleAndLineageRoundTrips) {
  run_record record = sample_run();
  record.schedule_id = "nightly";
  record.occurrence_ms = 1700000000000;
  record.continued_from = "run_before";
  auto both = codec::decode_run(codec::encode(record));
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(*both, record);
  std::string empty_lineage = body_of(codec::encode(sample_run()));
  keys::put_u32(empty_lineage, 1);
  empty_lineage += "s";
  keys::put_u64(empty_lineage, 1);
  keys::put_u32(empty_lineage, 0);
  empty_lineage.push_back('\x00');
  keys::put_u32(empty_lineage, 0);
  auto empty = codec::decode_run(frame(empty_lineage));
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().code, errc::corrupt_record);
}

// Memo and search attributes are a fourth optional group: a record without
// them keeps the layout it had, so every record written before decodes; a
// record with them writes the schedule and lineage groups empty before.
TEST(CodecTest, RunRecordMemoAndSearchAttributesAreOptionalAndRoundTrip) {
  run_record record = sample_run();
  const auto plain = codec::encode(record);
  record.memo = "\x81\xa1k\x01"s;
  record.search = {{"customer", search_value::keyword("acme")},
                   {"priority", search_value::of_int(-3)},
                   {"score", search_value::of_double(0.5)},
                   {"vip", search_value::of_bool(true)},
                   {"dueAt", search_value::time_ms(1'800'000'000'000)}};
  const auto tagged = codec::encode(record);
  EXPECT_EQ(tagged.substr(0, plain.size() - 4),
            plain.substr(0, plain.size() - 4));
  auto decoded = codec::decode_run(tagged);
  ASSERT_TRUE(decoded.ok()) << decoded.error().to_string();
  EXPECT_EQ(*decoded, record);
  // With a lineage too.
  record.parent_run_id = "run_parent";
  auto linked = codec::decode_run(codec::encode(record));
  ASSERT_TRUE(linked.ok());
  EXPECT_EQ(*linked, record);
  // An old record (no group) still decodes, with neither.
  auto old = codec::decode_run(plain);
  ASSERT_TRUE(old.ok());
  EXPECT_TRUE(old->memo.empty());
  EXPECT_TRUE(old->search.empty());
}

TEST(CodecTest, ASearchGroupThatIsEmptyOrBadIsCorruptRecord) {
  auto group = [](std::uint32_t count, std::string rest) {
    std::string body = body_of(codec::encode(sample_run()));
    keys::put_u32(body, 0);  // schedule group, empty
    keys::put_u64(body, 0);
    keys::put_u32(body, 0);  // lineage group, empty
    body.push_back('\x00');
    keys::put_u32(body, 0);
    keys::put_u32(body, 0);  // memo, empty
    keys::put_u32(body, count);
    return frame(body + rest);
  };
  std::string unknown_type = u32_string("a") + "\x09";
  std::string twice =
      u32_string("a") + "\x04\x01" + u32_string("a") + "\x04\x00";
  for (const auto& bytes : {group(0, ""), group(1, unknown_type),
                            group(2, twice), group(1'000'000, "")}) {
    auto decoded = codec::decode_run(bytes);
    ASSERT_FALSE(decoded.ok());
    EXPECT_EQ(decoded.error().code, errc::corrupt_record);
  }
  auto fine = codec::decode_run(group(1, u32_string("a") + "\x04\x01"));
  ASSERT_TRUE(fine.ok()) << fine.error().to_string();
  EXPECT_EQ(fine->search.at("a"), search_value::of_bool(true));
}

TEST(CodecTest, ValidateRefusesSearchAttributesThatBreakTheRules) {
  run_record record = sample_run();
  record.search = {{"9lives", search_value::of_int(1)}};
  auto refused = codec::validate(record);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, errc::invalid_argument);
  EXPECT_NE(refused.error().message.find("'9lives'"), std::string::npos);
}

}  // namespace
}  // namespace durin::persistence
