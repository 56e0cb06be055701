#include "durin/error.hpp"

namespace durin {

std::string_view to_code(errc code) noexcept {
  switch (code) {
    case errc::invalid_argument:
      return "invalid-argument";
    case errc::flow_not_found:
      return "flow-not-found";
    case errc::step_not_found:
      return "step-not-found";
    case errc::run_not_found:
      return "run-not-found";
    case errc::invalid_input:
      return "invalid-input";
    case errc::run_finished:
      return "run-finished";
    case errc::storage_error:
      return "storage-error";
    case errc::corrupt_record:
      return "corrupt-record";
    case errc::nondeterministic_replay:
      return "nondeterministic-replay";
    case errc::step_failed:
      return "step-failed";
    case errc::flow_error:
      return "flow-error";
    case errc::cancelled:
      return "cancelled";
    case errc::timeout:
      return "timeout";
    case errc::shutting_down:
      return "shutting-down";
    case errc::internal:
      return "internal";
    case errc::hook_conflict:
      return "hook-conflict";
    case errc::hook_not_found:
      return "hook-not-found";
    case errc::start_outcome_unknown:
      return "start-outcome-unknown";
    case errc::schedule_not_found:
      return "schedule-not-found";
    case errc::schedule_exists:
      return "schedule-exists";
    case errc::update_rejected:
      return "update-rejected";
    case errc::query_refused:
      return "query-refused";
    case errc::handler_not_found:
      return "handler-not-found";
    case errc::unavailable:
      return "unavailable";
  }
  return "internal";
}

std::string error::to_string() const {
  std::string text(to_code(code));
  text += ": ";
  text += message;
  return text;
}

}  // namespace durin
