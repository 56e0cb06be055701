// Tests only: storage faults injected into a runtime's group writes through
// its committer (persistence/committer.hpp), so a test can make a write fail
// before it lands, or land and still report a failure (an indefinite
// outcome). Not part of the public API: embedding applications never see it.
#pragma once

#include <functional>
#include <utility>

#include "durin/runtime.hpp"
#include "persistence/committer.hpp"
#include "services/node.hpp"
#include "services/runtime_access.hpp"

namespace durin::testing {

using storage_fault = persistence::committer::fault;

// `decide` is asked before each group write of `rt` from now on, on the
// committer's thread of the shard written (one function for all shards);
// null restores normal writes.
inline void inject_storage_faults(runtime& rt,
                                  std::function<storage_fault()> decide) {
  for (auto& shard : runtime_access::services(rt).shards) {
    shard->committer->set_fault_injector(decide);
  }
}

}  // namespace durin::testing
