// Goal: remote workers end to end (issue 5). A real `durin serve` process,
// real `durin worker` processes killed with SIGKILL, the Python example
// worker when python3 is installed, and a payment service (a real HTTP
// server in this process) that records each charge by the idempotency key
// it is given. Proves the worker routes' fencing, redelivery after a killed
// worker's lease expires, and that at-least-once delivery with step_id as
// the key charges exactly once per step.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "gateway/http_server.hpp"
#include "tests/support/serve_process.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin {
namespace {

using testing::api_client;
using testing::serve_process;
using testing::start_run;
using testing::wait_run;

constexpr auto wait_max = std::chrono::seconds(60);

// A `durin worker` child process; without an id, one unique in this test
// process.
class worker_process {
 public:
  worker_process(const serve_process& node, const std::string& queue,
                 std::vector<std::string> env, int concurrency = 4,
                 std::string id = "")
      : process_(DURIN_CLI,
                 {"worker", "--server",
                  "http://127.0.0.1:" + std::to_string(node.port()),
                  "--api-key", node.admin_key(), "--queue", queue,
                  "--concurrency", std::to_string(concurrency), "--worker-id",
                  id.empty() ? next_id() : id},
                 std::move(env), true) {
    // Signals sent before its handlers are installed would kill it.
    auto said = process_.read_until_line(" polling ", std::chrono::seconds(30));
    if (said.find(" polling ") == std::string::npos) {
      throw std::runtime_error("durin worker did not start: " + said);
    }
  }

  void kill9() { process_.kill9(); }
  pid_t pid() const { return process_.pid(); }
  // SIGTERM: a graceful stop; the exit code, -1 when it did not exit.
  int terminate() { return process_.terminate(std::chrono::seconds(10)); }

 private:
  static std::string next_id() {
    static std::atomic<int> made{0};
    return "worker-" + std::to_string(::getpid()) + "-" +
           std::to_string(++made);
  }
  testing::child_process process_;
};

// The external payment service: POST /charges {key, attemptId} charges once
// per key; a repeated key gets the first charge's receipt.
class payment_service {
 public:
  payment_service() {
    gateway::http_server_options options;
    options.port = 0;
    options.worker_threads = 16;
    auto started = gateway::http_server::start(
        options,
        [this](const wire::http_request& request) { return handle(request); });
    if (!started) {
      throw std::runtime_error(started.error().to_string());
    }
    server_ = std::move(*started);
  }

  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(server_->port());
  }
  std::size_t requests() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_;
  }
  std::map<std::string, std::string> charges() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return charges_;
  }

 private:
  wire::http_response handle(const wire::http_request& request) {
    wire::http_response response;
    auto body = json::parse(request.body, nullptr, false);
    if (request.target != "/charges" || body.is_discarded() ||
        !body.contains("key")) {
      response.status = 400;
      response.body = R"({"code":"invalid-argument","message":"bad charge"})";
      return response;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ++requests_;
    auto key = body["key"].get<std::string>();
    auto [it, fresh] =
        charges_.try_emplace(key, "ch_" + std::to_string(charges_.size()));
    response.body =
        json{{"chargeId", it->second}, {"key", key}, {"replayed", !fresh}}
            .dump();
    return response;
  }

  std::unique_ptr<gateway::http_server> server_;
  mutable std::mutex mutex_;
  std::size_t requests_ = 0;
  std::map<std::string, std::string> charges_;
};

// Runs `durin ARGS` against `node` and returns its stdout.
std::string run_cli(const serve_process& node, const std::string& args) {
  return testing::run_durin(args + " --server http://127.0.0.1:" +
                            std::to_string(node.port()) + " --api-key " +
                            node.admin_key())
      .output;
}

