// Memos and search attributes over HTTP against a real `durin serve` on
// loopback: POST /v1/runs takes "memo" and "searchAttributes" and refuses
// bad ones with a 400 naming the attribute; the run's JSON returns them, as
// the flow (acme.tagged) changes them; GET /v1/runs?query= filters, pages
// and refuses a query that does not parse or type with a 400 naming the
// position; another tenant's key never sees the runs; `durin runs list
// --query` sends the query.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>

#include "durin/limits.hpp"
#include "tests/support/serve_process.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin::testing {
namespace {

std::string encoded(const std::string& text) {
  std::string out;
  const char* hex = "0123456789ABCDEF";
  for (unsigned char c : text) {
    if (std::isalnum(c) != 0 || c == '-' || c == '_' || c == '.') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

class SearchServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<serve_process>(dir_.path());
  }
  api_client admin() { return {server_->address(), server_->admin_key()}; }

  json start(api_client& client, json body) {
    body["flow"] = body.value("flow", "acme.tagged");
    body["wait"] = false;
    auto answer = client.post("/v1/runs", body);
    EXPECT_EQ(answer.status, 202u) << answer.body;
    return answer.value;
  }

  std::set<std::string> found(api_client& client, const std::string& query) {
    auto page = client.get("/v1/runs?limit=1000&query=" + encoded(query));
    EXPECT_EQ(page.status, 200u) << page.body;
    std::set<std::string> ids;
    for (auto& run : page.value["runs"]) {
      ids.insert(run["id"].get<std::string>());
    }
    return ids;
  }

  temp_dir dir_;
  std::unique_ptr<serve_process> server_;
};

TEST_F(SearchServeTest, AStartsMemoAndAttributesAreReturnedWithTheRun) {
  auto client = admin();
  auto run = start(
      client,
      {{"memo", {{"note", "rush"}}},
       {"searchAttributes",
        {{"customer", "acme"},
         {"priority", 3},
         {"score", 0.5},
         {"vip", true},
         {"dueAt", {{"type", "time"}, {"value", "2026-12-02T10:00:00Z"}}}}}});
  auto got = client.get("/v1/runs/" + run["id"].get<std::string>());
  ASSERT_EQ(got.status, 200u) << got.body;
  EXPECT_EQ(got.value["memo"], (json{{"note", "rush"}}));
  const auto& attributes = got.value["searchAttributes"];
  EXPECT_EQ(attributes["customer"],
            (json{{"type", "keyword"}, {"value", "acme"}}));
  EXPECT_EQ(attributes["priority"], (json{{"type", "int"}, {"value", 3}}));
  EXPECT_EQ(attributes["score"], (json{{"type", "double"}, {"value", 0.5}}));
  EXPECT_EQ(attributes["vip"], (json{{"type", "bool"}, {"value", true}}));
  EXPECT_EQ(attributes["dueAt"],
            (json{{"type", "time"}, {"value", "2026-12-02T10:00:00.000Z"}}));
}

TEST_F(SearchServeTest, ABadSearchAttributeIsA400NamingItAndStartsNothing) {
  auto client = admin();
  start(client, {{"searchAttributes", {{"priority", 3}}}});
  struct bad {
    json attributes;
    const char* says;
  };
  for (const auto& [attributes, says] : std::initializer_list<bad>{
           {json{{"9lives", 1}}, "search attribute '9lives'"},
           {json{{"status", "x"}}, "'status': the name is a built-in"},
           {json{{"dueAt", {{"type", "time"}, {"value", "soon"}}}},
            "'dueAt': 'soon' is not an RFC 3339 time"},
           {json{{"x", {{"type", "colour"}, {"value", 1}}}},
            "'x': unknown type 'colour'"},
           {json{{"x", json::array()}}, "search attribute 'x'"},
           {json{{"priority", "high"}},
            "search attribute 'priority' is int in this tenant"}}) {
    auto answer = client.post("/v1/runs", {{"flow", "acme.tagged"},
                                           {"searchAttributes", attributes},
                                           {"wait", false}});
    EXPECT_EQ(answer.status, 400u) << answer.body;
    EXPECT_EQ(answer.code(), "invalid-argument");
    EXPECT_NE(answer.value.value("message", "").find(says), std::string::npos)
        << answer.body;
  }
  auto big = client.post("/v1/runs",
                         {{"flow", "acme.tagged"},
                          {"memo", std::string(limits::memo_bytes_max, 'x')},
                          {"wait", false}});
  EXPECT_EQ(big.status, 400u) << big.body;
  EXPECT_NE(big.value.value("message", "").find("memo is"), std::string::npos);
  auto all = client.get("/v1/runs");
  EXPECT_EQ(all.value["runs"].size(), 1u);
}

TEST_F(SearchServeTest, TheFlowsMemoAndUpsertsShowInTheRunAndItsQueries) {
  auto client = admin();
  auto run = start(client, {{"input",
                             {{"memo", {{"stage", "new"}}},
                              {"searchAttributes", {{"stage", "new"}}}}}});
  auto id = run["id"].get<std::string>();
  // The memo and the upsert are two writes: both are seen once the second
  // is durable.
  ASSERT_TRUE(eventually([&] {
    auto run = client.get("/v1/runs/" + id).value;
    return run["memo"] == json{{"stage", "new"}} &&
           run["searchAttributes"].contains("stage");
  }));
  EXPECT_EQ(found(client, "stage = 'new'"), (std::set<std::string>{id}));
  auto tag = client.post("/v1/runs/" + id + "/messages/tag",
                         {{"payload",
                           {{"memo", {{"stage", "packed"}}},
                            {"searchAttributes", {{"stage", "packed"}}},
                            {"done", true}}}});
  ASSERT_EQ(tag.status, 200u) << tag.body;
  auto done = wait_run(client, id);
  ASSERT_EQ(done["status"], "completed") << done.dump();
  EXPECT_EQ(done["memo"], (json{{"stage", "packed"}}));
  EXPECT_TRUE(found(client, "stage = 'new'").empty());
  EXPECT_EQ(found(client, "stage = 'packed' AND status = 'completed'"),
            (std::set<std::string>{id}));
  auto history = client.get("/v1/runs/" + id + "/history");
  std::size_t memo_events = 0;
  for (auto& event : history.value["events"]) {
    memo_events += event["kind"] == "memo-set" ? 1 : 0;
  }
  EXPECT_EQ(memo_events, 2u) << history.body;
}

TEST_F(SearchServeTest, AnAttributeTheFlowRemovesLeavesTheRunAndItsQueries) {
  auto client = admin();
  auto run = start(
      client, {{"input",
                {{"searchAttributes", {{"stage", "new"}, {"lane", "east"}}}}}});
  auto id = run["id"].get<std::string>();
  ASSERT_TRUE(eventually([&] {
    return client.get("/v1/runs/" + id)
        .value["searchAttributes"]
        .contains("lane");
  }));
  auto tag = client.post(
      "/v1/runs/" + id + "/messages/tag",
      {{"payload", {{"removeSearchAttributes", {"lane"}}, {"done", true}}}});
  ASSERT_EQ(tag.status, 200u) << tag.body;
  auto done = wait_run(client, id);
  ASSERT_EQ(done["status"], "completed") << done.dump();
  EXPECT_EQ(done["searchAttributes"],
            (json{{"stage", {{"type", "keyword"}, {"value", "new"}}}}))
      << done.dump();
  EXPECT_TRUE(found(client, "lane = 'east'").empty());
  EXPECT_EQ(found(client, "stage = 'new'"), (std::set<std::string>{id}));
  auto history = client.get("/v1/runs/" + id + "/history");
  bool removed = false;
  for (auto& event : history.value["events"]) {
    removed = removed || event["kind"] == "search-attributes-removed";
  }
  EXPECT_TRUE(removed) << history.body;
  // Names not given as an array fail the run, naming the field.
  auto bad = start(client, {{"input", {{"removeSearchAttributes", "lane"}}}});
  auto failed = wait_run(client, bad["id"].get<std::string>());
  EXPECT_EQ(failed["status"], "failed") << failed.dump();
  EXPECT_NE(failed.dump().find("removeSearchAttributes is an array"),
            std::string::npos)
      << failed.dump();
}

TEST_F(SearchServeTest, ABadQueryIsA400NamingThePosition) {
  auto client = admin();
  start(client, {{"searchAttributes", {{"priority", 3}}}});
  for (auto [query, says] :
       std::initializer_list<std::pair<const char*, const char*>>{
           {"priority = 'high'",
            "query: at position 12: attribute 'priority' is an int"},
           {"priority >", "query: at position 11: expected a value"},
           {"(priority = 3", "expected ')'"}}) {
    auto answer = client.get("/v1/runs?query=" + encoded(query));
    EXPECT_EQ(answer.status, 400u) << answer.body;
    EXPECT_EQ(answer.code(), "invalid-argument");
    EXPECT_NE(answer.value.value("message", "").find(says), std::string::npos)
        << answer.body;
  }
}

TEST_F(SearchServeTest, AQueryPagesAndSeesOnlyTheCallersTenant) {
  auto client = admin();
  auto created = client.post("/v1/tenants", {{"name", "globex"}});
  ASSERT_EQ(created.status, 201u) << created.body;
  api_client other(server_->address(),
                   created.value["apiKey"]["secret"].get<std::string>());
  std::set<std::string> mine;
  for (int i = 0; i < 5; ++i) {
    mine.insert(start(client, {{"searchAttributes", {{"team", "blue"}}}})["id"]
                    .get<std::string>());
  }
  auto theirs = start(other, {{"searchAttributes", {{"team", "blue"}}}})["id"]
                    .get<std::string>();
  std::set<std::string> seen;
  std::string cursor;
  int pages = 0;
  do {
    auto page =
        client.get("/v1/runs?limit=2&query=" + encoded("team = 'blue'") +
                   (cursor.empty() ? "" : "&cursor=" + cursor));
    ASSERT_EQ(page.status, 200u) << page.body;
    EXPECT_LE(page.value["runs"].size(), 2u);
    for (auto& run : page.value["runs"]) {
      EXPECT_TRUE(seen.insert(run["id"].get<std::string>()).second);
    }
    const auto& next = page.value["nextCursor"];
    cursor = next.is_string() ? next.get<std::string>() : "";
    ++pages;
  } while (!cursor.empty() && pages < 10);
  EXPECT_EQ(seen, mine);
  EXPECT_EQ(found(other, "team = 'blue'"), (std::set<std::string>{theirs}));
}

TEST_F(SearchServeTest, TheCliStartsWithAttributesAndListsByQuery) {
  auto run_cli = [&](const std::string& args) {
    auto ran = run_durin("runs " + args + " --server http://127.0.0.1:" +
                         std::to_string(server_->port()) + " --data-dir " +
                         dir_.path() + " 2>&1");
    return std::pair<int, std::string>(ran.code, ran.output);
  };
  auto started = run_cli(
      "start --flow=acme.tagged --no-wait --memo='{\"note\":\"cli\"}' "
      "--search-attributes='{\"region\":\"eu\",\"size\":7}'");
  ASSERT_EQ(started.first, 0) << started.second;
  auto run = json::parse(started.second.substr(started.second.find('{')));
  EXPECT_EQ(run["memo"], (json{{"note", "cli"}}));
  start(*std::make_unique<api_client>(admin()),
        {{"searchAttributes", {{"region", "us"}}}});
  auto listed = run_cli("list --query=\"region = 'eu' AND size > 5\"");
  ASSERT_EQ(listed.first, 0) << listed.second;
  auto page = json::parse(listed.second.substr(listed.second.find('{')));
  ASSERT_EQ(page["runs"].size(), 1u) << listed.second;
  EXPECT_EQ(page["runs"][0]["id"], run["id"]);
  auto refused = run_cli("list --query=\"size = 'big'\"");
  EXPECT_NE(refused.first, 0);
  EXPECT_NE(refused.second.find("attribute 'size' is an int"),
            std::string::npos)
      << refused.second;
}

}  // namespace
}  // namespace durin::testing
