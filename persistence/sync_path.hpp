// fsync of a file or a directory by its path, for the files durin writes
// beside RocksDB (copies of a shard, the admin key): a new or renamed file
// is durable only once its directory is synced too.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>

namespace durin::persistence {

// False when the path cannot be opened or the fsync fails.
inline bool sync_path(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    return false;
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  return synced;
}

}  // namespace durin::persistence
