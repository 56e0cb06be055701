#include "bin/example_flows.hpp"

#include <functional>

#include "durin/flow.hpp"

namespace durin::examples {

namespace {

// A stand-in for a risk model: deterministic per order id, 0..99.
int score_order(const std::string& order_id) {
  return static_cast<int>(std::hash<std::string>{}(order_id) % 100);
}

std::string decide(int score) {
  return score < 70 ? "approved" : "review";
}

flow<json> review_order(context& ctx, json input) {
  if (!input.is_object() || !input.contains("orderId") ||
      !input["orderId"].is_string()) {
    throw fatal_error("input needs a string field 'orderId'");
  }
  auto order_id = input["orderId"].get<std::string>();
  int score = co_await ctx.step("score-order", score_order, order_id);
  auto decision = co_await ctx.step("record-decision", decide, score);
  co_return json{
      {"orderId", order_id}, {"decision", decision}, {"score", score}};
}

flow<json> sleep_flow(context& ctx, json input) {
  auto ms = input.value("ms", std::int64_t{0});
  co_await ctx.sleep(std::chrono::milliseconds(ms));
  co_return json{{"sleptMs", ms}};
}

// Fails `failures` times (counted in attempts, so across restarts too).
flow<json> flaky(context& ctx, json input) {
  auto failures = input.value("failures", 0u);
  retry_policy fast;
  fast.max_attempts = failures + 1;
  fast.initial_backoff = std::chrono::milliseconds(10);
  fast.max_backoff = std::chrono::milliseconds(100);
  auto result =
      co_await ctx.step(step_options("flaky-step", fast), [failures]() -> json {
        const auto& meta = step_metadata();
        if (meta.attempt <= failures) {
          throw retryable_error(
              "failing on purpose, attempt " + std::to_string(meta.attempt),
              std::chrono::milliseconds(10));
        }
        return json{{"attempts", meta.attempt}, {"stepId", meta.step_id}};
      });
  co_return result;
}

}  // namespace

void register_examples(registry& flows) {
  flows.flow("acme.review-order", review_order);
  flows.flow("acme.sleep", sleep_flow);
  flows.flow("acme.flaky", flaky);
}

}  // namespace durin::examples
