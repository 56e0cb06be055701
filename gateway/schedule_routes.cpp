// The routes of schedules (/v1/schedules...): thin over the node's schedule
// service (services/schedule_service.hpp). Each runs on a gateway worker
// (a change waits for its fsync); placement routes it to the node serving
// the schedule's shard (gateway/placement.cpp), a list asks every node.
#include <algorithm>
#include <string>

#include "base/time_text.hpp"
#include "gateway/api.hpp"
#include "services/node.hpp"
#include "services/runtime_access.hpp"
#include "services/schedule_service.hpp"

namespace durin::gateway {

namespace {

services::schedule_service& schedules_of(runtime& node) {
  return *runtime_access::services(node).schedules;
}

std::optional<std::int64_t> time_field(const json& body, const char* field) {
  if (!body.contains(field) || !body[field].is_string()) {
    return std::nullopt;
  }
  return time_text::parse_rfc3339_ms(body[field].get<std::string>());
}

http_response view_response(unsigned status, result<json> outcome) {
  return outcome ? json_response(status, *outcome)
                 : error_response(outcome.error());
}

// Pages of schedules (by id, each with its nextCursor) as one page.
json merge_schedule_pages(std::vector<json>& pages, std::size_t limit) {
  std::vector<json> merged;
  for (auto& page : pages) {
    for (auto& one : page["schedules"]) {
      merged.push_back(std::move(one));
    }
  }
  std::sort(merged.begin(), merged.end(), [](const json& a, const json& b) {
    return a.value("scheduleId", "") < b.value("scheduleId", "");
  });
  json out = json::array();
  for (auto& one : merged) {
    if (out.size() == limit) {
      break;
    }
    out.push_back(std::move(one));
  }
  json next = merged.size() > limit ? out.back()["scheduleId"] : json(nullptr);
  return json{{"schedules", std::move(out)}, {"nextCursor", std::move(next)}};
}

}  // namespace

http_response api::create_schedule(request& ctx) {
  auto made = schedules_of(node_).create(ctx.caller.tenant, ctx.body);
  if (!made) {
    return error_response(made.error());
  }
  return json_response(made->value("created", false) ? 201 : 200, *made);
}

http_response api::get_schedule(request& ctx) {
  return view_response(
      200, schedules_of(node_).get(ctx.caller.tenant, ctx.params[0]));
}

http_response api::list_schedules(request& ctx) {
  std::string after;
  std::size_t limit = 100;
  for (const auto& [name, value] : ctx.query) {
    if (name == "cursor") {
      after = value;
    } else {  // limit (api::routes() lets no other name through)
      auto number = query_number(value, 1, services::schedules_page_max, 4);
      if (!number) {
        return bad_request("limit must be a number from 1 to " +
                           std::to_string(services::schedules_page_max));
      }
      limit = *number;
    }
  }
  auto page = schedules_of(node_).list(ctx.caller.tenant, after, limit);
  if (!page) {
    return error_response(page.error());
  }
  if (placement_ == nullptr || ctx.forwarded) {
    return json_response(200, *page);
  }
  std::vector<json> pages{std::move(*page)};
  if (auto refused = gather_other_nodes(ctx, "schedules", pages)) {
    return std::move(*refused);
  }
  auto merged = merge_schedule_pages(pages, limit);
  if (auto missing = placement_->unserved(); !missing.empty()) {
    merged["unavailableShards"] = missing;
  }
  return json_response(200, merged);
}

http_response api::change_schedule(request& ctx) {
  const auto& id = ctx.params[0];
  const auto& verb = ctx.path.back();
  auto& schedules = schedules_of(node_);
  if (verb == "pause" || verb == "unpause") {
    if (auto problem = only_fields(ctx.body, {"note"})) {
      return *problem;
    }
    if (ctx.body.contains("note") && !ctx.body["note"].is_string()) {
      return bad_request("field 'note' must be a string");
    }
    return view_response(
        200, schedules.pause(ctx.caller.tenant, id, verb == "pause",
                             ctx.body.value("note", std::string())));
  }
  if (verb == "trigger") {
    if (auto problem = only_fields(ctx.body, {})) {
      return *problem;
    }
    return view_response(202, schedules.trigger(ctx.caller.tenant, id));
  }
  // backfill
  if (auto problem = only_fields(ctx.body, {"startAt", "endAt"})) {
    return *problem;
  }
  auto from = time_field(ctx.body, "startAt");
  auto to = time_field(ctx.body, "endAt");
  if (!from || !to) {
    return bad_request(
        "backfill needs 'startAt' and 'endAt', RFC 3339 times such as "
        "\"2026-12-01T09:00:00Z\"");
  }
  return view_response(202,
                       schedules.backfill(ctx.caller.tenant, id, *from, *to));
}

http_response api::delete_schedule(request& ctx) {
  auto removed = schedules_of(node_).remove(ctx.caller.tenant, ctx.params[0]);
  if (!removed) {
    return error_response(removed.error());
  }
  return json_response(200, {{"scheduleId", ctx.params[0]}, {"deleted", true}});
}

}  // namespace durin::gateway
