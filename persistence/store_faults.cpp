// The store's readiness: RocksDB statuses in plain words, the listener of
// background errors, the first fault that makes the store not ready, and
// the recovery thread that reopens the database with backoff until a
// synced probe write proves writes work again (store.hpp,
// persistence/README.md invariant 8).
#include <rocksdb/db.h>
#include <rocksdb/listener.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>

#include "persistence/keys.hpp"
#include "persistence/storage_error.hpp"
#include "persistence/store.hpp"
#include "persistence/store_internal.hpp"

namespace durin::persistence {

using namespace store_detail;

// ---- storage faults ---------------------------------------------------------

std::string plain_words(const rocksdb::Status& status) {
  // The status's text names files; it is only searched, never shown.
  const std::string text = status.ToString();
  auto says = [&text](std::string_view words) {
    return text.find(words) != std::string::npos;
  };
  if (status.IsNoSpace() || says("No space left on device")) {
    return "the disk is full";
  }
  if (says("Too many open files")) {  // EMFILE, and ENFILE ("in system")
    return "the process has no file descriptors left";
  }
  if (says("Input/output error")) {
    return "an I/O error on the data disk";
  }
  if (says("lock file") || says("lock hold")) {
    return "the data directory is in use by another process (or another "
           "open of it in this one)";
  }
  if (says("Permission denied")) {
    return "permission denied on the data directory";
  }
  if (says("Read-only file system")) {
    return "the data disk is read-only";
  }
  if (status.IsCorruption()) {
    return "corrupt data on the data disk";
  }
  if (status.IsIOError()) {
    return "an I/O error on the data disk";
  }
  if (status.IsIncomplete() || status.IsBusy() || status.IsTryAgain()) {
    return "the storage engine stalled";
  }
  if (status.IsShutdownInProgress()) {
    return "the storage engine is shutting down";
  }
  return "the storage engine failed";
}

bool transient_fault(const rocksdb::Status& status) {
  const std::string text = status.ToString();
  return status.IsNoSpace() ||
         text.find("No space left on device") != std::string::npos ||
         text.find("Too many open files") != std::string::npos ||
         text.find("Input/output error") != std::string::npos;
}

error storage_failure(std::string_view what, const rocksdb::Status& status) {
  return make_error(errc::storage_error,
                    std::string(what) + ": " + plain_words(status));
}
namespace {

// Written (synced) by every reopen: the proof that writes work again.

const char* reason_words(rocksdb::BackgroundErrorReason reason) {
  switch (reason) {
    case rocksdb::BackgroundErrorReason::kFlush:
    case rocksdb::BackgroundErrorReason::kFlushNoWAL:
      return "a flush failed";
    case rocksdb::BackgroundErrorReason::kCompaction:
      return "a compaction failed";
    case rocksdb::BackgroundErrorReason::kWriteCallback:
      return "a write failed";
    case rocksdb::BackgroundErrorReason::kMemTable:
      return "a memtable switch failed";
    case rocksdb::BackgroundErrorReason::kManifestWrite:
    case rocksdb::BackgroundErrorReason::kManifestWriteNoWAL:
      return "a manifest write failed";
  }
  return "background work failed";
}

std::int64_t elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now() - since)
      .count();
}

}  // namespace
void store::fault_listener::OnBackgroundError(
    rocksdb::BackgroundErrorReason reason, rocksdb::Status* error) {
  if (error != nullptr && !error->ok()) {
    owner_.report_fault(
        generation_, plain_words(*error) + " (" + reason_words(reason) + ")");
  }
}

void store::fault_listener::OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason,
                                                 rocksdb::Status,
                                                 bool* auto_recovery) {
  *auto_recovery = false;
}

void store::report_fault(std::uint64_t generation, const std::string& fault) {
  auto& health = *health_;
  {
    std::lock_guard lock(health.mutex);
    if (generation != generation_.load(std::memory_order_acquire)) {
      return;  // a database already closed
    }
    if (options_.fence) {
      options_.fence->set_ready(false);
    }
    if (health.ready.load(std::memory_order_acquire)) {
      health.ready.store(false, std::memory_order_release);
      health.fault = fault;
      health.faults += 1;
      health.since = std::chrono::steady_clock::now();
    } else if (health.fault.empty()) {
      health.fault = fault;
    }
  }
  health.wake.notify_all();
}

storage_health store::health() const {
  auto& health = *health_;
  std::lock_guard lock(health.mutex);
  storage_health out;
  out.ready = health.ready.load(std::memory_order_acquire);
  out.fenced = options_.fence && !options_.fence->open();
  if (out.fenced && out.ready) {
    // Its deadline passed with no read or write since: not ready all the
    // same (the next use reports it).
    out.ready = false;
    out.fault = std::string(fenced_words);
    out.faults = health.faults;
    out.reopens = health.reopens;
    return out;
  }
  out.faults = health.faults;
  out.reopens = health.reopens;
  if (!out.ready) {
    out.fault =
        health.fault.empty() ? "the database is reopening" : health.fault;
    out.not_ready_ms = elapsed_ms(health.since);
  }
  return out;
}

bool store::ready() const {
  return health_->ready.load(std::memory_order_acquire);
}

void store::set_health_listener(health_listener listener) {
  std::lock_guard calling(health_->listener_mutex);
  health_->listener = std::move(listener);
}

