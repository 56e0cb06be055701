#include "bin/example_flows.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

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
  // Saturated, not wrapped: {"ms": 1e300} is beyond ctx.sleep's maximum (the
  // run fails as invalid-argument), as {"ms": INT64_MAX} is; converted as
  // is, it became INT64_MIN, a sleep that ended at once.
  auto ms = input.value("ms", std::int64_t{0});
  if (input.contains("ms") && input["ms"].is_number_float()) {
    ms = static_cast<std::int64_t>(
        std::clamp(input["ms"].get<double>(), -1.0, 9.0e18));
  }
  co_await ctx.sleep(std::chrono::milliseconds(ms));
  co_return json{{"sleptMs", ms}};
}

// Fails `failures` times (counted in attempts, so across restarts too).
// More failures than a retry policy may allow (limits::retry_attempts_max,
// 1000) ask for a policy durin refuses: the run fails with invalid-argument.
flow<json> flaky(context& ctx, json input) {
  // Saturated, not wrapped: {"failures": 1e9} must not become a small count.
  auto asked = input.value("failures", 0.0);
  auto failures = static_cast<std::uint32_t>(
      std::clamp(asked, 0.0, static_cast<double>(UINT32_MAX - 1)));
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

// Records `note`, then every note resumed to the order's hook until one says
// "done": the start hook when started with one, else hook order:{orderId}
// (taken from its owner with "force": true, held "retainMs" after the run).
flow<json> order_notes(context& ctx, json input) {
  auto order_id = input.at("orderId").get<std::string>();
  json notes = json::array();
  auto record = [](const std::string& note) { return note; };
  notes.push_back(co_await ctx.step("record-note", record,
                                    input.value("note", std::string())));
  auto updates = ctx.create_hook<json>(
      {.token = "order:" + order_id,
       .min_retention = input.contains("retainMs") ? input["retainMs"] : json(),
       .force = input.value("force", false)});
  if (auto owner = co_await updates.conflict()) {
    co_return json{{"orderId", order_id}, {"duplicateOf", owner->run_id()}};
  }
  while (auto update = co_await updates.next()) {
    notes.push_back(co_await ctx.step("record-note", record,
                                      update->value("note", std::string())));
    if (update->value("done", false)) {
      break;
    }
  }
  co_return json{{"orderId", order_id}, {"notes", notes}};
}

// Creates a webhook, records its URL (shown in the run's history), and
// returns the first request POSTed to it: method, headers and body.
flow<json> await_webhook(context& ctx, json) {
  auto inbox = ctx.create_webhook<json>();
  // Named, not a temporary in the co_await (g++ 12 coroutine bug).
  auto publish = [url = "/v1/webhooks/" + inbox.token()] {
    return json{{"webhookUrl", url}};
  };
  co_await ctx.step("publish-webhook", publish);
  json request = co_await inbox;
  co_return request;
}

// Reads messages named "note", in the order recorded, until one has
// "done": true; returns them all.
flow<json> inbox(context& ctx, json) {
  json notes = json::array();
  auto stream = ctx.messages<json>("note");
  for (;;) {
    json note = co_await stream.next();
    notes.push_back(note);
    if (note.is_object() && note.value("done", false)) {
      break;
    }
  }
  co_return json{{"notes", std::move(notes)}};
}

// Applies a {"memo"?, "searchAttributes"?, "removeSearchAttributes"?: [names]}
// to the run: a bad attribute or name throws invalid_argument_error, which
// fails the run.
void apply_tags(context& ctx, const json& tags) {
  if (!tags.is_object()) {
    return;
  }
  if (tags.contains("memo")) {
    ctx.set_memo(tags["memo"]);
  }
  if (tags.contains("searchAttributes")) {
    auto attributes = search_attributes_from_json(tags["searchAttributes"]);
    if (!attributes) {
      throw invalid_argument_error(attributes.error().message);
    }
    ctx.upsert_search_attributes(std::move(*attributes));
  }
  if (tags.contains("removeSearchAttributes")) {
    const auto& names = tags["removeSearchAttributes"];
    auto not_names = [] {
      return invalid_argument_error(
          "removeSearchAttributes is an array of attribute names");
    };
    if (!names.is_array()) {
      throw not_names();
    }
    std::vector<std::string> removed;
    for (const auto& name : names) {
      if (!name.is_string()) {
        throw not_names();
      }
      removed.push_back(name.get<std::string>());
    }
    ctx.remove_search_attributes(std::move(removed));
  }
}

// Tags itself from its input, then from each message "tag", until one has
// "done": true.
flow<json> tagged(context& ctx, json input) {
  apply_tags(ctx, input);
  auto stream = ctx.messages<json>("tag");
  std::int64_t tags = 0;
  for (;;) {
    json tag = co_await stream.next();
    apply_tags(ctx, tag);
    ++tags;
    if (tag.is_object() && tag.value("done", false)) {
      break;
    }
  }
  co_return json{{"tags", tags}};
}

// Why an "add" update's args are refused ("" when they are not).
std::string add_problem(const json& args) {
  if (!args.is_object() || !args.contains("by") ||
      !args["by"].is_number_integer()) {
    return "add takes {\"by\": an integer}";
  }
  if (args["by"].get<std::int64_t>() < 0) {
    return "'by' must not be negative; got " + args["by"].dump();
  }
  return {};
}

// Holds a number (input {"value"}, 0 by default): update "add" {"by"}
// adds to it and answers the new value; query "value" reads it; message
// "stop" ends the run.
flow<json> counter(context& ctx, json input) {
  std::int64_t value = 0;
  if (input.is_object() && input.contains("value") &&
      input["value"].is_number_integer()) {
    value = input["value"].get<std::int64_t>();
  }
  ctx.on_query("value", [&value](const json&) {
    return json{{"value", value}};
  });
  ctx.on_update("add", add_problem);
  // Named, not a temporary in the co_await (g++ 12 coroutine bug).
  const std::vector<std::string> inputs = {"add", "stop"};
  for (;;) {
    inbound in = co_await ctx.receive(inputs);
    if (in.name == "stop") {
      break;
    }
    if (add_problem(in.payload).empty()) {
      value += in.payload["by"].get<std::int64_t>();
    }
    if (in.is_update()) {
      ctx.complete_update(in, json{{"value", value}});
    }
  }
  co_return json{{"value", value}};
}

// Starts acme.review-order as a child run per item of "orders" (an object
// is the child's input, a string its orderId), all before awaiting any, so
// they run side by side; then gathers their outputs in order. Each child
// has the memo {"item": its index} and the search attribute "parentRunId",
// this run's id.
flow<json> parent_flow(context& ctx, json input) {
  if (!input.is_object() || !input.contains("orders") ||
      !input["orders"].is_array()) {
    throw fatal_error("input needs an array field 'orders'");
  }
  std::vector<run_handle> children;
  child_options options;
  options.search = {{"parentRunId", search_value::keyword(ctx.run_id())}};
  for (const auto& order : input["orders"]) {
    json child_input =
        order.is_string() ? json{{"orderId", order}} : json(order);
    options.memo = {{"item", children.size()}};
    children.push_back(
        co_await ctx.start_child("acme.review-order", child_input, options));
  }
  json results = json::array();
  for (const auto& child : children) {
    results.push_back(co_await child.return_value<json>());
  }
  co_return json{{"results", results}};
}

// Starts "count" acme.sleep children of "ms" each, then awaits them:
// {"slept": count}. "parentClose" ("terminate", the default, "cancel" or
// "abandon") says what becomes of them when this run ends first.
flow<json> nap_group(context& ctx, json input) {
  auto count = input.value("count", std::int64_t{1});
  if (count < 1 || count > 100) {
    throw fatal_error("'count' must be from 1 to 100");
  }
  child_options options;
  const auto close = input.value("parentClose", std::string("terminate"));
  if (close == "cancel") {
    options.parent_close = parent_close_policy::cancel;
  } else if (close == "abandon") {
    options.parent_close = parent_close_policy::abandon;
  } else if (close != "terminate") {
    throw fatal_error("'parentClose' must be terminate, cancel or abandon");
  }
  // Built before any co_await: GCC cannot keep a string literal's
  // temporary across a suspension.
  const json child_input = {{"ms", input.value("ms", std::int64_t{0})}};
  std::vector<run_handle> children;
  for (std::int64_t i = 0; i < count; ++i) {
    children.push_back(
        co_await ctx.start_child("acme.sleep", child_input, options));
  }
  for (const auto& child : children) {
    co_await child.return_value<json>();
  }
  co_return json{{"slept", count}};
}

// Looks at the run "runId" (of the same tenant, anywhere in a cluster),
// awaits its end and returns its status as first seen and its output:
// {"seen", "output"}.
flow<json> await_run(context& ctx, json input) {
  if (!input.contains("runId") || !input["runId"].is_string()) {
    throw fatal_error("input needs a string field 'runId'");
  }
  auto other = ctx.run(input["runId"].get<std::string>());
  auto seen = co_await other.status();
  auto output = co_await other.return_value<json>();
  co_return json{{"seen", std::string(to_string(seen))}, {"output", output}};
}

// Counts to "limit" one step at a time, continuing as new every "every"
// steps (so no history grows beyond "every" steps); "count" and "runs"
// carry the state across runs.
flow<json> rolling(context& ctx, json input) {
  auto limit = input.value("limit", std::int64_t{0});
  auto every = std::max<std::int64_t>(1, input.value("every", std::int64_t{1}));
  auto count = input.value("count", std::int64_t{0});
  auto runs = input.value("runs", std::int64_t{1});
  auto add_one = [](std::int64_t n) { return n + 1; };
  for (std::int64_t i = 0; i < every && count < limit; ++i) {
    count = co_await ctx.step("count", add_one, count);
  }
  if (count < limit) {
    ctx.continue_as_new(json{{"limit", limit},
                             {"every", every},
                             {"count", count},
                             {"runs", runs + 1}});
  }
  co_return json{{"count", count}, {"runs", runs}};
}

}  // namespace

void register_examples(registry& flows) {
  flows.flow("acme.inbox", inbox);
  flows.flow("acme.counter", counter);
  flows.flow("acme.parent", parent_flow);
  flows.flow("acme.nap-group", nap_group);
  flows.flow("acme.await-run", await_run);
  flows.flow("acme.rolling", rolling);
  flows.flow("acme.order-notes", order_notes);
  flows.flow("acme.review-order", review_order);
  flows.flow("acme.sleep", sleep_flow);
  flows.flow("acme.flaky", flaky);
  flows.flow("acme.await-webhook", await_webhook);
  flows.flow("acme.tagged", tagged);
}

}  // namespace durin::examples
