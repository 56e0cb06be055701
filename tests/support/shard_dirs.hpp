// Where a test finds a node's stores on disk without the node running: the
// data directory itself for a node of one shard, else shards/NNN (see
// services/runtime.cpp). Test builds may run every test with several shards
// (DURIN_TEST_SHARDS), so a test that opens a store by hand goes through
// these.
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "services/shard_map.hpp"

namespace durin::testing {

inline std::uint32_t shard_count(const std::string& data_dir) {
  std::ifstream in(data_dir + "/shards/count");
  std::uint32_t count = 1;
  if (in) {
    in >> count;
  }
  return count;
}

inline std::string shard_dir(const std::string& data_dir, std::uint32_t index) {
  if (shard_count(data_dir) == 1) {
    return data_dir;
  }
  char name[16];
  std::snprintf(name, sizeof name, "%03u", index);
  return data_dir + "/shards/" + name;
}

inline std::vector<std::string> shard_dirs(const std::string& data_dir) {
  std::vector<std::string> dirs;
  const auto count = shard_count(data_dir);
  for (std::uint32_t index = 0; index < count; ++index) {
    dirs.push_back(shard_dir(data_dir, index));
  }
  return dirs;
}

// The store directory holding `run_id`.
inline std::string run_store_dir(const std::string& data_dir,
                                 const std::string& run_id) {
  return shard_dir(data_dir,
                   services::shard_map(shard_count(data_dir)).of_run(run_id));
}

}  // namespace durin::testing