void store::fence_changed() {
  if (options_.fence->open()) {
    poke();  // granted: reopen now
  } else {
    report_fault(generation_.load(std::memory_order_acquire),
                 std::string(fenced_words));
  }
}

void store::poke() {
  {
    std::lock_guard lock(health_->mutex);
    health_->poked = true;
  }
  health_->wake.notify_all();
}

store::pin store::hold() const {
  pin pinned;
  if (!ready()) {
    return pinned;
  }
  if (options_.fence && !options_.fence->open()) {
    // The lease ended: nothing more is read or written until the fence is
    // granted again and the database reopened (it may have moved).
    const_cast<store*>(this)->report_fault(
        generation_.load(std::memory_order_acquire), std::string(fenced_words));
    return pinned;
  }
  pinned.lock_ = std::shared_lock(db_mutex_);
  if (!ready() || !db_) {
    pinned.lock_ = {};
  }
  return pinned;
}

error store::unavailable() const {
  return make_error(errc::storage_error,
                    "storage unavailable: " + health().fault +
                        "; nothing was written, retry later");
}

void store::recover_loop() {
  auto& health = *health_;
  std::unique_lock lock(health.mutex);
  std::int64_t backoff_ms = options_.reopen_backoff_ms_min;
  while (!health.stopping) {
    const bool ready_now = health.ready.load(std::memory_order_acquire);
    if (ready_now != health.announced_ready) {
      // One log line and one listener call per change of readiness.
      health.announced_ready = ready_now;
      const std::string fault = health.fault;
      const std::int64_t took_ms = elapsed_ms(health.since);
      lock.unlock();
      if (fault == fenced_words) {
        // Not a fault of the disk: the cluster's membership says why.
      } else if (ready_now) {
        std::fprintf(stderr,
                     "durin: storage ready again after %lld ms (the database "
                     "was reopened)\n",
                     static_cast<long long>(took_ms));
      } else {
        std::fprintf(stderr,
                     "durin: storage not ready: %s; reads and writes are "
                     "refused until the database reopens\n",
                     fault.c_str());
      }
      {
        std::lock_guard calling(health.listener_mutex);
        if (health.listener) {
          health.listener(this->health());
        }
      }
      lock.lock();
      backoff_ms = options_.reopen_backoff_ms_min;
      continue;
    }
    if (ready_now) {
      health.wake.wait(lock, [&] {
        return health.stopping || !health.ready.load(std::memory_order_acquire);
      });
      continue;
    }
    health.wake.wait_for(lock, std::chrono::milliseconds(backoff_ms),
                         [&] { return health.stopping || health.poked; });
    if (health.stopping) {
      break;
    }
    if (health.poked) {
      health.poked = false;
      backoff_ms = options_.reopen_backoff_ms_min;
    }
    lock.unlock();
    auto reopened = guarded("reopen", [this] { return reopen(); });
    lock.lock();
    if (!reopened) {
      health.fault = reopened.error().message;
      backoff_ms = std::min(backoff_ms * 2, options_.reopen_backoff_ms_max);
    }
  }
}

status store::check_free_space() const {
  // A store that failed reopens only with room for a memtable's flush and a
  // new log: on a disk just short of full the reopen and its probe would
  // succeed, the next real write fail, and readiness flap with every write.
  std::error_code failed;
  const auto space = std::filesystem::space(dir_, failed);
  if (failed || space.available >= options_.reopen_free_bytes_min) {
    return {};  // unknown: the open and the probe write decide
  }
  constexpr std::uint64_t mib = 1u << 20;
  return make_error(
      errc::storage_error,
      "the disk is full (" + std::to_string(space.available / mib) +
          " MiB free; the store reopens once " +
          std::to_string(options_.reopen_free_bytes_min / mib) + " MiB are)");
}

status store::reopen() {
  std::unique_lock exclusive(db_mutex_);
  if (options_.fence && !options_.fence->open()) {
    // Left closed, another node may own the shard's data now; or left
    // open for the primary's writes when this node keeps a backup.
    if (!following()) {
      close_database();
    }
    return make_error(errc::storage_error, std::string(fenced_words));
  }
  close_database();
  following_.store(false, std::memory_order_release);
  if (opened_before_ &&
      !std::filesystem::exists(std::filesystem::path(dir_) / "CURRENT")) {
    return make_error(errc::storage_error,
                      "the database's files are gone (deleted while the "
                      "node ran); it is not made afresh, which would forget "
                      "every run: restore the files, or start the node on "
                      "a new data directory");
  }
  if (const auto opened = open_database(); !opened.ok()) {
    close_database();
    return storage_failure("reopen", opened);
  }
  if (auto checked = check_schema(); !checked) {
    close_database();
    return checked;
  }
  std::string now;
  keys::put_u64(now,
                static_cast<std::uint64_t>(
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count()));
  if (const auto probed = write_meta(probe_name, now); !probed.ok()) {
    // Left open: the next attempt closes it first.
    return storage_failure("reopen: probe write", probed);
  }
  // Measured after the probe: its log's preallocation is taken by then.
  if (auto room = check_free_space(); !room) {
    close_database();
    return room;
  }
  auto& health = *health_;
  {
    std::lock_guard lock(health.mutex);
    health.ready.store(true, std::memory_order_release);
    health.fault.clear();
    health.reopens += 1;
    if (options_.fence) {
      options_.fence->set_ready(true);
    }
  }
  health.wake.notify_all();
  return {};
}
}  // namespace durin::persistence
