// The routes that talk to running flows: messages (by run or instance id,
// with an optional start), updates and queries. Each checks its
// body, then calls the runtime (durin/runtime.hpp), which answers after the
// change is durable; they run on a gateway worker. In a cluster the path's
// run or instance id places them on the run's node (gateway/placement.cpp).
#include <optional>
#include <string>

#include "gateway/api.hpp"

namespace durin::gateway {

namespace {

// A string field of `body`, if present; an error answer when it is not a
// non-empty string.
std::optional<http_response> string_field(const json& body, const char* field,
                                          std::string& out) {
  if (!body.contains(field)) {
    return std::nullopt;
  }
  if (!body[field].is_string() || body[field].get<std::string>().empty()) {
    return bad_request(std::string("field '") + field +
                       "' must be a non-empty string");
  }
  out = body[field].get<std::string>();
  return std::nullopt;
}

// message-with-start's "start": {"flow", "input"}.
std::optional<http_response> read_message_start(
    const json& body, std::optional<message_start>& out) {
  if (!body.contains("start")) {
    return std::nullopt;
  }
  const auto& start = body["start"];
  if (!start.is_object()) {
    return bad_request("field 'start' must be an object {\"flow\", \"input\"}");
  }
  if (auto problem = only_fields(start, {"flow", "input"})) {
    return problem;
  }
  message_start parsed;
  if (!start.contains("flow") || !start["flow"].is_string()) {
    return bad_request("field 'start.flow' must be a flow name");
  }
  parsed.flow = start["flow"].get<std::string>();
  parsed.input = start.value("input", json::object());
  out = std::move(parsed);
  return std::nullopt;
}

}  // namespace

http_response api::send_message(request& ctx) {
  bool by_instance = ctx.path[1] == "instances";
  const std::string& id = ctx.params[0];
  const std::string& name = ctx.params[1];
  if (auto problem =
          by_instance
              ? only_fields(ctx.body, {"payload", "idempotencyKey", "start"})
              : only_fields(ctx.body, {"payload", "idempotencyKey"})) {
    return *problem;
  }
  message_options options;
  options.tenant = ctx.caller.tenant;
  if (auto problem =
          string_field(ctx.body, "idempotencyKey", options.idempotency_key)) {
    return *problem;
  }
  json payload = ctx.body.value("payload", json());
  std::optional<message_start> start;
  if (auto problem = read_message_start(ctx.body, start)) {
    return *problem;
  }
  auto receipt =
      by_instance ? node_.send_message_to_instance(id, name, std::move(payload),
                                                   options, std::move(start))
                  : node_.send_message(id, name, std::move(payload), options);
  if (!receipt) {
    return error_response(receipt.error());
  }
  return json_response(200, receipt->to_json());
}

http_response api::update_run(request& ctx) {
  if (auto problem = only_fields(ctx.body, {"args", "updateId", "waitFor"})) {
    return *problem;
  }
  update_options options;
  options.tenant = ctx.caller.tenant;
  if (auto problem = string_field(ctx.body, "updateId", options.update_id)) {
    return *problem;
  }
  std::string wait_for = "completed";
  if (auto problem = string_field(ctx.body, "waitFor", wait_for)) {
    return *problem;
  }
  if (wait_for != "completed" && wait_for != "accepted") {
    return bad_request(
        "field 'waitFor' is \"accepted\" or \"completed\"; got '" + wait_for +
        "'");
  }
  options.wait_completed = wait_for == "completed";
  options.timeout = std::chrono::milliseconds(options_.wait_ms_max);
  auto receipt = node_.update(ctx.params[0], ctx.params[1],
                              ctx.body.value("args", json()), options);
  if (!receipt) {
    return error_response(receipt.error());
  }
  return json_response(200, receipt->to_json());
}

http_response api::query_run(request& ctx) {
  json args;
  if (auto given = ctx.query.find("args"); given != ctx.query.end()) {
    args = json::parse(given->second, nullptr, false);
    if (args.is_discarded()) {
      return bad_request("query parameter 'args' must be JSON");
    }
  }
  auto answer = node_.query(ctx.params[0], ctx.params[1], std::move(args),
                            ctx.caller.tenant);
  if (!answer) {
    return error_response(answer.error());
  }
  return json_response(200, {{"runId", ctx.params[0]},
                             {"query", ctx.params[1]},
                             {"result", std::move(*answer)}});
}

}  // namespace durin::gateway
