// End-to-end tests of the routes that talk to running flows (issue 17):
// messages by run and instance id, message-with-start, updates, queries and
// terminate, against real `durin serve` processes over loopback, including
// kill -9 at either side of the group write that records a message.
//
// Method: acme.inbox and acme.counter (bin/example_flows.cpp), every node's
// flows. DURIN_KILL_AT=committer.before_write:1 / committer.after_write:1
// kills the server at the first group write after its start; the client's
// answer is lost, and the retry with the same key must record nothing twice.
#include <gtest/gtest.h>

#include <string>

#include "tests/support/serve_process.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin::testing {
namespace {

class MessageServeTest : public ::testing::Test {
 protected:
  void start(std::vector<std::string> env = {}) {
    server_.reset();
    server_ = std::make_unique<serve_process>(dir_.path(), std::move(env));
  }
  api_client admin() { return {server_->address(), server_->admin_key()}; }
  void SetUp() override { start(); }

  // The run, once it waits for its first message.
  std::string waiting_run(api_client& client, const std::string& flow) {
    auto run =
        client.post("/v1/runs", {{"flow", flow}, {"input", json::object()}});
    EXPECT_EQ(run.status, 200u) << run.body;
    return run.value.value("id", "");
  }

  int runs_of(api_client& client, const std::string& flow) {
    auto page = client.get("/v1/runs?limit=1000&flow=" + flow);
    EXPECT_EQ(page.status, 200u) << page.body;
    return static_cast<int>(page.value["runs"].size());
  }

