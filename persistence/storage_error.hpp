// How persistence/ turns a RocksDB status into durin's error values: in plain
// words that name the fault (a full disk, no file descriptors left, an I/O
// error), never a file system path, so that no answer shows the layout of the
// node's disk. For persistence/ only.
#pragma once

#include <string>
#include <string_view>

#include "durin/error.hpp"

namespace rocksdb {
class Status;
}

namespace durin::persistence {

// "the disk is full", "the process has no file descriptors left", "an I/O
// error on the data disk", ...; never the status's own message.
std::string plain_words(const rocksdb::Status& status);

// A fault that may go away by itself (space freed, descriptors closed, a
// device back), as opposed to a misconfiguration (a held lock, a missing
// permission) or bad data.
bool transient_fault(const rocksdb::Status& status);

// storage-error "<what>: <plain words>".
error storage_failure(std::string_view what, const rocksdb::Status& status);

}  // namespace durin::persistence
