// Goal: every key layout of persistence/keys.hpp is exactly what
// persistence/README.md documents, sorts the way the store's scans rely on
// (numbers numerically, a run's history by sequence, timers by due time), and
// never lets two different tuples share a key. Method: byte-exact checks of
// each layout, ordering checks over random numbers, and decoders fed every
// truncation of valid keys.
#include "persistence/keys.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace durin::persistence {
namespace {

using namespace std::string_literals;

TEST(KeysTest, RunKeyIsU16LengthThenIdBytes) {
  EXPECT_EQ(keys::run("run_1"), "\x00\x05run_1"s);
  EXPECT_EQ(keys::run(""), "\x00\x00"s);
  EXPECT_EQ(keys::run(std::string(300, 'x')),
            "\x01\x2c"s + std::string(300, 'x'));
  EXPECT_EQ(keys::active("run_1"), keys::run("run_1"));
}

TEST(KeysTest, HistoryKeyIsPrefixThenBigEndianSequence) {
  EXPECT_EQ(keys::history_prefix("r"), "\x00\x01r"s);
  EXPECT_EQ(keys::history("r", 0x0102030405060708ull),
            "\x00\x01r\x01\x02\x03\x04\x05\x06\x07\x08"s);
}

TEST(KeysTest, TimerKeyIsDueThenRunThenCallThenKind) {
  const timer_record timer{0x0A0B, "r1", 7, timer_kind::step_retry};
  EXPECT_EQ(keys::timer(timer),
            "\x00\x00\x00\x00\x00\x00\x0a\x0b"
            "\x00\x02r1"
            "\x00\x00\x00\x00\x00\x00\x00\x07"
            "\x02"s);
}

TEST(KeysTest, ScheduleKeyIsTenantThenIdLengthPrefixed) {
  EXPECT_EQ(keys::schedule("default", "nightly"),
            "\x00\x07"
            "default"
            "\x00\x07"
            "nightly"s);
  auto decoded = keys::decode_schedule(keys::schedule("t", "s"));
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->tenant, "t");
  EXPECT_EQ(decoded->token, "s");
  EXPECT_FALSE(keys::decode_schedule("\x00\x05"
                                     "ab"s)
                   .has_value());
}

TEST(KeysTest, MetaKeyIsTheRawName) {
  EXPECT_EQ(keys::meta("schema_version"), "schema_version");
}

TEST(KeysTest, LengthPrefixedStringsDoNotCollide) {
  // ("ab", 1) and ("a", "b"...) must differ: without the prefix they would
  // share bytes.
  EXPECT_NE(keys::run("ab"), keys::run("a") + "b");
  EXPECT_NE(keys::history("ab", 1), keys::history("a", 1));
  // No run's history prefix is a prefix of another run's history key.
  const std::vector<std::string> ids = {"a", "ab", "a\0"s, "b", "", "aa"};
  for (const auto& one : ids) {
    for (const auto& other : ids) {
      if (one == other) {
        continue;
      }
      const std::string key = keys::history(other, 1);
      EXPECT_FALSE(key.starts_with(keys::history_prefix(one)))
          << "'" << one << "' prefix matches a key of '" << other << "'";
    }
  }
  const timer_record first{5, "ab", 1, timer_kind::sleep};
  const timer_record second{5, "a", 1, timer_kind::sleep};
  EXPECT_NE(keys::timer(first), keys::timer(second));
}

TEST(KeysTest, BigEndianSequencesSortNumerically) {
  const std::uint64_t seed = testing::test_seed();
  std::mt19937_64 random(seed);
  std::vector<std::uint64_t> interesting = {
      0,     1,          255,
      256,   257,        65535,
      65536, 1ull << 32, std::numeric_limits<std::uint64_t>::max()};
  for (int i = 0; i < 2000; ++i) {
    interesting.push_back(random() >> (random() % 64));
  }
  for (std::size_t i = 1; i < interesting.size(); ++i) {
    const std::uint64_t a = interesting[i - 1];
    const std::uint64_t b = interesting[i];
    EXPECT_EQ(a < b, keys::history("run", a) < keys::history("run", b))
        << a << " vs " << b;
  }
}

TEST(KeysTest, TimerKeysSortByDueThenRunThenCallThenKind) {
  std::vector<timer_record> ordered = {
      {0, "b", 0, timer_kind::sleep},
      {1, "a", 0, timer_kind::sleep},
      {255, "a", 0, timer_kind::sleep},
      {256, "a", 0, timer_kind::sleep},
      {256, "a", 1, timer_kind::sleep},
      {256, "a", 1, timer_kind::step_retry},
      {256, "a", 256, timer_kind::sleep},
      {256, "b", 0, timer_kind::sleep},
      {1'700'000'000'000, "a", 0, timer_kind::sleep},
      {std::numeric_limits<std::int64_t>::max(), "a", 0, timer_kind::sleep},
  };
  for (std::size_t i = 1; i < ordered.size(); ++i) {
    EXPECT_LT(keys::timer(ordered[i - 1]), keys::timer(ordered[i])) << i;
  }
}

