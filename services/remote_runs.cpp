#include "services/remote_runs.hpp"

namespace durin::services {

bool has_ended(const result<run_info>& read) {
  return read ? is_terminal(read->status)
              : read.error().code == errc::run_not_found;
}

}  // namespace durin::services
