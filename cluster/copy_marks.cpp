#include "cluster/copy_marks.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

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

result<std::string> data_dir_identity(const std::string& data_dir) {
  const fs::path path = fs::path(data_dir) / "DURIN-NODE-IDENTITY";
  {
    std::ifstream in(path);
    std::string identity;
    if (in && std::getline(in, identity) && identity.size() == 32) {
      return identity;
    }
  }
  std::random_device random;
  std::string identity;
  for (int i = 0; i < 32; ++i) {
    identity += "0123456789abcdef"[random() % 16];
  }
  std::error_code failure;
  fs::create_directories(data_dir, failure);
  const fs::path fresh = path.string() + ".new";
  {
    std::ofstream out(fresh, std::ios::trunc);
    out << identity << "\n";
    if (!out.flush()) {
      return make_error(errc::storage_error,
                        "cannot write the data directory's identity");
    }
  }
  bool durable = persistence::sync_path(fresh);
  if (durable) {
    fs::rename(fresh, path, failure);
    durable = !failure && persistence::sync_path(data_dir);
  }
  if (!durable) {
    return make_error(errc::storage_error,
                      "cannot make the data directory's identity durable");
  }
  return identity;
}

}  // namespace durin::cluster