TEST(WorkerApiTest, PollsAreFencedByLeaseOwnerAndLateReportsAreNotFailures) {
  testing::temp_dir dir;
  serve_process node(dir.path());
  api_client client(node.address(), node.admin_key());
  auto run =
      start_run(client, "acme.remote-echo", {{"count", 1}, {"value", "hello"}});
  auto run_id = run["id"].get<std::string>();
  auto poll = client.post("/v1/task-queues/workers/poll",
                          {{"workerId", "w1"}, {"pollRequestId", "p1"}});
  ASSERT_EQ(poll.status, 200u) << poll.body;
  const auto& task = poll.value["task"];
  ASSERT_TRUE(task.is_object()) << poll.body;
  EXPECT_EQ(task["runId"], run_id);
  EXPECT_EQ(task["stepId"], run_id + "/1");
  EXPECT_EQ(task["stepName"], "remote-echo");
  EXPECT_EQ(task["args"], json::array({"hello"}));
  auto attempt_id = task["attemptId"].get<std::string>();
  // The same poll id while the lease holds: the same task.
  auto repeat = client.post("/v1/task-queues/workers/poll",
                            {{"workerId", "w1"}, {"pollRequestId", "p1"}});
  EXPECT_EQ(repeat.value["task"]["attemptId"], attempt_id);
  auto base = "/v1/tasks/" + attempt_id;
  auto intruder =
      client.post(base + "/complete", {{"workerId", "w2"}, {"result", 1}});
  EXPECT_EQ(intruder.status, 409u);
  EXPECT_EQ(intruder.code(), "lease-conflict");
  EXPECT_EQ(intruder.value["reason"], "wrong_owner");
  auto beat = client.post(base + "/heartbeat", {{"workerId", "w1"},
                                                {"message", "half way"},
                                                {"current", 1},
                                                {"total", 2}});
  EXPECT_EQ(beat.status, 200u);
  EXPECT_EQ(beat.value["continue"], true);
  auto listed = client.get("/v1/tasks");
  ASSERT_EQ(listed.value["tasks"].size(), 1u) << listed.body;
  EXPECT_EQ(listed.value["tasks"][0]["leaseOwner"], "w1");
  EXPECT_EQ(listed.value["tasks"][0]["state"], "running");
  EXPECT_EQ(listed.value["tasks"][0]["progress"]["message"], "half way");
  auto done = client.post(base + "/complete",
                          {{"workerId", "w1"}, {"result", "HELLO"}});
  EXPECT_EQ(done.status, 200u);
  EXPECT_EQ(done.value["recorded"], true);
  auto again = client.post(base + "/complete",
                           {{"workerId", "w1"}, {"result", "other"}});
  EXPECT_EQ(again.status, 200u);
  EXPECT_EQ(again.value["recorded"], false);
  EXPECT_EQ(again.value["reason"], "stale_attempt");
  auto unknown = client.post("/v1/tasks/att_nope/fail",
                             {{"workerId", "w1"}, {"message", "x"}});
  EXPECT_EQ(unknown.value["reason"], "task_not_found");
  auto finished = wait_run(client, run_id);
  EXPECT_EQ(finished["status"], "completed");
  EXPECT_EQ(finished["output"]["value"], "HELLO");
  auto transport = client.get("/v1/tasks?runId=" + run_id);
  ASSERT_EQ(transport.value["attempts"].size(), 1u);
  EXPECT_EQ(transport.value["attempts"][0]["state"], "completed");
  EXPECT_GE(transport.value["refusedReports"].size(), 2u);
  auto metrics = client.get("/metrics");
  EXPECT_NE(metrics.body.find("durin_task_reports_refused_total"),
            std::string::npos);
}

TEST(WorkerApiTest, BadWorkerRequestsAreRefusedNamingTheProblem) {
  testing::temp_dir dir;
  serve_process node(dir.path());
  api_client client(node.address(), node.admin_key());
  auto no_worker = client.post("/v1/task-queues/workers/poll", {{"waitMs", 0}});
  EXPECT_EQ(no_worker.status, 400u);
  EXPECT_NE(no_worker.value["message"].get<std::string>().find("workerId"),
            std::string::npos);
  auto unknown_field = client.post("/v1/task-queues/workers/poll",
                                   {{"workerId", "w"}, {"color", "red"}});
  EXPECT_EQ(unknown_field.status, 400u);
  auto long_wait = client.post("/v1/task-queues/workers/poll",
                               {{"workerId", "w"}, {"waitMs", 999999999}});
  EXPECT_EQ(long_wait.status, 400u);
  auto bad_retryable = client.post("/v1/tasks/att_x/fail",
                                   {{"workerId", "w"}, {"retryable", "yes"}});
  EXPECT_EQ(bad_retryable.status, 400u);
  auto wrong_method = client.get("/v1/task-queues/workers/poll");
  EXPECT_EQ(wrong_method.status, 405u);
  auto empty = client.post("/v1/task-queues/workers/poll",
                           {{"workerId", "w"}, {"waitMs", 0}});
  EXPECT_EQ(empty.status, 200u);
  EXPECT_TRUE(empty.value["task"].is_null());
  EXPECT_EQ(client.get("/healthz").status, 200u);
}