  temp_dir dir_;
  std::unique_ptr<serve_process> server_;
};

TEST_F(MessageServeTest,
       MessageUpdateQueryAndTerminateRoutesAnswerAsDocumented) {
  auto client = admin();
  auto id = waiting_run(client, "acme.counter");
  auto base = "/v1/runs/" + id;
  auto added = client.post(base + "/updates/add",
                           {{"args", {{"by", 2}}}, {"updateId", "u-1"}});
  ASSERT_EQ(added.status, 200u) << added.body;
  EXPECT_EQ(added.value["status"], "completed");
  EXPECT_EQ(added.value["result"], json({{"value", 2}}));
  EXPECT_EQ(added.value["updateId"], "u-1");
  auto repeat = client.post(base + "/updates/add",
                            {{"args", {{"by", 2}}}, {"updateId", "u-1"}});
  EXPECT_EQ(repeat.body, added.body);

  auto rejected = client.post(base + "/updates/add", {{"args", {{"by", -3}}}});
  EXPECT_EQ(rejected.status, 422u) << rejected.body;
  EXPECT_EQ(rejected.code(), "update-rejected");
  auto wait_for = client.post(base + "/updates/add",
                              {{"args", {{"by", 1}}}, {"waitFor", "soon"}});
  EXPECT_EQ(wait_for.status, 400u) << wait_for.body;

  auto value = client.get(base + "/queries/value");
  ASSERT_EQ(value.status, 200u) << value.body;
  EXPECT_EQ(value.value["result"], json({{"value", 2}}));
  EXPECT_EQ(client.get(base + "/queries/nope").code(), "handler-not-found");
  EXPECT_EQ(client.get(base + "/queries/value?args=%7B").status, 400u);

  auto bad_name = client.post(base + "/messages/no%20spaces", {{"payload", 1}});
  EXPECT_EQ(bad_name.status, 400u) << bad_name.body;
  auto bad_field = client.post(base + "/messages/stop", {{"payloud", 1}});
  EXPECT_EQ(bad_field.status, 400u) << bad_field.body;
  auto unknown = client.post("/v1/runs/run_nope/messages/stop", json::object());
  EXPECT_EQ(unknown.status, 404u) << unknown.body;

  auto stop = client.post(base + "/messages/stop", {{"idempotencyKey", "s"}});
  ASSERT_EQ(stop.status, 200u) << stop.body;
  EXPECT_EQ(stop.value["runId"], id);
  auto ended = wait_run(client, id);
  EXPECT_EQ(ended["status"], "completed");
  EXPECT_EQ(ended["output"], json({{"value", 2}}));

  auto other = waiting_run(client, "acme.counter");
  auto terminated = client.post("/v1/runs/" + other + "/terminate",
                                {{"reason", "enough"}, {"commandId", "t-1"}});
  ASSERT_EQ(terminated.status, 200u) << terminated.body;
  EXPECT_EQ(terminated.value["status"], "terminated");
  EXPECT_EQ(client.get("/v1/runs/" + other + "/queries/value").code(),
            "run-finished");
}

// An update's defaults ("waitFor": "completed", no args; a message's: no
// payload) are its meaning when sent explicitly: the retry is replayed.
TEST_F(MessageServeTest, TheFingerprintTakesAnUpdatesDefaultsAsSent) {
  auto client = admin();
  auto id = waiting_run(client, "acme.counter");
  auto base = "/v1/runs/" + id;
  auto added = client.post(base + "/updates/add", {{"args", {{"by", 1}}}},
                           "update-defaults");
  ASSERT_EQ(added.status, 200u) << added.body;
  auto again = client.post(base + "/updates/add",
                           {{"args", {{"by", 1}}}, {"waitFor", "completed"}},
                           "update-defaults");
  EXPECT_EQ(again.status, 200u) << again.body;
  EXPECT_EQ(again.headers["idempotent-replayed"], "true");
  EXPECT_EQ(again.body, added.body);
  auto sent =
      client.post(base + "/messages/tick", json::object(), "message-defaults");
  ASSERT_EQ(sent.status, 200u) << sent.body;
  auto resent = client.post(base + "/messages/tick", {{"payload", nullptr}},
                            "message-defaults");
  EXPECT_EQ(resent.headers["idempotent-replayed"], "true") << resent.body;
  auto value = client.get(base + "/queries/value");
  EXPECT_EQ(value.value["result"], json({{"value", 1}})) << value.body;
}

TEST_F(MessageServeTest, MessagesByInstanceIdReachTheInstancesRun) {
  auto client = admin();
  auto run = client.post("/v1/runs", {{"flow", "acme.inbox"},
                                      {"instanceId", "box-1"},
                                      {"input", json::object()}});
  ASSERT_EQ(run.status, 200u) << run.body;
  auto sent = client.post("/v1/instances/box-1/messages/note",
                          {{"payload", {{"done", true}}}});
  ASSERT_EQ(sent.status, 200u) << sent.body;
  EXPECT_EQ(sent.value["runId"], run.value["id"]);
  wait_run(client, run.value["id"]);
  auto none =
      client.post("/v1/instances/box-1/messages/note", {{"payload", 1}});
  EXPECT_EQ(none.status, 404u) << none.body;
}

// The message routes take an Idempotency-Key header as every mutating
// route does: its retry is the first answer replayed, and records nothing.
TEST_F(MessageServeTest,
       AMessageRetriedWithItsIdempotencyKeyHeaderIsRecordedOnce) {
  auto client = admin();
  auto id = waiting_run(client, "acme.inbox");
  const json note = {{"payload", {{"n", 1}}}};
  auto first = client.post("/v1/runs/" + id + "/messages/note", note, "h-1");
  ASSERT_EQ(first.status, 200u) << first.body;
  auto again = client.post("/v1/runs/" + id + "/messages/note", note, "h-1");
  ASSERT_EQ(again.status, 200u) << again.body;
  EXPECT_EQ(again.body, first.body);
  EXPECT_EQ(again.headers["idempotent-replayed"], "true");
  auto other = client.post("/v1/runs/" + id + "/messages/note",
                           {{"payload", {{"n", 2}}}}, "h-1");
  EXPECT_EQ(other.status, 409u) << other.body;
  auto done = client.post("/v1/runs/" + id + "/messages/note",
                          {{"payload", {{"done", true}}}}, "h-2");
  ASSERT_EQ(done.status, 200u) << done.body;
  auto ended = wait_run(client, id);
  EXPECT_EQ(ended["output"]["notes"],
            json::array({{{"n", 1}}, {{"done", true}}}));
}

// The answer of a keyed message is lost to a kill -9 before or after the
// write recording it: the retry records it once.
TEST_F(MessageServeTest, KillNineAroundAMessagesWriteRecordsItOnce) {
  for (std::string point :
       {"committer.before_write", "committer.after_write"}) {
    SCOPED_TRACE(point);
    std::string id;
    {
      auto client = admin();
      id = waiting_run(client, "acme.inbox");
    }
    ASSERT_EQ(server_->terminate(), 0);
    start({"DURIN_KILL_AT=" + point + ":1"});
    {
      auto client = admin();
      auto lost =
          client.post("/v1/runs/" + id + "/messages/note",
                      {{"payload", {{"n", 1}}}, {"idempotencyKey", "k"}});
      EXPECT_FALSE(lost.error.empty()) << lost.body;
    }
    ASSERT_TRUE(server_->wait_killed());
    start();
    auto client = admin();
    auto retry =
        client.post("/v1/runs/" + id + "/messages/note",
                    {{"payload", {{"n", 1}}}, {"idempotencyKey", "k"}});
    ASSERT_EQ(retry.status, 200u) << retry.body;
    auto again =
        client.post("/v1/runs/" + id + "/messages/note",
                    {{"payload", {{"n", 1}}}, {"idempotencyKey", "k"}});
    EXPECT_EQ(again.body, retry.body);
    ASSERT_EQ(client
                  .post("/v1/runs/" + id + "/messages/note",
                        {{"payload", {{"done", true}}}})
                  .status,
              200u);
    auto ended = wait_run(client, id);
    EXPECT_EQ(ended["output"]["notes"].size(), 2u) << ended.dump();
  }
}

// Message-with-start killed before or after its one write: the retry
// starts one run (or finds the one that landed), and a retry after that
// run closed records nothing and starts nothing.
TEST_F(MessageServeTest, KillNineAroundAMessageWithStartStartsOneRun) {
  int round = 0;
  for (std::string point :
       {"committer.before_write", "committer.after_write"}) {
    SCOPED_TRACE(point);
    std::string instance = "box-" + std::to_string(++round);
    std::string target = "/v1/instances/" + instance + "/messages/note";
    json first = {
        {"payload", {{"n", 1}}},
        {"idempotencyKey", "first"},
        {"start", {{"flow", "acme.inbox"}, {"input", json::object()}}}};
    ASSERT_EQ(server_->terminate(), 0);
    start({"DURIN_KILL_AT=" + point + ":1"});
    {
      auto client = admin();
      auto lost = client.post(target, first);
      EXPECT_FALSE(lost.error.empty()) << lost.body;
    }
    ASSERT_TRUE(server_->wait_killed());
    start();
    auto client = admin();
    auto retry = client.post(target, first);
    ASSERT_EQ(retry.status, 200u) << retry.body;
    EXPECT_EQ(retry.value["started"], true);
    std::string id = retry.value["runId"];
    json last = first;
    last["payload"] = {{"done", true}};
    last["idempotencyKey"] = "last";
    ASSERT_EQ(client.post(target, last).status, 200u);
    auto ended = wait_run(client, id);
    EXPECT_EQ(ended["output"]["notes"].size(), 2u) << ended.dump();
    // After the run closed: the same answer, no second run.
    auto late = client.post(target, first);
    EXPECT_EQ(late.body, retry.body);
    EXPECT_EQ(runs_of(client, "acme.inbox"), round);
  }
}

}  // namespace
}  // namespace durin::testing
