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
//
// The data directory's identity (a random id in a file of its own, made at
// the node's first join) tells an earlier run of this node, whose lease
// it may end at once, from another process registered under the same node
// id with another directory, which it must not (cluster/membership.cpp).
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

// The identity of the node's data directory: read, or made durably when
// the directory has none; storage-error when it can be neither.
result<std::string> data_dir_identity(const std::string& data_dir);

}  // namespace durin::cluster