// A worker whose key the node refuses says why and exits 1 by itself (it
// used to poll for ever, silently); a node that cannot be reached is said
// once, and the worker goes on trying until it is stopped.
TEST(WorkerProcessTest, AWorkerWhoseKeyIsRefusedSaysSoAndExits) {
  testing::temp_dir dir;
  serve_process node(dir.path());
  const auto log = dir.path() + "/worker.stderr";
  testing::child_process refused(
      DURIN_CLI,
      {"worker", "--server", "http://127.0.0.1:" + std::to_string(node.port()),
       "--api-key", "not-a-key", "--queue", "payments"},
      {}, true, 0, log);
  ASSERT_TRUE(testing::eventually([&] { return !refused.running(); }));
  EXPECT_EQ(refused.terminate(), 1);
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)),
                       std::istreambuf_iterator<char>());
  };
  EXPECT_NE(read(log).find("401 unauthorized"), std::string::npos) << read(log);

  const auto unreachable_log = dir.path() + "/unreachable.stderr";
  testing::child_process unreachable(
      DURIN_CLI,
      {"worker", "--server", "http://127.0.0.1:1", "--api-key", "k", "--queue",
       "payments"},
      {}, true, 0, unreachable_log);
  unreachable.read_until_line(" polling ", std::chrono::seconds(30));
  ASSERT_TRUE(testing::eventually([&] {
    return read(unreachable_log).find("cannot connect") != std::string::npos;
  }));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_TRUE(unreachable.running());
  EXPECT_EQ(unreachable.terminate(), 0);
  const auto said = read(unreachable_log);
  EXPECT_EQ(said.find("cannot connect"), said.rfind("cannot connect"))
      << "said more than once: " << said;
}

TEST(WorkerProcessTest, KilledWorkerAttemptIsDeliveredAgainAndTheRunCompletes) {
  testing::temp_dir dir;
  serve_process node(dir.path(), {"DURIN_CHARGE_TIMEOUT_MS=1000"});
  api_client client(node.address(), node.admin_key());
  auto run =
      start_run(client, "acme.pay", {{"orderId", "A-1"}, {"charges", 1}});
  auto run_id = run["id"].get<std::string>();
  {
    worker_process stuck(node, "payments", {"DURIN_CHARGE_DELAY_MS=60000"}, 1,
                         "doomed-worker");
    ASSERT_TRUE(testing::eventually(
        [&] {
          auto listed = client.get("/v1/tasks");
          return listed.value["tasks"].size() == 1 &&
                 listed.value["tasks"][0]["leaseOwner"] == "doomed-worker";
        },
        std::chrono::seconds(30)));
    stuck.kill9();
  }
  worker_process healthy(node, "payments", {}, 1, "healthy-worker");
  auto finished = wait_run(client, run_id);
  ASSERT_EQ(finished["status"], "completed") << finished.dump();
  auto history = client.get("/v1/runs/" + run_id + "/history").value;
  std::vector<std::string> kinds;
  std::string lapse_code;
  for (const auto& event : history["events"]) {
    if (event.contains("stepId")) {
      kinds.push_back(event["kind"]);
      if (event["kind"] == "step-attempt-failed") {
        lapse_code = event["error"]["code"];
      }
    }
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"step-attempt-failed",
                                             "step-completed"}));
  EXPECT_EQ(lapse_code, "timeout-start-to-close");
  // `durin runs describe` shows the transport beside the history.
  auto described =
      json::parse(run_cli(node, "runs describe " + run_id), nullptr, false);
  ASSERT_TRUE(described.is_object());
  ASSERT_EQ(described["steps"].size(), 1u) << described.dump();
  const auto& step = described["steps"][0];
  EXPECT_EQ(step["stepId"], run_id + "/1");
  ASSERT_EQ(step["attempts"].size(), 2u) << step.dump();
  EXPECT_EQ(step["attempts"][0]["leaseOwner"], "doomed-worker");
  EXPECT_EQ(step["attempts"][0]["state"], "expired");
  EXPECT_EQ(step["attempts"][0]["timeout"], "start-to-close");
  EXPECT_EQ(step["attempts"][1]["leaseOwner"], "healthy-worker");
  EXPECT_EQ(step["attempts"][1]["state"], "completed");
  EXPECT_EQ(step["recorded"].size(), 2u);
  auto listed = json::parse(run_cli(node, "tasks list"), nullptr, false);
  ASSERT_TRUE(listed.is_object());
  EXPECT_EQ(listed["stats"]["redeliveries"], 1);
  EXPECT_EQ(healthy.terminate(), 0);
}

