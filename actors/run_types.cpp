// Conversions of the public run and step value types.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <utility>

#include "base/time_text.hpp"
#include "durin/run.hpp"
#include "durin/runtime.hpp"
#include "durin/step.hpp"

namespace durin {

namespace {

// RFC 3339 in UTC with milliseconds; null before the epoch's first ms.
json timestamp(std::int64_t ms) {
  if (ms <= 0) {
    return nullptr;
  }
  return time_text::format_rfc3339_ms(ms);
}

}  // namespace

json run_info::to_json() const {
  json out = {{"id", id},
              {"instanceId", instance_id},
              {"flow", flow},
              {"status", std::string(to_string(status))},
              {"input", input},
              {"output", output},
              {"error", nullptr},
              {"createdAt", timestamp(created_at_ms)},
              {"startedAt", timestamp(started_at_ms)},
              {"completedAt", timestamp(completed_at_ms)}};
  if (error) {
    out["error"] = {{"code", error->code}, {"message", error->message}};
  }
  if (!blocked_reason.empty()) {
    out["blockedReason"] = blocked_reason;
  }
  if (!parent_run_id.empty()) {
    out["parentRunId"] = parent_run_id;
  }
  if (!continued_from.empty()) {
    out["continuedFrom"] = continued_from;
  }
  if (!start_token.empty()) {
    out["startToken"] = start_token;
  }
  if (!schedule_id.empty()) {
    out["scheduleId"] = schedule_id;
    out["occurrence"] = timestamp(occurrence_ms);
  }
  out["memo"] = memo;
  out["searchAttributes"] = durin::to_json(search_attributes);
  return out;
}

json hook_info::to_json() const {
  return {{"token", token},       {"runId", owner_run_id},
          {"metadata", metadata}, {"createdAt", timestamp(created_at_ms)},
          {"state", state},       {"retainUntil", timestamp(retain_until_ms)}};
}

json history_event::to_json() const {
  json out = {{"sequence", sequence}, {"kind", kind}, {"at", timestamp(at_ms)}};
  for (auto& [key, value] : detail.items()) {
    out[key] = value;
  }
  return out;
}

std::chrono::milliseconds retry_policy::backoff(std::uint32_t next_attempt,
                                                double unit) const {
  double base = static_cast<double>(initial_backoff.count());
  for (std::uint32_t i = 2; i < next_attempt; ++i) {
    base *= backoff_multiplier;
    if (base >= static_cast<double>(max_backoff.count())) {
      break;
    }
  }
  base = std::min(base, static_cast<double>(max_backoff.count()));
  double spread = std::clamp(jitter, 0.0, 1.0) * base;
  double delay = base - spread + 2.0 * spread * std::clamp(unit, 0.0, 1.0);
  return std::chrono::milliseconds(
      static_cast<std::int64_t>(std::max(0.0, std::round(delay))));
}

std::string retry_policy::problem() const {
  if (max_attempts < 1 || max_attempts > limits::retry_attempts_max) {
    return "retry_policy.max_attempts is " + std::to_string(max_attempts) +
           "; it must be 1 to " + std::to_string(limits::retry_attempts_max);
  }
  if (auto text = limits::duration_problem("retry_policy.initial_backoff",
                                           initial_backoff.count());
      !text.empty()) {
    return text;
  }
  if (auto text = limits::duration_problem("retry_policy.max_backoff",
                                           max_backoff.count());
      !text.empty()) {
    return text;
  }
  if (!(backoff_multiplier >= 1.0 && backoff_multiplier <= 1e6)) {
    return "retry_policy.backoff_multiplier is " +
           std::to_string(backoff_multiplier) + "; it must be 1 to 1000000";
  }
  if (!(jitter >= 0.0 && jitter <= 1.0)) {
    return "retry_policy.jitter is " + std::to_string(jitter) +
           "; it must be 0 to 1";
  }
  return {};
}

std::string step_timeouts::problem() const {
  const std::pair<const char*, std::chrono::milliseconds> fields[] = {
      {"step_timeouts.schedule_to_start", schedule_to_start},
      {"step_timeouts.start_to_close", start_to_close},
      {"step_timeouts.schedule_to_close", schedule_to_close},
      {"step_timeouts.heartbeat", heartbeat}};
  for (const auto& [name, value] : fields) {
    if (auto text = limits::duration_problem(name, value.count());
        !text.empty()) {
      return text;
    }
  }
  return {};
}

}  // namespace durin
