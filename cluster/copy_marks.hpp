// Whether this node's disk holds a shard's history, so that an owner whose
// data directory was deleted (or replaced by an empty one) never takes its
// shard back as if the shard had no runs: that would lose every write it
// acknowledged, and answer a retried keyed request with a second run.
//
// A node marks its copy of a shard (a file in the shard's store directory,
// synced with its directory) before it asks etcd for the shard, on every
// acquisition and promotion and before it finishes a move. An owner that
// takes its shard again at epoch > 0 must find the mark; one that does not
// refuses (the shard stays unserved, GET /v1/ready names it) until another
// copy in step takes it, or the operator runs `durin cluster accept-loss`.
// Deleting the directory deletes the mark with it.
#pragma once

#include <string>

#include "durin/error.hpp"

namespace durin::cluster {

// The mark's file name in a shard's store directory.
inline constexpr const char* copy_mark_name = "DURIN-SHARD-HISTORY";

// Writes the mark durably (the file and its directory synced);
// storage-error when it cannot.
status mark_copy(const std::string& store_dir);
// The mark is there, or a RocksDB database (its CURRENT file) made by a
// build from before marks: a copy that was served here.
bool copy_marked(const std::string& store_dir);

}  // namespace durin::cluster