// Worker sessions (issue 17): each run's steps in its session all run in
// one of two worker processes polling the queue.
TEST(WorkerProcessTest, EveryStepOfAWorkerSessionRunsInOneWorkerProcess) {
  testing::temp_dir dir;
  serve_process node(dir.path());
  api_client client(node.address(), node.admin_key());
  worker_process a(node, "sessions", {}, 4, "session-a");
  worker_process b(node, "sessions", {}, 4, "session-b");
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i) {
    ids.push_back(start_run(client, "acme.session", {{"steps", 4}})["id"]);
  }
  for (const auto& id : ids) {
    auto run = wait_run(client, id);
    ASSERT_EQ(run["status"], "completed") << run.dump();
    const auto& sessions = run["output"]["sessions"];
    ASSERT_EQ(sessions.size(), 1u) << run.dump();
    const auto& results = sessions[0]["results"];
    ASSERT_EQ(results.size(), 4u) << run.dump();
    auto pid = results[0]["pid"].get<pid_t>();
    EXPECT_TRUE(pid == a.pid() || pid == b.pid()) << run.dump();
    for (const auto& result : results) {
      EXPECT_EQ(result["pid"], pid) << run.dump();
    }
  }
  EXPECT_EQ(a.terminate(), 0);
  EXPECT_EQ(b.terminate(), 0);
}

// The worker a session is bound to is killed with SIGKILL mid-session: its
// step's lease lapses, the session fails (nothing of it goes to the other
// worker), and the flow runs the steps left in a new session there.
TEST(WorkerProcessTest,
     AKilledSessionWorkerFailsItsSessionAndTheFlowOpensAnother) {
  testing::temp_dir dir;
  serve_process node(dir.path(), {"DURIN_SESSION_HEARTBEAT_MS=1000"});
  api_client client(node.address(), node.admin_key());
  std::map<std::string, std::unique_ptr<worker_process>> workers;
  for (const auto* id : {"session-x", "session-y"}) {
    workers[id] = std::make_unique<worker_process>(
        node, "sessions", std::vector<std::string>{}, 1, id);
  }
  auto id =
      start_run(
          client, "acme.session",
          {{"steps", 4}, {"delayMs", 700}, {"workerTimeoutMs", 2000}})["id"]
          .get<std::string>();
  std::string bound;
  ASSERT_TRUE(testing::eventually(
      [&] {
        auto history = client.get("/v1/runs/" + id + "/history").value;
        for (const auto& event : history["events"]) {
          if (event["kind"] == "session-bound") {
            bound = event["value"]["worker"];
          }
        }
        return !bound.empty();
      },
      std::chrono::seconds(30)));
  ASSERT_EQ(workers.count(bound), 1u) << bound;
  auto killed_pid = workers[bound]->pid();
  workers[bound]->kill9();
  auto finished = wait_run(client, id);
  ASSERT_EQ(finished["status"], "completed") << finished.dump();
  const auto& output = finished["output"];
  EXPECT_EQ(output["steps"], 4);
  const auto& sessions = output["sessions"];
  ASSERT_EQ(sessions.size(), 2u) << output.dump();
  EXPECT_NE(sessions[0]["failure"].get<std::string>().find("'" + bound +
                                                           "' was lost"),
            std::string::npos)
      << output.dump();
  for (const auto& result : sessions[0]["results"]) {
    EXPECT_EQ(result["pid"].get<pid_t>(), killed_pid) << output.dump();
  }
  ASSERT_FALSE(sessions[1]["results"].empty());
  for (const auto& result : sessions[1]["results"]) {
    EXPECT_NE(result["pid"].get<pid_t>(), killed_pid) << output.dump();
  }
  for (auto& [name, worker] : workers) {
    if (name != bound) {
      EXPECT_EQ(worker->terminate(), 0);
    }
  }
}

// Each run's receipts are the one charge of each of its step ids; the step
// ids of `run_ids` are added to `expected`.
void expect_receipts_charged(api_client& client,
                             const std::vector<std::string>& run_ids,
                             int charges_per_run,
                             std::map<std::string, std::string>& charges,
                             std::set<std::string>& expected) {
  for (const auto& id : run_ids) {
    for (int call = 1; call <= charges_per_run; ++call) {
      expected.insert(id + "/" + std::to_string(call));
    }
    auto run = client.get("/v1/runs/" + id).value;
    ASSERT_EQ(run["output"]["receipts"].size(),
              static_cast<std::size_t>(charges_per_run));
    for (const auto& receipt : run["output"]["receipts"]) {
      // The receipt the run recorded is the one charge of its step id.
      auto key = receipt["key"].get<std::string>();
      ASSERT_TRUE(charges.count(key) == 1) << key;
      EXPECT_EQ(receipt["chargeId"], charges[key]);
    }
  }
}

