#include "cluster/copy_marks.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "persistence/sync_path.hpp"

namespace durin::cluster {

namespace fs = std::filesystem;

status mark_copy(const std::string& store_dir) {
  const fs::path mark = fs::path(store_dir) / copy_mark_name;
  std::error_code failure;
  if (fs::exists(mark, failure)) {
    return {};
  }
  fs::create_directories(store_dir, failure);
  {
    std::ofstream out(mark, std::ios::trunc);
    out << "this directory holds a copy of a durin shard's history\n";
    if (!out.flush()) {
      return make_error(errc::storage_error,
                        "cannot write the mark of a shard's copy");
    }
  }
  if (!persistence::sync_path(mark) || !persistence::sync_path(store_dir)) {
    return make_error(errc::storage_error,
                      "cannot sync the mark of a shard's copy");
  }
  return {};
}

bool copy_marked(const std::string& store_dir) {
  std::error_code failure;
  return fs::exists(fs::path(store_dir) / copy_mark_name, failure) ||
         fs::exists(fs::path(store_dir) / "CURRENT", failure);
}

}  // namespace durin::cluster