TEST(KeysTest, TimerUpperBoundSeparatesDueFromLater) {
  const std::string longest_id(keys::string_bytes_max, '\xff');
  for (const std::int64_t due : {std::int64_t{0}, std::int64_t{1},
                                 std::int64_t{255}, std::int64_t{1} << 40}) {
    const std::string bound = keys::timer_upper_bound(due);
    EXPECT_LT(keys::timer({due, longest_id, ~0ull, timer_kind::step_retry}),
              bound);
    EXPECT_LE(bound, keys::timer({due + 1, "", 0, timer_kind::sleep}));
  }
  // The largest due still sorts below its bound (computed unsigned).
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  EXPECT_LT(keys::timer({max, "r", 0, timer_kind::sleep}),
            keys::timer_upper_bound(max));
  // Nothing is due before 0: the bound excludes every key.
  EXPECT_LE(keys::timer_upper_bound(-5),
            keys::timer({0, "", 0, timer_kind::sleep}));
}

TEST(KeysTest, NegativeDueIsStoredAsZero) {
  const timer_record negative{-42, "r", 1, timer_kind::sleep};
  auto decoded = keys::decode_timer(keys::timer(negative));
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->due_ms, 0);
}

TEST(KeysTest, DecodersRoundTrip) {
  EXPECT_EQ(keys::decode_run(keys::run("run_x")), "run_x");
  EXPECT_EQ(keys::decode_active(keys::active("")), "");
  auto history = keys::decode_history(keys::history("r\0x"s, 99));
  ASSERT_TRUE(history.has_value());
  EXPECT_EQ(history->run_id, "r\0x"s);
  EXPECT_EQ(history->sequence, 99u);
  const timer_record timer{123456, "run_y", 3, timer_kind::step_retry};
  EXPECT_EQ(keys::decode_timer(keys::timer(timer)), timer);
}

TEST(KeysTest, DecodersRejectEveryTruncationAndTrailingByte) {
  const std::string run = keys::run("run_1");
  const std::string history = keys::history("run_1", 5);
  const std::string timer = keys::timer({9, "run_1", 2, timer_kind::sleep});
  for (std::size_t size = 0; size < run.size(); ++size) {
    EXPECT_FALSE(keys::decode_run(run.substr(0, size))) << size;
  }
  for (std::size_t size = 0; size < history.size(); ++size) {
    EXPECT_FALSE(keys::decode_history(history.substr(0, size))) << size;
  }
  for (std::size_t size = 0; size < timer.size(); ++size) {
    EXPECT_FALSE(keys::decode_timer(timer.substr(0, size))) << size;
  }
  EXPECT_FALSE(keys::decode_run(run + "x"));
  EXPECT_FALSE(keys::decode_active(run + "x"));
  EXPECT_FALSE(keys::decode_history(history + "x"));
  EXPECT_FALSE(keys::decode_timer(timer + "x"));
}

TEST(KeysTest, DecodeTimerRejectsUnknownKindAndDueAboveInt64) {
  std::string bad_kind = keys::timer({9, "r", 2, timer_kind::sleep});
  bad_kind.back() = '\x04';
  EXPECT_FALSE(keys::decode_timer(bad_kind));
  bad_kind.back() = '\x00';
  EXPECT_FALSE(keys::decode_timer(bad_kind));
  std::string huge_due = keys::timer({9, "r", 2, timer_kind::sleep});
  huge_due[0] = '\x80';
  EXPECT_FALSE(keys::decode_timer(huge_due));
}

TEST(KeysTest, SearchEntryIsTenantNameTypeValueThenRun) {
  EXPECT_EQ(keys::search_entry("t", "n", search_value::of_int(1), "r"),
            "\x00\x01t\x00\x01n\x02\x80\x00\x00\x00\x00\x00\x00\x01"
            "\x00\x01r"s);
  EXPECT_EQ(keys::search_entry("t", "k", search_value::keyword("a\0b"s), "r"),
            "\x00\x01t\x00\x01k\x01"
            "a\x00\xff"
            "b\x00\x01\x00\x01r"s);
  EXPECT_EQ(keys::search_entry("t", "b", search_value::of_bool(true), "r"),
            "\x00\x01t\x00\x01"
            "b\x04\x01\x00\x01r"s);
  // The example of persistence/README.md.
  EXPECT_EQ(
      keys::search_entry("t", "priority", search_value::of_int(3), "run_1"),
      "\x00\x01t\x00\x08priority\x02\x80\x00\x00\x00\x00\x00\x00\x03"
      "\x00\x05run_1"s);
  // -0 and +0 are equal in every comparison: one key.
  EXPECT_EQ(keys::search_value_prefix("t", "d", search_value::of_double(-0.0)),
            keys::search_value_prefix("t", "d", search_value::of_double(0.0)));
}

