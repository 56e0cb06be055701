#include "bin/worker_steps.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include <unistd.h>

#include "client/http_client.hpp"
#include "durin/flow.hpp"

namespace durin::examples {

namespace {

std::int64_t env_ms(const char* name, std::int64_t fallback) {
  const char* text = std::getenv(name);
  return text == nullptr ? fallback : std::atoll(text);
}

json remote_echo(json value) {
  return value;
}

// Charges once per step id: the payment service dedupes by `key`, durin
// delivers at least once.
json charge(const std::string& order_id, int index) {
  const auto& meta = step_metadata();
  if (auto delay = env_ms("DURIN_CHARGE_DELAY_MS", 0); delay > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay));
  }
  // Tests: every Nth charge of this process outlives its lease, then still
  // charges (late), as a slow worker would.
  static std::atomic<std::int64_t> charges{0};
  auto every = env_ms("DURIN_CHARGE_SLOW_EVERY", 0);
  if (every > 0 && ++charges % every == 0) {
    std::this_thread::sleep_for(
        std::chrono::milliseconds(env_ms("DURIN_CHARGE_SLOW_MS", 0)));
  }
  json request = {{"key", meta.step_id},
                  {"attemptId", meta.attempt_id},
                  {"orderId", order_id},
                  {"index", index}};
  const char* url = std::getenv("DURIN_PAYMENT_URL");
  if (url == nullptr) {
    return json{{"charged", meta.step_id}, {"local", true}};
  }
  auto address = client::parse_server_url(url);
  if (!address) {
    throw fatal_error("DURIN_PAYMENT_URL is not a server URL");
  }
  thread_local std::unique_ptr<client::http_connection> connection;
  if (!connection) {
    connection = std::make_unique<client::http_connection>(*address, 10'000);
  }
  auto response =
      connection->send("POST", "/charges",
                       {{"content-type", "application/json"}}, request.dump());
  if (!response || response->status != 200) {
    connection.reset();
    throw std::runtime_error("the payment service did not answer");
  }
  return json::parse(response->body);
}

// A step of a worker session: heartbeats through `delay_ms`, then names
// the process that ran it.
json session_step(int index, std::int64_t delay_ms) {
  auto until = std::chrono::steady_clock::now() +
               std::chrono::milliseconds(std::max<std::int64_t>(0, delay_ms));
  while (std::chrono::steady_clock::now() < until) {
    if (!heartbeat({"working", index, -1})) {
      throw retryable_error("the attempt's lease is gone");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return json{{"index", index}, {"pid", static_cast<std::int64_t>(::getpid())}};
}

// Runs {"steps"} steps of {"delayMs"} in worker sessions on the queue
// "sessions": when a session's worker is lost, the steps left go on in a
// new session, at most {"sessions"} (3) in all.
flow<json> session_flow(context& ctx, json input) {
  auto steps = input.value("steps", 3);
  auto delay_ms = input.value("delayMs", std::int64_t{0});
  auto sessions_max = input.value("sessions", 3);
  auto timeout = std::chrono::milliseconds(
      input.value("workerTimeoutMs", std::int64_t{10'000}));
  json sessions = json::array();
  int done = 0;
  while (done < steps && static_cast<int>(sessions.size()) < sessions_max) {
    auto session = ctx.session({"sessions", timeout});
    json entry = {{"results", json::array()}};
    try {
      while (done < steps) {
        entry["results"].push_back(
            co_await session.step<json>("session-step", done, delay_ms));
        ++done;
      }
    } catch (const step_failed_error& e) {
      if (e.code() != session_failed_code) {
        throw;
      }
      entry["failure"] = e.what();
    }
    sessions.push_back(std::move(entry));
  }
  co_return json{{"steps", done}, {"sessions", sessions}};
}

flow<json> remote_echo_flow(context& ctx, json input) {
  auto count = input.value("count", 1);
  auto value = input.value("value", json());
  for (int i = 0; i < count; ++i) {
    value = co_await ctx.step<json>("remote-echo", value);
  }
  co_return json{{"count", count}, {"value", value}};
}

flow<json> pay_flow(context& ctx, json input) {
  auto order_id = input.at("orderId").get<std::string>();
  auto charges = input.value("charges", 1);
  json receipts = json::array();
  for (int i = 0; i < charges; ++i) {
    receipts.push_back(co_await ctx.step<json>("charge", order_id, i));
  }
  co_return json{{"orderId", order_id}, {"receipts", receipts}};
}

}  // namespace

void register_worker_steps(registry& flows) {
  retry_policy patient;
  patient.max_attempts = 1000;
  patient.initial_backoff = std::chrono::milliseconds(10);
  patient.max_backoff = std::chrono::milliseconds(200);
  flows.step("remote-echo", remote_echo,
             step_config{.retry = patient, .task_queue = "workers"});
  step_timeouts charge_timeouts;
  charge_timeouts.start_to_close =
      std::chrono::milliseconds(env_ms("DURIN_CHARGE_TIMEOUT_MS", 10'000));
  flows.step("charge", charge,
             step_config{.retry = patient,
                         .task_queue = "payments",
                         .timeouts = charge_timeouts});
  step_timeouts session_timeouts;
  session_timeouts.heartbeat =
      std::chrono::milliseconds(env_ms("DURIN_SESSION_HEARTBEAT_MS", 10'000));
  flows.step("session-step", session_step,
             step_config{.retry = patient,
                         .task_queue = "sessions",
                         .timeouts = session_timeouts});
  flows.flow("acme.remote-echo", remote_echo_flow);
  flows.flow("acme.pay", pay_flow);
  flows.flow("acme.session", session_flow);
}

}  // namespace durin::examples
