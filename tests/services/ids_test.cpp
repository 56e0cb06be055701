// Goal: an id a caller chooses and a route names (a hook token, an instance
// id, a schedule id, a task queue) is refused where it is made unless one
// path segment can carry it (durin/ids.hpp), so that nothing is accepted
// that no route could reach again. (base/ has no test binary of its own;
// the rule is tested here, next to its users, and over HTTP in
// tests/gateway/serve_test.cpp.)
#include "durin/ids.hpp"

#include <gtest/gtest.h>

#include "durin/registry.hpp"

#include <string>
#include <vector>

namespace durin {
namespace {

TEST(IdsTest, AnIdOneSegmentCanCarryIsAccepted) {
  for (const std::string& id : std::vector<std::string>{
           "order-1", "A_1.b~c", "a b", "...", ".a", "ünïcode-✓", "a:b@c+d",
           std::string(200, 'x')}) {
    EXPECT_EQ(id_problem("the id", id, 200), "") << id;
  }
}

TEST(IdsTest, AnIdNoRouteCouldNameIsRefusedNamingIt) {
  for (const std::string& id :
       std::vector<std::string>{"", ".", "..", "order/A-1", "/", "a\\b",
                                std::string("a\0b", 3), "a\nb", "tab\there",
                                "\x1f"
                                "reserved",
                                "del\x7f", "\xff\xfe", "\xed\xa0\x80",
                                "\xc0\xaf", std::string(201, 'x')}) {
    auto problem = id_problem("scheduleId", id, 200);
    EXPECT_NE(problem, "") << id;
    EXPECT_EQ(problem.rfind("scheduleId ", 0), 0u) << problem;
  }
}

TEST(IdsTest, TheRefusalSaysWhatWasWrong) {
  EXPECT_EQ(id_problem("hook.token", "", 256),
            "hook.token is 1 to 256 bytes; got 0");
  EXPECT_NE(id_problem("hook.token", "a/b", 256).find("'/'"),
            std::string::npos);
  EXPECT_NE(id_problem("hook.token", "a\nb", 256).find("0x0A"),
            std::string::npos);
  EXPECT_NE(id_problem("hook.token", "..", 256).find("'..'"),
            std::string::npos);
}

// A lookup checks only the length: an id made before the full rule existed
// (or through the C++ API) stays reachable through the C++ API.
TEST(IdsTest, ALookupChecksOnlyTheLengthOfAnId) {
  EXPECT_EQ(id_length_problem("a hook token", "order/A-1", 256), "");
  EXPECT_EQ(id_length_problem("a hook token", "a\nb", 256), "");
  EXPECT_EQ(id_length_problem("a hook token", std::string(257, 'x'), 256),
            "a hook token is 1 to 256 bytes; got 257");
  EXPECT_EQ(id_length_problem("a hook token", "", 256),
            id_problem("a hook token", "", 256));
}

// The code that makes such an id checks it: a step registered on a task
// queue no worker could poll is refused at registration.
TEST(IdsTest, AStepOnATaskQueueNoRouteCouldNameIsRefusedAtRegistration) {
  registry flows;
  auto one = [](int x) { return x; };
  EXPECT_THROW(flows.step("charge", one, {.task_queue = "payments/eu"}),
               invalid_argument_error);
  EXPECT_THROW(flows.step("charge", one, {.task_queue = std::string(129, 'q')}),
               invalid_argument_error);
  EXPECT_NO_THROW(flows.step("charge", one, {.task_queue = "payments.eu"}));
  EXPECT_NE(flows.find_step("charge"), nullptr);
}

}  // namespace
}  // namespace durin