// 500 runs of two charges each, three worker processes killed at random and
// one in five charges slower than its lease: steps run more than once, yet
// the payment service records exactly one charge per step id.
TEST(WorkerProcessTest,
     PaymentIsChargedOncePerStepIdDespiteKillsAndLapsedLeases) {
  auto seed = std::random_device{}();
  if (const char* given = std::getenv("DURIN_TEST_SEED")) {
    seed = static_cast<unsigned>(std::atoll(given));
  }
  std::printf("seed %u (DURIN_TEST_SEED)\n", seed);
  std::mt19937 random(seed);
  payment_service payments;
  testing::temp_dir dir;
  serve_process node(dir.path(), {"DURIN_CHARGE_TIMEOUT_MS=400"});
  api_client client(node.address(), node.admin_key());
  const int runs = 500;
  const int charges_per_run = 2;
  std::vector<std::string> run_ids;
  for (int i = 0; i < runs; ++i) {
    auto run = start_run(client, "acme.pay",
                         {{"orderId", "order-" + std::to_string(i)},
                          {"charges", charges_per_run}});
    run_ids.push_back(run["id"].get<std::string>());
  }
  std::vector<std::string> env = {
      "DURIN_PAYMENT_URL=" + payments.url(), "DURIN_CHARGE_DELAY_MS=2",
      "DURIN_CHARGE_SLOW_EVERY=5", "DURIN_CHARGE_SLOW_MS=600"};
  std::vector<std::unique_ptr<worker_process>> workers;
  for (int i = 0; i < 3; ++i) {
    workers.push_back(std::make_unique<worker_process>(node, "payments", env));
  }
  int kills = 0;
  auto all_done = [&] {
    auto listed = client.get("/v1/runs?status=completed&limit=1000");
    return listed.value.contains("runs") &&
           listed.value["runs"].size() == static_cast<std::size_t>(runs);
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while (!all_done() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(
        std::chrono::milliseconds(100 + random() % 300));
    auto victim = random() % workers.size();
    workers[victim]->kill9();
    ++kills;
    workers[victim] = std::make_unique<worker_process>(node, "payments", env);
  }
  ASSERT_TRUE(all_done()) << "runs did not all complete; seed " << seed;
  auto charges = payments.charges();
  std::set<std::string> expected;
  ASSERT_NO_FATAL_FAILURE(expect_receipts_charged(
      client, run_ids, charges_per_run, charges, expected));
  std::set<std::string> charged;
  for (const auto& [key, charge] : charges) {
    charged.insert(key);
  }
  EXPECT_EQ(charged, expected) << "seed " << seed;
  // Duplicate deliveries happened, and the service absorbed them.
  EXPECT_GT(payments.requests(), charges.size()) << "seed " << seed;
  auto stats = client.get("/v1/tasks").value["stats"];
  EXPECT_GT(stats["redeliveries"].get<int>(), 0);
  std::printf("%d kills, %zu charge requests for %zu steps, %d redeliveries\n",
              kills, payments.requests(), charges.size(),
              stats["redeliveries"].get<int>());
}

TEST(WorkerProcessTest, PythonExampleWorkerRunsRemoteSteps) {
  if (std::system("python3 --version > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 is not installed: the Python example worker "
                    "(examples/python-worker) is not exercised";
  }
  testing::temp_dir dir;
  serve_process node(dir.path());
  api_client client(node.address(), node.admin_key());
  auto run = start_run(client, "acme.remote-echo",
                       {{"count", 3}, {"value", {{"n", 7}}}});
  auto command = std::string("python3 ") + DURIN_SOURCE_DIR +
                 "/examples/python-worker/worker.py --server "
                 "http://127.0.0.1:" +
                 std::to_string(node.port()) + " --api-key " +
                 node.admin_key() + " --queue workers --max-tasks 3 > " +
                 dir.path() + "/python.log 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0);
  auto finished = wait_run(client, run["id"].get<std::string>());
  EXPECT_EQ(finished["status"], "completed");
  EXPECT_EQ(finished["output"]["value"], (json{{"n", 7}}));
}

}  // namespace
}  // namespace durin
