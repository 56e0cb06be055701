// What the store's own files (store*.cpp, tokens.cpp) share, and nothing
// else includes: family names, how errors name a record, the exception
// guard that keeps every failure a value, small RocksDB helpers, and the
// store's readiness state with the listener that feeds it. The store's
// contract is in store.hpp.
#pragma once

#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "durin/error.hpp"
#include "persistence/store.hpp"

namespace durin::persistence {

namespace store_detail {

// Indexed by `family`; the names are on disk and never change.
inline constexpr std::array<const char*, family_count> family_names = {
    "runs",  "history",  "timers",  "active",   "meta",      "tokens",
    "inbox", "requests", "tenants", "api_keys", "schedules", "search"};
const char* name_of(family which);

// `text` quoted for an error message: printable ASCII as is, other bytes as
// \xHH, cut at 128 bytes, because ids in corrupt keys are arbitrary.
std::string printable(std::string_view text);

// "history: run 'run_1' event 3: checksum mismatch"
error corrupt(family which, std::string_view subject,
              const std::string& problem);

// Runs `body`, turning any exception (RocksDB is built without them, but
// allocation and the standard library may throw) into storage-error, so that
// none escapes persistence.
template <class Body>
auto guarded(std::string_view what, Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::exception& failure) {
    return make_error(errc::storage_error,
                      std::string(what) + ": " + failure.what());
  } catch (...) {
    return make_error(errc::storage_error,
                      std::string(what) + ": unknown exception");
  }
}

// Meta values of a shard in a cluster: its epoch and log position (u64
// each), written by the committer with every group write.
inline constexpr std::string_view epoch_name = "shard_epoch";
inline constexpr std::string_view position_name = "log_position";
// Written by each store's reopen to probe its disk: local, never
// replicated.
inline constexpr std::string_view probe_name = "storage_probe";
// Why a store whose fence is closed takes nothing.
inline constexpr std::string_view fenced_words =
    "this node does not hold the shard's lease";

// Options of a durable write: sync = true.
rocksdb::WriteOptions sync_write();

// The smallest key greater than every key starting with `prefix`; empty when
// there is none (the prefix is all 0xFF).
std::string prefix_successor(std::string prefix);

inline bool starts_with(const rocksdb::Slice& key, std::string_view prefix) {
  return key.size() >= prefix.size() &&
         std::string_view(key.data(), prefix.size()) == prefix;
}

inline std::string_view view(const rocksdb::Slice& slice) {
  return {slice.data(), slice.size()};
}

}  // namespace store_detail

// What a list asks of scan_runs, shared by its two paths (store_reads.cpp
// scans, search_index.cpp reads the index) so that both list by one rule.
struct store::run_list_request {
  std::string_view before_id;
  std::optional<run_status> status;
  std::optional<std::string> flow;
  std::size_t max = 1;
  std::size_t scan_max = 1;
  std::optional<std::string> tenant;
  std::size_t bytes_max = SIZE_MAX;
  std::optional<std::string> schedule_id;
  const run_query* query = nullptr;

  // Whether a readable record of the right id belongs in the list.
  bool admits(const run_record& record) const {
    return (!status || record.status == *status) &&
           (!flow || record.flow == *flow) &&
           (!tenant || record.tenant == *tenant) &&
           (!schedule_id || record.schedule_id == *schedule_id) &&
           (query == nullptr || matches(*query, record));
  }
  // Whether a page with `scan` so far, `bytes` of them, ends here.
  bool ends(const run_scan& scan, std::size_t bytes) const {
    return scan.runs.size() >= max || scan.records_read >= scan_max ||
           bytes >= bytes_max;
  }
};

// Readiness, and the recovery thread that restores it. `mutex` orders
// changes of readiness; `ready` is read without it by every operation.
struct store::health_state {
  std::mutex mutex;
  std::condition_variable wake;
  std::atomic<bool> ready{true};
  std::string fault;
  std::uint64_t faults = 0;
  std::uint64_t reopens = 0;
  std::chrono::steady_clock::time_point since;
  bool announced_ready = true;  // what the log and the listener last said
  bool stopping = false;
  bool poked = false;  // the fence was granted: reopen now, not after backoff
  std::mutex listener_mutex;  // held while the listener runs
  health_listener listener;
  std::thread thread;
};
// What runs_by_status keeps. `mutex` orders writes against the first
// count, so the counts see each write exactly once.
struct store::run_watch {
  std::mutex mutex;
  // Set once counted; the counts are then read without the lock (a scrape
  // must not wait for an fsync), and written under it.
  std::atomic<bool> counting{false};
  std::array<std::atomic<std::uint64_t>, 9> counts{};
  // Status of every unfinished run, to know which count a write moves from.
  std::unordered_map<std::string, run_status> open_runs;
};

// Tells the store of every background error of one database generation and
// turns RocksDB's own recovery off (see db_options). Defined in
// store_faults.cpp.
class store::fault_listener final : public rocksdb::EventListener {
 public:
  fault_listener(store& owner, std::uint64_t generation)
      : owner_(owner), generation_(generation) {}

  void OnBackgroundError(rocksdb::BackgroundErrorReason reason,
                         rocksdb::Status* error) override;
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason, rocksdb::Status,
                            bool* auto_recovery) override;

 private:
  store& owner_;
  std::uint64_t generation_;
};

}  // namespace durin::persistence
