// Goal: RFC 3339 times are read strictly (base/time_text.hpp): every field
// in its range and its exact digits, so a mistyped time is refused with a
// clear error instead of rolling over into another day, month or year; what
// RFC 3339 allows (offsets, a lower-case t and z, fractions of any length,
// a leap second) is read to the right instant. (base/ has no test binary
// of its own; its one parser is tested here, next to its users.)
#include "base/time_text.hpp"

#include <gtest/gtest.h>

#include <string>

namespace durin::time_text {
namespace {

TEST(TimeTextTest, ATimeOutOfItsFieldsRangesIsRefusedNotRolledOver) {
  for (const std::string text :
       {"2026-13-01T00:00:00Z", "2026-00-10T00:00:00Z", "2026-02-29T00:00:00Z",
        "2026-04-31T00:00:00Z", "2026-12-32T00:00:00Z", "2026-12-00T00:00:00Z",
        "2026-12-01T24:00:00Z", "2026-12-01T00:60:00Z", "2026-12-01T00:00:61Z",
        "2026-12-01T00:00:00+24:00", "2026-12-01T00:00:00+01:60"}) {
    EXPECT_FALSE(parse_rfc3339_ms(text).has_value()) << text;
  }
}

TEST(TimeTextTest, ATimeNotInTheExactLayoutIsRefused) {
  for (const std::string text :
       {"", "nope", "2026-12-01", "2026-12-01T00:00:00",
        " 2026-12-01T00:00:00Z", "+026-12-01T00:00:00Z", "2026-1-01T00:00:00Z",
        "2026--1-01T00:00:00Z", "2026-12-01 00:00:00Z", "2026-12-01T00:00:00.Z",
        "2026-12-01T00:00:00ZZ", "2026-12-01T00:00:00+0100",
        "2026-12-01T00:00:00+1:00", "2026-12-01T0:00:00Z"}) {
    EXPECT_FALSE(parse_rfc3339_ms(text).has_value()) << text;
  }
}

TEST(TimeTextTest, WhatRfc3339AllowsIsReadToTheRightInstant) {
  const auto utc = parse_rfc3339_ms("2026-12-01T09:00:00Z");
  ASSERT_TRUE(utc.has_value());
  EXPECT_EQ(format_rfc3339_ms(*utc), "2026-12-01T09:00:00.000Z");
  EXPECT_EQ(parse_rfc3339_ms("2026-12-01t09:00:00z"), utc);
  EXPECT_EQ(parse_rfc3339_ms("2026-12-01T10:30:00+01:30"), utc);
  EXPECT_EQ(parse_rfc3339_ms("2026-12-01T04:00:00-05:00"), utc);
  EXPECT_EQ(parse_rfc3339_ms("2026-12-01T09:00:00.2Z"), *utc + 200);
  EXPECT_EQ(parse_rfc3339_ms("2026-12-01T09:00:00.25Z"), *utc + 250);
  EXPECT_EQ(parse_rfc3339_ms("2026-12-01T09:00:00.123456789Z"), *utc + 123);
  EXPECT_EQ(parse_rfc3339_ms("2024-02-29T00:00:00Z"),
            *parse_rfc3339_ms("2024-03-01T00:00:00Z") - 86'400'000);
  EXPECT_EQ(parse_rfc3339_ms("2016-12-31T23:59:60Z"),
            parse_rfc3339_ms("2017-01-01T00:00:00Z"));
  EXPECT_EQ(parse_rfc3339_ms("1970-01-01T00:00:00Z"), 0);
}

}  // namespace
}  // namespace durin::time_text