// Values of one type must sort as the query language compares them, since
// a comparison is read as one key range.
TEST(KeysTest, SearchEntriesSortAsTheirValuesCompare) {
  std::mt19937_64 random(testing::test_seed());
  auto keyword = [&] {
    std::string text;
    for (auto n = random() % 5; n > 0; --n) {
      text.push_back(
          "\0\x01\xff"
          "ab"[random() % 5]);
    }
    return search_value::keyword(text);
  };
  auto number = [&] {
    static const double special[] = {-1e300,   -1.5, -0.0, 0.0,
                                     4.9e-324, 2.5,  1e300};
    return search_value::of_double(
        random() % 2 == 0
            ? special[random() % 7]
            : std::ldexp(static_cast<double>(random() % 2001) - 1000.0,
                         static_cast<int>(random() % 40) - 20));
  };
  auto integer = [&] {
    static const std::int64_t special[] = {INT64_MIN, -1, 0, 1, INT64_MAX};
    return search_value::of_int(random() % 2 == 0
                                    ? special[random() % 5]
                                    : static_cast<std::int64_t>(random()));
  };
  for (int round = 0; round < 5000; ++round) {
    const int type = round % 3;
    auto make = [&] {
      return type == 0 ? keyword() : type == 1 ? number() : integer();
    };
    const search_value a = make();
    const search_value b = make();
    const bool less = type == 0   ? a.text < b.text
                      : type == 1 ? a.number < b.number
                                  : a.integer < b.integer;
    const bool equal = type == 0   ? a.text == b.text
                       : type == 1 ? a.number == b.number
                                   : a.integer == b.integer;
    const auto key_a = keys::search_entry("t", "x", a, "r");
    const auto key_b = keys::search_entry("t", "x", b, "r");
    EXPECT_EQ(key_a < key_b, less) << round;
    EXPECT_EQ(key_a == key_b, equal) << round;
    auto decoded = keys::decode_search_entry(key_a);
    ASSERT_TRUE(decoded.has_value());
    EXPECT_EQ(decoded->run_id, "r");
    EXPECT_EQ(decoded->value.type, a.type);
    EXPECT_TRUE(type == 0   ? decoded->value.text == a.text
                : type == 1 ? decoded->value.number == a.number
                            : decoded->value.integer == a.integer);
  }
}

TEST(KeysTest, DecodeSearchEntryRefusesEveryTruncation) {
  const auto key =
      keys::search_entry("t", "k", search_value::keyword("ab"), "run_1");
  for (std::size_t size = 0; size < key.size(); ++size) {
    EXPECT_FALSE(keys::decode_search_entry(key.substr(0, size)).has_value())
        << size;
  }
  EXPECT_TRUE(keys::decode_search_entry(key).has_value());
}

TEST(KeysTest, BigEndianHelpersRoundTrip) {
  std::string bytes;
  keys::put_u16(bytes, 0xBEEF);
  keys::put_u32(bytes, 0xDEADBEEFu);
  keys::put_u64(bytes, 0x0123456789ABCDEFull);
  EXPECT_EQ(bytes, "\xbe\xef\xde\xad\xbe\xef\x01\x23\x45\x67\x89\xab\xcd\xef"s);
  EXPECT_EQ(keys::get_u16(bytes.data()), 0xBEEF);
  EXPECT_EQ(keys::get_u32(bytes.data() + 2), 0xDEADBEEFu);
  EXPECT_EQ(keys::get_u64(bytes.data() + 6), 0x0123456789ABCDEFull);
}

TEST(KeysTest, LongestIdFitsAndOneMoreIsABug) {
  EXPECT_TRUE(keys::fits(std::string(keys::string_bytes_max, 'a')));
  EXPECT_FALSE(keys::fits(std::string(keys::string_bytes_max + 1, 'a')));
  const std::string longest(keys::string_bytes_max, 'a');
  EXPECT_EQ(keys::decode_run(keys::run(longest)), longest);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH((void)keys::run(longest + "a"), "invariant broken");
}

}  // namespace
}  // namespace durin::persistence
