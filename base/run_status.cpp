// The names of run states (include/durin/run.hpp), in base/ so that the
// store's query evaluation (persistence/run_query.cpp) names them as the
// API does.
#include "durin/run.hpp"

namespace durin {

std::string_view to_string(run_status status) noexcept {
  switch (status) {
    case run_status::pending:
      return "pending";
    case run_status::running:
      return "running";
    case run_status::waiting:
      return "waiting";
    case run_status::completed:
      return "completed";
    case run_status::failed:
      return "failed";
    case run_status::cancelled:
      return "cancelled";
    case run_status::blocked:
      return "blocked";
    case run_status::terminated:
      return "terminated";
  }
  return "unknown";
}

std::optional<run_status> parse_run_status(std::string_view text) noexcept {
  for (auto status :
       {run_status::pending, run_status::running, run_status::waiting,
        run_status::completed, run_status::failed, run_status::cancelled,
        run_status::blocked, run_status::terminated}) {
    if (to_string(status) == text) {
      return status;
    }
  }
  return std::nullopt;
}

bool is_terminal(run_status status) noexcept {
  return status == run_status::completed || status == run_status::failed ||
         status == run_status::cancelled || status == run_status::terminated;
}

}  // namespace durin
