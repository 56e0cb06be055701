// Not a test: link support for durin_persistence_tests.
//
// result<T>::value() names durin::error::to_string() (to describe the error
// it refuses to unwrap), and that function, with durin::to_code, is defined
// in actors/error.cpp, part of the `durin` library. This binary links only
// `durin_persistence`, so these definitions stand in for them here. They
// follow the wire names of include/durin/error.hpp. Delete this file once
// the error table moves into a library that durin_persistence links.
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
  }
  return "internal";
}

std::string error::to_string() const {
  return std::string(to_code(code)) + ": " + message;
}

}  // namespace durin
