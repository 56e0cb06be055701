// Goal: the run query language (persistence/run_query.hpp) parses what its
// grammar says, types literals as their fields are, evaluates on run
// records as documented, and refuses everything else with the position.
// Method: parse and match against plain run records; no store.
#include "persistence/run_query.hpp"

#include <gtest/gtest.h>

#include "durin/limits.hpp"

namespace durin::persistence {
namespace {

run_record run(search_attributes attributes,
               run_status status = run_status::running) {
  run_record record;
  record.id = "run_1";
  record.flow = "acme.order";
  record.status = status;
  record.created_at_ms = 1'800'000'000'000;  // 2027-01-15T08:00:00Z
  record.search = std::move(attributes);
  return record;
}

attribute_type_of types(
    std::map<std::string, search_attribute_type, std::less<>> known) {
  return
      [known](std::string_view name) -> std::optional<search_attribute_type> {
        auto found = known.find(name);
        if (found == known.end()) {
          return std::nullopt;
        }
        return found->second;
      };
}

bool query_matches(std::string_view text, const run_record& record,
                   const attribute_type_of& type_of = nullptr) {
  auto query = parse_run_query(text, type_of);
  EXPECT_TRUE(query.ok()) << text << ": " << query.error().message;
  return query.ok() && matches(*query, record);
}

std::string refusal(std::string_view text,
                    const attribute_type_of& type_of = nullptr) {
  auto query = parse_run_query(text, type_of);
  EXPECT_FALSE(query.ok()) << text;
  if (query.ok()) {
    return {};
  }
  EXPECT_EQ(query.error().code, errc::invalid_argument);
  return query.error().message;
}

TEST(RunQueryTest, AnEmptyQueryMatchesEveryRun) {
  EXPECT_TRUE(query_matches("", run({})));
  EXPECT_TRUE(query_matches("   ", run({})));
}

TEST(RunQueryTest, AndBindsTighterThanOrAndParenthesesGroup) {
  auto record = run({{"a", search_value::of_int(1)}});
  // a = 1 OR (a = 2 AND a = 3)
  EXPECT_TRUE(query_matches("a = 1 OR a = 2 AND a = 3", record));
  // (a = 2 OR a = 1) AND a = 3
  EXPECT_FALSE(query_matches("(a = 2 OR a = 1) AND a = 3", record));
  EXPECT_TRUE(query_matches("((a = 2) or (a = 1)) and a < 3", record));
}

TEST(RunQueryTest, ComparisonsFollowTheirTypes) {
  auto record = run({{"name", search_value::keyword("beta")},
                     {"count", search_value::of_int(10)},
                     {"ratio", search_value::of_double(0.25)},
                     {"vip", search_value::of_bool(false)},
                     {"due", search_value::time_ms(1'800'000'000'000)}});
  auto typed = types({{"name", search_attribute_type::keyword},
                      {"count", search_attribute_type::integer},
                      {"ratio", search_attribute_type::number},
                      {"vip", search_attribute_type::boolean},
                      {"due", search_attribute_type::time}});
  EXPECT_TRUE(
      query_matches("name > 'alpha' AND name < 'gamma'", record, typed));
  EXPECT_TRUE(query_matches("count >= 10 AND count <= 10", record, typed));
  EXPECT_TRUE(query_matches("count > -5", record, typed));
  // A double attribute takes an integer literal as a double.
  EXPECT_TRUE(query_matches("ratio < 1", record, typed));
  EXPECT_TRUE(query_matches("ratio = 2.5e-1", record, typed));
  EXPECT_TRUE(query_matches("vip = FALSE", record, typed));
  EXPECT_TRUE(
      query_matches("due = '2027-01-15T09:00:00+01:00'", record, typed));
  EXPECT_TRUE(query_matches("due > '2027-01-15T07:59:59.999Z'", record, typed));
  EXPECT_TRUE(query_matches("name IN ('alpha', \"beta\")", record, typed));
  EXPECT_FALSE(query_matches("name IN ('alpha')", record, typed));
  EXPECT_TRUE(query_matches("name = 'it\\'s' OR count = 10", record, typed));
}

TEST(RunQueryTest, BuiltInsAreStatusFlowScheduleIdAndTheRunsTimes) {
  auto record = run({}, run_status::waiting);
  EXPECT_TRUE(query_matches("status = 'waiting'", record));
  EXPECT_TRUE(query_matches("status IN ('running', 'waiting')", record));
  EXPECT_TRUE(query_matches("flow = 'acme.order'", record));
  EXPECT_TRUE(query_matches("createdAt = '2027-01-15T08:00:00Z'", record));
  // A run that has not started, ended, or come from a schedule has none of
  // those: no comparison of them holds.
  EXPECT_FALSE(query_matches("startedAt > '1970-01-01T00:00:00Z'", record));
  EXPECT_FALSE(query_matches("completedAt != '2000-01-01T00:00:00Z'", record));
  EXPECT_FALSE(query_matches("scheduleId != 'nightly'", record));
  record.schedule_id = "nightly";
  EXPECT_TRUE(query_matches("scheduleId = 'nightly'", record));
}

TEST(RunQueryTest, AMissingAttributeMatchesNoComparisonNotEvenInequality) {
  auto record = run({});
  EXPECT_FALSE(query_matches("a != 1", record));
  EXPECT_FALSE(query_matches("a = 1", record));
  EXPECT_TRUE(query_matches("a = 1 OR flow = 'acme.order'", record));
}

TEST(RunQueryTest, ALiteralOfAnotherTypeThanTheAttributeIsRefused) {
  auto typed = types({{"count", search_attribute_type::integer},
                      {"vip", search_attribute_type::boolean},
                      {"due", search_attribute_type::time}});
  EXPECT_NE(refusal("count = 'ten'", typed)
                .find("position 9: attribute 'count' is an int; 'ten' is a "
                      "keyword"),
            std::string::npos);
  EXPECT_NE(refusal("count = 1.5", typed).find("is an int; '1.5' is a double"),
            std::string::npos);
  EXPECT_NE(refusal("vip > true", typed).find("compared only with ="),
            std::string::npos);
  EXPECT_NE(refusal("due < 3", typed).find("attribute 'due' is a time"),
            std::string::npos);
  EXPECT_NE(refusal("count IN (1, 'two')", typed).find("position 14"),
            std::string::npos);
}

TEST(RunQueryTest, LimitsAreRefusedNamingThem) {
  EXPECT_NE(refusal(std::string(limits::query_bytes_max + 1, ' '))
                .find("at most 4096 bytes"),
            std::string::npos);
  std::string deep(limits::query_depth_max + 1, '(');
  deep += "a = 1" + std::string(limits::query_depth_max + 1, ')');
  EXPECT_NE(refusal(deep).find("nest deeper than"), std::string::npos);
  std::string many = "a = 0";
  for (std::size_t i = 0; i < limits::query_comparisons_max; ++i) {
    many += " OR a = 1";
  }
  EXPECT_NE(refusal(many).find("more than 64 comparisons"), std::string::npos);
  std::string list = "a IN (0";
  for (std::size_t i = 0; i < limits::query_in_values_max; ++i) {
    list += ", 1";
  }
  EXPECT_NE(refusal(list + ")").find("at most 100 values"), std::string::npos);
}

}  // namespace
}  // namespace durin::persistence
