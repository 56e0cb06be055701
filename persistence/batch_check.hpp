// Which write batches durin may write or apply: a batch built against
// another database, or holding an operation durin never writes, is refused
// whole, never half applied. Used where batches come from elsewhere than
// this process's own puts: merged into a group (the committer) and applied
// as a primary's replicated write (a backup).
#pragma once

#include <cstdint>
#include <vector>

#include "durin/error.hpp"

namespace rocksdb {
class WriteBatch;
}  // namespace rocksdb

namespace durin::persistence {

// Invalid-argument unless every operation of `batch` is one durin writes
// (put, delete, single delete; a range delete outside the default family)
// on a family whose id is in `known` (the default family's, 0, always is).
// Copies nothing.
status check_families(const rocksdb::WriteBatch& batch,
                      const std::vector<std::uint32_t>& known);

}  // namespace durin::persistence
