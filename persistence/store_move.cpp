// Moving a shard's files between nodes (store.hpp, export_files and
// replace_files): only behind a closed fence, with the database closed
// under the store's exclusive lock, so that no reopen races the copy.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>

#include "persistence/store.hpp"
#include "persistence/store_internal.hpp"
#include "persistence/sync_path.hpp"

namespace durin::persistence {

namespace {

namespace fs = std::filesystem;

error move_failure(std::string_view what, const std::error_code& failure) {
  // The message names the step, not the path.
  return make_error(errc::storage_error,
                    std::string(what) + ": " + failure.message());
}

// Not part of a database's state: its lock, our own info log.
bool skipped(const fs::path& name) {
  const auto file = name.filename().string();
  return file == "LOCK" || file == "LOG" || file.rfind("LOG.old", 0) == 0;
}

}  // namespace

status store::export_files(const std::string& into) {
  if (!options_.fence || options_.fence->open()) {
    return make_error(errc::internal,
                      "a shard's files are exported only behind a closed "
                      "fence");
  }
  std::unique_lock exclusive(db_mutex_);
  close_database();
  std::error_code failure;
  fs::create_directories(into, failure);
  if (failure) {
    return move_failure("create the copy's directory", failure);
  }
  for (const auto& entry : fs::directory_iterator(dir_, failure)) {
    if (!entry.is_regular_file() || skipped(entry.path())) {
      continue;
    }
    const auto target = fs::path(into) / entry.path().filename();
    if (entry.path().extension() == ".sst") {
      fs::create_hard_link(entry.path(), target, failure);
    }
    if (entry.path().extension() != ".sst" || failure) {
      failure.clear();
      fs::copy_file(entry.path(), target, fs::copy_options::overwrite_existing,
                    failure);
    }
    if (failure) {
      return move_failure("copy a database file", failure);
    }
    if (!sync_path(target)) {
      return make_error(errc::storage_error, "sync a copied database file");
    }
  }
  if (failure) {
    return move_failure("list the database files", failure);
  }
  if (!sync_path(into)) {
    return make_error(errc::storage_error, "sync the copy's directory");
  }
  return {};
}

status store::replace_files(const std::string& from) {
  if (!options_.fence || options_.fence->open()) {
    return make_error(errc::internal,
                      "a shard's files are replaced only behind a closed "
                      "fence");
  }
  std::unique_lock exclusive(db_mutex_);
  close_database();
  following_.store(false, std::memory_order_release);
  std::error_code failure;
  const fs::path current(dir_);
  const fs::path old = current.string() + ".old";
  fs::remove_all(old, failure);
  failure.clear();
  if (fs::exists(current)) {
    fs::rename(current, old, failure);
    if (failure) {
      return move_failure("set the shard's old files aside", failure);
    }
  }
  fs::rename(from, current, failure);
  if (failure) {
    std::error_code ignored;
    fs::rename(old, current, ignored);  // as it was
    return move_failure("put the shard's new files in place", failure);
  }
  if (!sync_path(current.parent_path())) {
    return make_error(errc::storage_error, "sync the shards' directory");
  }
  fs::remove_all(old, failure);
  // Another node's database: its families were made in the same order by
  // the same schema, but its ids are checked afresh at the next open.
  family_ids_.clear();
  return {};
}

}  // namespace durin::persistence
