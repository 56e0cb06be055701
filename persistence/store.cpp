// The RocksDB store: opening, options, reads, and write batches.
#include "persistence/store.hpp"

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/iterator.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <rocksdb/write_buffer_manager.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "persistence/assert.hpp"
#include "persistence/codec.hpp"
#include "persistence/keys.hpp"
#include "persistence/storage_error.hpp"

namespace durin::persistence {

namespace {

// Indexed by `family`; the names are on disk and never change.
constexpr std::array<const char*, family_count> family_names = {
    "runs",   "history", "timers",   "active",  "meta",
    "tokens", "inbox",   "requests", "tenants", "api_keys"};

constexpr std::string_view schema_version_name = "schema_version";
// Written (synced) by every reopen: the proof that writes work again.
constexpr std::string_view probe_name = "storage_probe";

// Shared by every family: run records and recent history are the hot set,
// small next to the node's memory.
constexpr std::size_t block_cache_bytes = 32u << 20;
// Per family memtable; small records, so 8 MiB holds many thousands.
constexpr std::size_t write_buffer_bytes = 8u << 20;
// Cap on all memtables together, so five families cannot hold 5 x 64 MiB.
constexpr std::size_t db_write_buffer_bytes = 48u << 20;
// Bits per key of the bloom filters (~1% false positives).
constexpr double bloom_bits_per_key = 10.0;
// Share of a memtable spent on its whole-key bloom filter.
constexpr double memtable_bloom_ratio = 0.02;
// Messages quote at most this much of an id read from disk.
constexpr std::size_t printable_bytes_max = 128;

const char* name_of(family which) {
  return family_names[static_cast<std::size_t>(which)];
}

// `text` quoted for an error message: printable ASCII as is, other bytes as
// \xHH, cut at printable_bytes_max, because ids in corrupt keys are arbitrary.
std::string printable(std::string_view text) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out = "'";
  for (std::size_t i = 0; i < text.size() && i < printable_bytes_max; ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte >= 0x20 && byte < 0x7F && byte != '\\' && byte != '\'') {
      out.push_back(static_cast<char>(byte));
    } else {
      out += "\\x";
      out.push_back(hex[byte >> 4]);
      out.push_back(hex[byte & 0xF]);
    }
  }
  if (text.size() > printable_bytes_max) {
    out += "...";
  }
  out += "'";
  return out;
}

// "history: run 'run_1' event 3: checksum mismatch"
error corrupt(family which, std::string_view subject,
              const std::string& problem) {
  return make_error(errc::corrupt_record, std::string(name_of(which)) + ": " +
                                              std::string(subject) + ": " +
                                              problem);
}

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

rocksdb::WriteOptions sync_write() {
  rocksdb::WriteOptions options;
  // Durability is the product: nothing is answered before the fsync.
  options.sync = true;
  return options;
}

rocksdb::DBOptions db_options() {
  rocksdb::DBOptions options;
  // Storage faults are recovered by reopening the database (store.hpp), never
  // in process: RocksDB 7.8's Resume can sync a WAL file that already failed,
  // which trips its `sync_without_flush_called_` assertion (an abort in
  // builds that keep assertions, as Debian's does). No automatic resume.
  options.max_bgerror_resume_count = 0;
  // Every write is in the synced WAL: a close needs no flush, and a close
  // after a fault must not start one (the next open replays the WAL).
  options.avoid_flush_during_shutdown = true;
  options.create_if_missing = true;
  options.create_missing_column_families = true;
  // Two cores: one flush and one compaction thread at most.
  options.IncreaseParallelism(2);
  options.max_background_jobs = 2;
  options.db_write_buffer_size = db_write_buffer_bytes;
  // Spread SST writeback instead of one burst at file close.
  options.bytes_per_sync = 1u << 20;
  // The info log is durin's own (info_log above): one LOG file of at most
  // 16 MiB, restarted when full.
  return options;
}

rocksdb::ColumnFamilyOptions family_options(
    family which, const std::shared_ptr<rocksdb::Cache>& cache) {
  rocksdb::ColumnFamilyOptions options;
  options.write_buffer_size = write_buffer_bytes;
  // Keeps space amplification bounded as the data grows, with no tuning.
  options.level_compaction_dynamic_level_bytes = true;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = cache;
  if (which == family::runs || which == family::tokens) {
    // get_run and get_token are point lookups by the whole key, and a start
    // with a new token looks up one that is not there: bloom filters, in the
    // memtable too, answer most misses without a search. history is read by
    // prefix (seek + upper bound) and the other families by scans, where a
    // whole-key filter is never consulted, so they carry none.
    table.filter_policy.reset(
        rocksdb::NewBloomFilterPolicy(bloom_bits_per_key));
    options.memtable_whole_key_filtering = true;
    options.memtable_prefix_bloom_size_ratio = memtable_bloom_ratio;
  }
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return options;
}

// The smallest key greater than every key starting with `prefix`; empty when
// there is none (the prefix is all 0xFF).
std::string prefix_successor(std::string prefix) {
  while (!prefix.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(prefix.back());
    if (last != 0xFF) {
      ++last;
      return prefix;
    }
    prefix.pop_back();
  }
  return prefix;
}

bool starts_with(const rocksdb::Slice& key, std::string_view prefix) {
  return key.size() >= prefix.size() &&
         std::string_view(key.data(), prefix.size()) == prefix;
}

std::string_view view(const rocksdb::Slice& slice) {
  return {slice.data(), slice.size()};
}

}  // namespace

// ---- the info log -----------------------------------------------------------

namespace {

// RocksDB's info log (`LOG` in the data directory), written with stdio and
// every error ignored. RocksDB 7.8's own file logger writes through a
// WritableFileWriter that asserts (`sync_without_flush_called_`) when it is
// written again after a failed write: on a full disk the error handler's
// second log line aborted the process (issue 12). One file, restarted when it
// passes info_log_bytes_max.
class info_log final : public rocksdb::Logger {
 public:
  explicit info_log(std::string path)
      : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL),
        path_(std::move(path)),
        file_(std::fopen(path_.c_str(), "a")) {}
  ~info_log() override {
    if (file_ != nullptr) {
      std::fclose(file_);
    }
  }

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list arguments) override {
    std::lock_guard lock(mutex_);
    if (file_ == nullptr) {
      return;
    }
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    (void)std::fprintf(
        file_, "%lld ",
        static_cast<long long>(
            std::chrono::duration_cast<std::chrono::milliseconds>(now)
                .count()));
    (void)std::vfprintf(file_, format, arguments);
    (void)std::fputc('\n', file_);
    (void)std::fflush(file_);
    if (std::ftell(file_) > info_log_bytes_max) {
      file_ = std::freopen(path_.c_str(), "w", file_);
    }
  }

 private:
  static constexpr long info_log_bytes_max = 16L << 20;
  std::mutex mutex_;
  std::string path_;
  std::FILE* file_;
};

}  // namespace

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
    return "the data directory is in use by another open";
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
  std::mutex listener_mutex;  // held while the listener runs
  health_listener listener;
  std::thread thread;
};

// Tells the store of every background error of one database generation and
// turns RocksDB's own recovery off (see db_options).
class store::fault_listener final : public rocksdb::EventListener {
 public:
  fault_listener(store& owner, std::uint64_t generation)
      : owner_(owner), generation_(generation) {}

  void OnBackgroundError(rocksdb::BackgroundErrorReason reason,
                         rocksdb::Status* error) override {
    if (error != nullptr && !error->ok()) {
      owner_.report_fault(
          generation_, plain_words(*error) + " (" + reason_words(reason) + ")");
    }
  }

  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason, rocksdb::Status,
                            bool* auto_recovery) override {
    *auto_recovery = false;
  }

 private:
  store& owner_;
  std::uint64_t generation_;
};

void store::report_fault(std::uint64_t generation, const std::string& fault) {
  auto& health = *health_;
  {
    std::lock_guard lock(health.mutex);
    if (generation != generation_.load(std::memory_order_acquire)) {
      return;  // a database already closed
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

store::pin store::hold() const {
  pin pinned;
  if (!ready()) {
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
      if (ready_now) {
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
                         [&] { return health.stopping; });
    if (health.stopping) {
      break;
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

status store::reopen() {
  std::unique_lock exclusive(db_mutex_);
  close_database();
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
  auto& health = *health_;
  {
    std::lock_guard lock(health.mutex);
    health.ready.store(true, std::memory_order_release);
    health.fault.clear();
    health.reopens += 1;
  }
  health.wake.notify_all();
  return {};
}

// ---- opening ----------------------------------------------------------------

result<std::unique_ptr<store>> store::open(const std::string& dir,
                                           store_options options) {
  return guarded("open", [&]() -> result<std::unique_ptr<store>> {
    std::error_code failure;
    std::filesystem::create_directories(dir, failure);
    if (failure) {
      return make_error(
          errc::storage_error,
          "cannot create the data directory: " + failure.message());
    }
    std::unique_ptr<store> opened(new store());
    opened->options_ = std::move(options);
    opened->watch_ = std::make_unique<run_watch>();
    opened->health_ = std::make_shared<health_state>();
    opened->dir_ = dir;
    opened->cache_ = opened->options_.block_cache
                         ? opened->options_.block_cache
                         : rocksdb::NewLRUCache(block_cache_bytes);
    opened->info_log_ = std::make_shared<info_log>(dir + "/LOG");
    if (opened->options_.file_system) {
      opened->env_ = std::shared_ptr<rocksdb::Env>(
          rocksdb::NewCompositeEnv(opened->options_.file_system));
    }
    auto& health = *opened->health_;
    const rocksdb::Status first = opened->open_database();
    if (first.ok()) {
      if (auto checked = opened->check_schema(); !checked) {
        if (checked.error().code != errc::storage_error) {
          return checked.error();
        }
        // The schema is readable but could not be written or read: a
        // storage fault. Not ready; the recovery thread takes over.
        health.ready.store(false, std::memory_order_release);
        health.fault = checked.error().message;
      }
    } else if (transient_fault(first)) {
      health.ready.store(false, std::memory_order_release);
      health.fault = plain_words(first) + " (the database could not be opened)";
    } else {
      return storage_failure("open the data directory", first);
    }
    if (!health.ready.load(std::memory_order_acquire)) {
      health.faults = 1;
      health.since = std::chrono::steady_clock::now();
    }
    store* self = opened.get();
    health.thread = std::thread([self] { self->recover_loop(); });
    return opened;
  });
}

rocksdb::Status store::open_database() {
  rocksdb::DBOptions options = db_options();
  options.info_log = info_log_;
  if (options_.write_buffers) {
    // One budget for every shard's memtables (db_write_buffer_size is per
    // database); a manifest preallocated per shard stays small.
    options.write_buffer_manager = options_.write_buffers;
    options.manifest_preallocation_size = 256u << 10;
  }
  if (env_) {
    options.env = static_cast<rocksdb::Env*>(env_.get());
  }
  const std::uint64_t generation =
      generation_.fetch_add(1, std::memory_order_acq_rel) + 1;
  options.listeners.push_back(
      std::make_shared<fault_listener>(*this, generation));

  // Families already on disk: RocksDB refuses to open a database without
  // naming all of them. A missing database lists nothing, which is fine.
  std::vector<std::string> existing;
  (void)rocksdb::DB::ListColumnFamilies(options, dir_, &existing);

  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName,
                           rocksdb::ColumnFamilyOptions());
  for (std::size_t index = 0; index < family_count; ++index) {
    descriptors.emplace_back(
        family_names[index],
        family_options(static_cast<family>(index), cache_));
  }
  for (const auto& name : existing) {
    const bool known = name == rocksdb::kDefaultColumnFamilyName ||
                       std::find(family_names.begin(), family_names.end(),
                                 name) != family_names.end();
    if (!known) {
      descriptors.emplace_back(name, rocksdb::ColumnFamilyOptions());
    }
  }

  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status opened =
      rocksdb::DB::Open(options, dir_, descriptors, &handles, &raw);
  if (!opened.ok()) {
    return opened;
  }
  db_.reset(raw);
  default_handle_ = handles[0];
  handles_.assign(handles.begin() + 1, handles.begin() + 1 + family_count);
  other_handles_.assign(handles.begin() + 1 + family_count, handles.end());
  // Batches carry family ids, not handles: one built before a reopen is
  // written after it only if every id is the same (it always is: ids are in
  // the manifest).
  std::vector<std::uint32_t> ids;
  for (auto* known : handles_) {
    ids.push_back(known->GetID());
  }
  if (family_ids_.empty()) {
    family_ids_ = ids;
  } else if (ids != family_ids_) {
    close_database();
    return rocksdb::Status::Corruption("column family ids changed");
  }
  return rocksdb::Status::OK();
}

void store::close_database() {
  if (!db_) {
    return;
  }
  // Handles go before the database; Close() flushes nothing we need (every
  // write is already in the synced WAL), so its status is only advisory.
  for (auto* handle : handles_) {
    db_->DestroyColumnFamilyHandle(handle);
  }
  for (auto* handle : other_handles_) {
    db_->DestroyColumnFamilyHandle(handle);
  }
  db_->DestroyColumnFamilyHandle(default_handle_);
  handles_.clear();
  other_handles_.clear();
  default_handle_ = nullptr;
  (void)db_->Close();
  db_.reset();
}

status store::check_schema() {
  auto stored = read_meta(schema_version_name);
  if (!stored) {
    return stored.error();
  }
  if (!stored->has_value()) {
    // First open: no run can have been written without a version.
    std::string value;
    keys::put_u32(value, schema_version);
    if (const auto written = write_meta(schema_version_name, value);
        !written.ok()) {
      return storage_failure("meta: write the schema version", written);
    }
    return {};
  }
  const std::string& value = **stored;
  if (value.size() != 4) {
    return corrupt(
        family::meta, printable(schema_version_name),
        "value of " + std::to_string(value.size()) + " bytes, expected a u32");
  }
  const std::uint32_t found = keys::get_u32(value.data());
  if (found != schema_version) {
    return make_error(errc::invalid_argument,
                      "the database in the data directory has schema version " +
                          std::to_string(found) + "; this build reads " +
                          std::to_string(schema_version));
  }
  return {};
}

// What runs_by_status keeps. `mutex` orders writes against the first
// count, so the counts see each write exactly once.
struct store::run_watch {
  std::mutex mutex;
  // Set once counted; the counts are then read without the lock (a scrape
  // must not wait for an fsync), and written under it.
  std::atomic<bool> counting{false};
  std::array<std::atomic<std::uint64_t>, 8> counts{};
  // Status of every unfinished run, to know which count a write moves from.
  std::unordered_map<std::string, run_status> open_runs;
};

namespace {

// The id and status of an encoded run record, read without decoding the
// rest (layout: persistence/README.md; the record was just encoded by
// write_batch::put_run). nullopt for anything malformed.
std::optional<std::pair<std::string_view, run_status>> peek_run(
    std::string_view value) {
  std::size_t at = 1;  // the format version
  auto take_string = [&](std::string_view& out) {
    if (value.size() < at + 4) {
      return false;
    }
    std::size_t length = keys::get_u32(value.data() + at);
    at += 4;
    if (value.size() < at + length) {
      return false;
    }
    out = value.substr(at, length);
    at += length;
    return true;
  };
  std::string_view id;
  std::string_view flow;
  if (!take_string(id) || !take_string(flow) || value.size() <= at) {
    return std::nullopt;
  }
  auto status = static_cast<std::uint8_t>(value[at]);
  if (status < static_cast<std::uint8_t>(run_status::pending) ||
      status > static_cast<std::uint8_t>(run_status::cancelled)) {
    return std::nullopt;
  }
  return std::make_pair(id, static_cast<run_status>(status));
}

// Calls `seen` for every run record a batch puts.
class run_puts : public rocksdb::WriteBatch::Handler {
 public:
  run_puts(std::uint32_t runs_family,
           std::function<void(std::string_view, run_status)> seen)
      : runs_family_(runs_family), seen_(std::move(seen)) {}

  rocksdb::Status PutCF(std::uint32_t family_id, const rocksdb::Slice&,
                        const rocksdb::Slice& value) override {
    if (family_id == runs_family_) {
      if (auto run = peek_run(value.ToStringView())) {
        seen_(run->first, run->second);
      }
    }
    return rocksdb::Status::OK();
  }
  // The defaults refuse deletes in named families, which would end the walk.
  rocksdb::Status DeleteCF(std::uint32_t, const rocksdb::Slice&) override {
    return rocksdb::Status::OK();
  }
  rocksdb::Status SingleDeleteCF(std::uint32_t,
                                 const rocksdb::Slice&) override {
    return rocksdb::Status::OK();
  }
  rocksdb::Status DeleteRangeCF(std::uint32_t, const rocksdb::Slice&,
                                const rocksdb::Slice&) override {
    return rocksdb::Status::OK();
  }

 private:
  std::uint32_t runs_family_;
  std::function<void(std::string_view, run_status)> seen_;
};

// durin::is_terminal lives in the actors library, which this one does not
// link.
bool ended(run_status status) {
  return status == run_status::completed || status == run_status::failed ||
         status == run_status::cancelled;
}

template <typename Counts>
void count_change(Counts& counts,
                  std::unordered_map<std::string, run_status>& open_runs,
                  std::string_view run_id, run_status status) {
  auto found = open_runs.find(std::string(run_id));
  if (found != open_runs.end()) {
    counts[static_cast<std::size_t>(found->second)] -= 1;
    if (ended(status)) {
      open_runs.erase(found);
    } else {
      found->second = status;
    }
  } else if (!ended(status)) {
    open_runs.emplace(std::string(run_id), status);
  }
  counts[static_cast<std::size_t>(status)] += 1;
}

}  // namespace

result<store::status_counts> store::runs_by_status() {
  auto read = [this] {
    status_counts out{};
    for (std::size_t index = 0; index < out.size(); ++index) {
      out[index] = watch_->counts[index].load(std::memory_order_relaxed);
    }
    return out;
  };
  if (watch_->counting.load(std::memory_order_acquire)) {
    return read();
  }
  // The pin before the watch's lock, in the order write() takes them.
  auto pinned = hold();
  if (!pinned) {
    return unavailable();
  }
  std::lock_guard lock(watch_->mutex);
  if (watch_->counting.load(std::memory_order_acquire)) {
    return read();
  }
  return guarded("count runs", [&]() -> result<status_counts> {
    status_counts counts{};
    std::unordered_map<std::string, run_status> open_runs;
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions(), handle(family::runs)));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      // A record that does not decode is not counted (get_run reports it).
      if (auto run = peek_run(view(it->value()))) {
        count_change(counts, open_runs, run->first, run->second);
      }
    }
    if (!it->status().ok()) {
      return storage_failure("count runs", it->status());
    }
    for (std::size_t index = 0; index < counts.size(); ++index) {
      watch_->counts[index].store(counts[index], std::memory_order_relaxed);
    }
    watch_->open_runs = std::move(open_runs);
    watch_->counting.store(true, std::memory_order_release);
    return counts;
  });
}

void store::observe_runs(const write_batch& batch) {
  auto& watch = *watch_;
  if (!watch.counting) {
    return;
  }
  run_puts puts(handle(family::runs)->GetID(),
                [&watch](std::string_view run_id, run_status status) {
                  count_change(watch.counts, watch.open_runs, run_id, status);
                });
  (void)batch.batch_->Iterate(&puts);
}

result<std::optional<std::string>> store::get_webhook_tenant(
    std::string_view token) const {
  using answer = result<std::optional<std::string>>;
  if (!keys::fits(token)) {
    return std::optional<std::string>();
  }
  return guarded("get webhook", [&]() -> answer {
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    rocksdb::PinnableSlice value;
    const rocksdb::Status read =
        db_->Get(rocksdb::ReadOptions(), handle(family::tokens),
                 keys::token("", token), &value);
    if (read.IsNotFound()) {
      return std::optional<std::string>();
    }
    if (!read.ok()) {
      return storage_failure("webhook index: read", read);
    }
    auto tenant = codec::decode_bytes(view(value));
    if (!tenant) {
      return corrupt(family::tokens, "webhook " + printable(token),
                     tenant.error().message);
    }
    return std::optional<std::string>(std::move(*tenant));
  });
}

void write_batch::put_webhook_tenant(std::string_view token,
                                     std::string_view tenant) {
  if (!keys::fits(token) || tenant.empty()) {
    refuse("webhook token too long for a key, or no tenant");
    return;
  }
  const auto put = put_to(family::tokens, keys::token("", token),
                          codec::encode_bytes(tenant));
  if (!put.ok()) {
    refuse("webhook index: " + put.ToString());
  }
}

void write_batch::delete_webhook_tenant(std::string_view token) {
  if (!keys::fits(token)) {
    refuse("webhook token too long for a key");
    return;
  }
  const auto deleted = delete_from(family::tokens, keys::token("", token));
  if (!deleted.ok()) {
    refuse("webhook index: " + deleted.ToString());
  }
}

store::~store() {
  if (health_) {
    {
      std::lock_guard lock(health_->mutex);
      health_->stopping = true;
    }
    health_->wake.notify_all();
    if (health_->thread.joinable()) {
      health_->thread.join();
    }
  }
  std::unique_lock exclusive(db_mutex_);
  close_database();
}

rocksdb::ColumnFamilyHandle* store::handle(family which) const {
  return handles_[static_cast<std::size_t>(which)];
}

// ---- reads ------------------------------------------------------------------

result<std::optional<run_record>> store::get_run(
    std::string_view run_id) const {
  using answer = result<std::optional<run_record>>;
  return guarded("get run", [&]() -> answer {
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    if (!keys::fits(run_id)) {
      return std::optional<run_record>();  // no key can name it
    }
    rocksdb::PinnableSlice value;
    const rocksdb::Status read =
        db_->Get(rocksdb::ReadOptions(), handle(family::runs),
                 keys::run(run_id), &value);
    if (read.IsNotFound()) {
      return std::optional<run_record>();
    }
    const std::string subject = "run " + printable(run_id);
    if (!read.ok()) {
      return storage_failure("runs: read " + subject, read);
    }
    auto decoded = codec::decode_run(view(value));
    if (!decoded) {
      return corrupt(family::runs, subject, decoded.error().message);
    }
    if (decoded->id != run_id) {
      return corrupt(family::runs, subject,
                     "value names run " + printable(decoded->id));
    }
    return std::optional<run_record>(std::move(*decoded));
  });
}

result<std::vector<event_record>> store::load_history(
    std::string_view run_id) const {
  using answer = result<std::vector<event_record>>;
  return guarded("load history", [&]() -> answer {
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    std::vector<event_record> events;
    if (!keys::fits(run_id)) {
      return events;
    }
    const std::string subject = "run " + printable(run_id);
    const std::string prefix = keys::history_prefix(run_id);
    const std::string upper = prefix_successor(prefix);
    const rocksdb::Slice upper_slice(upper);
    rocksdb::ReadOptions options;
    if (!upper.empty()) {
      options.iterate_upper_bound = &upper_slice;
    }
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(options, handle(family::history)));
    for (it->Seek(prefix); it->Valid() && starts_with(it->key(), prefix);
         it->Next()) {
      auto key = keys::decode_history(view(it->key()));
      if (!key || key->run_id != run_id) {
        return corrupt(family::history, subject, "malformed key");
      }
      const std::uint64_t expected = events.size() + 1;
      if (key->sequence != expected) {
        return corrupt(family::history, subject,
                       "sequence " + std::to_string(key->sequence) + " where " +
                           std::to_string(expected) +
                           " was expected (a gap in the history)");
      }
      auto event = codec::decode_event(view(it->value()));
      if (!event) {
        return corrupt(family::history,
                       subject + " event " + std::to_string(expected),
                       event.error().message);
      }
      events.push_back(std::move(*event));
    }
    if (!it->status().ok()) {
      return storage_failure("history: read " + subject, it->status());
    }
    return events;
  });
}

result<std::vector<std::string>> store::active_runs() const {
  using answer = result<std::vector<std::string>>;
  return guarded("active runs", [&]() -> answer {
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    std::vector<std::string> ids;
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions(), handle(family::active)));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      auto id = keys::decode_active(view(it->key()));
      if (!id) {
        return corrupt(family::active, "key " + printable(view(it->key())),
                       "malformed key");
      }
      if (auto marker = codec::decode_marker(view(it->value())); !marker) {
        return corrupt(family::active, "run " + printable(*id),
                       marker.error().message);
      }
      ids.push_back(std::move(*id));
    }
    if (!it->status().ok()) {
      return storage_failure("active: read", it->status());
    }
    return ids;
  });
}

result<std::vector<timer_record>> store::timers_until(
    std::int64_t until_ms, std::size_t max, std::string_view after_key) const {
  using answer = result<std::vector<timer_record>>;
  return guarded("timers until", [&]() -> answer {
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    std::vector<timer_record> timers;
    if (max == 0 || until_ms < 0) {
      return timers;
    }
    const std::string upper = keys::timer_upper_bound(until_ms);
    const rocksdb::Slice upper_slice(upper);
    rocksdb::ReadOptions options;
    options.iterate_upper_bound = &upper_slice;
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(options, handle(family::timers)));
    if (after_key.empty()) {
      it->SeekToFirst();
    } else {
      it->Seek(rocksdb::Slice(after_key.data(), after_key.size()));
      if (it->Valid() && view(it->key()) == after_key) {
        it->Next();
      }
    }
    for (; it->Valid() && timers.size() < max; it->Next()) {
      auto timer = keys::decode_timer(view(it->key()));
      if (!timer) {
        return corrupt(family::timers, "key " + printable(view(it->key())),
                       "malformed key");
      }
      if (auto marker = codec::decode_marker(view(it->value())); !marker) {
        return corrupt(family::timers,
                       "run " + printable(timer->run_id) + " timer due " +
                           std::to_string(timer->due_ms),
                       marker.error().message);
      }
      timers.push_back(std::move(*timer));
    }
    if (!it->status().ok()) {
      return storage_failure("timers: read", it->status());
    }
    return timers;
  });
}

result<store::run_scan> store::scan_runs(std::string_view before_id,
                                         std::optional<run_status> status,
                                         std::optional<std::string> flow,
                                         std::size_t max, std::size_t scan_max,
                                         std::optional<std::string> tenant,
                                         std::size_t bytes_max) const {
  return guarded("scan runs", [&]() -> result<run_scan> {
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    if (max == 0 || scan_max == 0) {
      return make_error(errc::invalid_argument,
                        "scan_runs needs max and scan_max of at least 1");
    }
    if (!keys::fits(before_id)) {
      return make_error(errc::invalid_argument,
                        "cursor of " + std::to_string(before_id.size()) +
                            " bytes is not a run id");
    }
    run_scan scan;
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions(), handle(family::runs)));
    if (before_id.empty()) {
      it->SeekToLast();
    } else {
      // Strictly older: step past the cursor's own record if it exists.
      const std::string start = keys::run(before_id);
      it->SeekForPrev(start);
      if (it->Valid() && view(it->key()) == start) {
        it->Prev();
      }
    }
    std::size_t examined = 0;
    std::size_t bytes = 0;
    std::string last_examined;
    for (; it->Valid(); it->Prev()) {
      ++examined;
      const auto id = keys::decode_run(view(it->key()));
      // A malformed key (keys::run never writes one) cannot be a cursor; if
      // it is the last examined, the listing ends there.
      last_examined = id ? *id : std::string();
      auto decoded = id ? codec::decode_run(view(it->value()))
                        : result<run_record>(make_error(errc::corrupt_record,
                                                        "malformed key"));
      // Skipped, not fatal: one bad record must not hide every other run.
      const bool readable = decoded.ok() && decoded->id == *id;
      if (readable && (!status || decoded->status == *status) &&
          (!flow || decoded->flow == *flow) &&
          (!tenant || decoded->tenant == *tenant)) {
        scan.runs.push_back(std::move(*decoded));
        bytes += it->value().size();
      }
      if (scan.runs.size() >= max || examined >= scan_max ||
          bytes >= bytes_max) {
        it->Prev();
        break;
      }
    }
    if (!it->status().ok()) {
      return storage_failure("runs: scan", it->status());
    }
    // The iterator now sits on the next older record, if any: only then can
    // more remain.
    if (it->Valid()) {
      scan.next_before_id = last_examined;
    }
    return scan;
  });
}

// ---- writes -----------------------------------------------------------------

status store::write(write_batch& batch) {
  return guarded("write", [&]() -> status {
    if (batch.store_ != this || !batch.batch_) {
      return make_error(errc::internal,
                        "write_batch belongs to another store or was moved");
    }
    if (!batch.problem_.empty()) {
      return make_error(errc::invalid_argument,
                        "batch refused: " + batch.problem_);
    }
    if (batch.unavailable_) {
      return unavailable();  // built while not ready: nothing to write
    }
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    // Under the watch's lock, so a first count sees this write exactly
    // once (before or after it, never between).
    std::lock_guard lock(watch_->mutex);
    const rocksdb::Status written =
        db_->Write(sync_write(), batch.batch_.get());
    if (!written.ok()) {
      // Not ready from now on: nothing more is read or written until the
      // database reopens (store.hpp).
      report_fault(generation_.load(std::memory_order_acquire),
                   plain_words(written) + " (a write failed)");
      return storage_failure("write batch", written);
    }
    observe_runs(batch);
    return {};
  });
}

result<std::optional<std::string>> store::read_meta(
    std::string_view name) const {
  using answer = result<std::optional<std::string>>;
  return guarded("get meta", [&]() -> answer {
    rocksdb::PinnableSlice value;
    const rocksdb::Status read = db_->Get(
        rocksdb::ReadOptions(), handle(family::meta), keys::meta(name), &value);
    if (read.IsNotFound()) {
      return std::optional<std::string>();
    }
    if (!read.ok()) {
      return storage_failure("meta: read " + printable(name), read);
    }
    auto decoded = codec::decode_bytes(view(value));
    if (!decoded) {
      return corrupt(family::meta, "key " + printable(name),
                     decoded.error().message);
    }
    return std::optional<std::string>(std::move(*decoded));
  });
}

rocksdb::Status store::write_meta(std::string_view name,
                                  std::string_view value) {
  return db_->Put(sync_write(), handle(family::meta), keys::meta(name),
                  codec::encode_bytes(value));
}

result<std::optional<std::string>> store::get_meta(
    std::string_view name) const {
  auto pinned = hold();
  if (!pinned) {
    return unavailable();
  }
  return read_meta(name);
}

status store::put_meta(std::string_view name, std::string_view value) {
  return guarded("put meta", [&]() -> status {
    if (value.size() > codec::field_bytes_max) {
      return make_error(errc::invalid_argument,
                        "meta value of " + std::to_string(value.size()) +
                            " bytes is above the limit");
    }
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    const rocksdb::Status written = write_meta(name, value);
    if (!written.ok()) {
      report_fault(generation_.load(std::memory_order_acquire),
                   plain_words(written) + " (a write failed)");
      return storage_failure("meta: write " + printable(name), written);
    }
    return {};
  });
}

result<std::optional<std::string>> store::get_value(
    family which, std::string_view key) const {
  using answer = result<std::optional<std::string>>;
  return guarded("get value", [&]() -> answer {
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    std::string value;
    const rocksdb::Status read =
        db_->Get(rocksdb::ReadOptions(), handle(which),
                 rocksdb::Slice(key.data(), key.size()), &value);
    if (read.IsNotFound()) {
      return std::optional<std::string>();
    }
    if (!read.ok()) {
      return storage_failure(std::string(name_of(which)) + ": read", read);
    }
    return std::optional<std::string>(std::move(value));
  });
}

status store::scan_values(
    family which,
    const std::function<bool(std::string_view, std::string_view)>& visit)
    const {
  return guarded("scan", [&]() -> status {
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions(), handle(which)));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      if (!visit(view(it->key()), view(it->value()))) {
        break;
      }
    }
    if (!it->status().ok()) {
      return storage_failure(std::string(name_of(which)) + ": scan",
                             it->status());
    }
    return {};
  });
}

write_batch store::batch() {
  return write_batch(*this);
}

// ---- write_batch ------------------------------------------------------------

write_batch::write_batch(const store& owner)
    : store_(&owner), batch_(std::make_unique<rocksdb::WriteBatch>()) {}

write_batch::write_batch(write_batch&&) noexcept = default;
write_batch& write_batch::operator=(write_batch&&) noexcept = default;
write_batch::~write_batch() = default;

rocksdb::Status write_batch::put_to(family which, const rocksdb::Slice& key,
                                    const rocksdb::Slice& value) {
  auto pinned = store_->hold();
  if (!pinned) {
    unavailable_ = true;
    return rocksdb::Status::OK();
  }
  return batch_->Put(store_->handle(which), key, value);
}

rocksdb::Status write_batch::delete_from(family which,
                                         const rocksdb::Slice& key) {
  auto pinned = store_->hold();
  if (!pinned) {
    unavailable_ = true;
    return rocksdb::Status::OK();
  }
  return batch_->Delete(store_->handle(which), key);
}

rocksdb::Status write_batch::delete_range_from(family which,
                                               const rocksdb::Slice& begin,
                                               const rocksdb::Slice& end) {
  auto pinned = store_->hold();
  if (!pinned) {
    unavailable_ = true;
    return rocksdb::Status::OK();
  }
  return batch_->DeleteRange(store_->handle(which), begin, end);
}

void write_batch::put_value(family which, std::string_view key,
                            std::string_view value) {
  const auto put = put_to(which, rocksdb::Slice(key.data(), key.size()),
                          rocksdb::Slice(value.data(), value.size()));
  if (!put.ok()) {
    refuse(std::string(name_of(which)) + ": " + put.ToString());
  }
}

void write_batch::delete_key(family which, std::string_view key) {
  const auto deleted =
      delete_from(which, rocksdb::Slice(key.data(), key.size()));
  if (!deleted.ok()) {
    refuse(std::string(name_of(which)) + ": " + deleted.ToString());
  }
}

void write_batch::refuse(std::string problem) {
  if (problem_.empty()) {
    problem_ = std::move(problem);
  }
}

void write_batch::put_run(const run_record& record) {
  if (!keys::fits(record.id)) {
    refuse("run id of " + std::to_string(record.id.size()) +
           " bytes is too long for a key");
    return;
  }
  if (auto valid = codec::validate(record); !valid) {
    refuse("run " + printable(record.id) + ": " + valid.error().message);
    return;
  }
  const auto put =
      put_to(family::runs, keys::run(record.id), codec::encode(record));
  if (!put.ok()) {
    refuse("run " + printable(record.id) + ": " + put.ToString());
  }
}

void write_batch::put_event(std::string_view run_id, std::uint64_t sequence,
                            const event_record& event) {
  if (!keys::fits(run_id)) {
    refuse("run id of " + std::to_string(run_id.size()) +
           " bytes is too long for a key");
    return;
  }
  const std::string subject =
      "run " + printable(run_id) + " event " + std::to_string(sequence);
  if (sequence == 0) {
    // History starts at 1; a 0 would read back as a gap.
    refuse(subject + ": sequences start at 1");
    return;
  }
  if (auto valid = codec::validate(event); !valid) {
    refuse(subject + ": " + valid.error().message);
    return;
  }
  const auto put = put_to(family::history, keys::history(run_id, sequence),
                          codec::encode(event));
  if (!put.ok()) {
    refuse(subject + ": " + put.ToString());
  }
}

namespace {

// Why `timer` cannot be a key, or empty.
std::string timer_problem(const timer_record& timer) {
  if (!keys::fits(timer.run_id)) {
    return "timer run id of " + std::to_string(timer.run_id.size()) +
           " bytes is too long for a key";
  }
  if (timer.kind < timer_kind::sleep ||
      timer.kind > timer_kind::token_retention) {
    return "timer of run " + printable(timer.run_id) + " has invalid kind " +
           std::to_string(static_cast<int>(timer.kind));
  }
  return {};
}

}  // namespace

void write_batch::put_timer(const timer_record& timer) {
  if (auto problem = timer_problem(timer); !problem.empty()) {
    refuse(std::move(problem));
    return;
  }
  const auto put =
      put_to(family::timers, keys::timer(timer), codec::encode_marker());
  if (!put.ok()) {
    refuse("timer of run " + printable(timer.run_id) + ": " + put.ToString());
  }
}

void write_batch::delete_timer(const timer_record& timer) {
  if (auto problem = timer_problem(timer); !problem.empty()) {
    refuse(std::move(problem));
    return;
  }
  const auto deleted = delete_from(family::timers, keys::timer(timer));
  if (!deleted.ok()) {
    refuse("timer of run " + printable(timer.run_id) + ": " +
           deleted.ToString());
  }
}

void write_batch::put_active(std::string_view run_id) {
  if (!keys::fits(run_id)) {
    refuse("run id of " + std::to_string(run_id.size()) +
           " bytes is too long for a key");
    return;
  }
  const auto put =
      put_to(family::active, keys::active(run_id), codec::encode_marker());
  if (!put.ok()) {
    refuse("active run " + printable(run_id) + ": " + put.ToString());
  }
}

void write_batch::delete_active(std::string_view run_id) {
  if (!keys::fits(run_id)) {
    refuse("run id of " + std::to_string(run_id.size()) +
           " bytes is too long for a key");
    return;
  }
  const auto deleted = delete_from(family::active, keys::active(run_id));
  if (!deleted.ok()) {
    refuse("active run " + printable(run_id) + ": " + deleted.ToString());
  }
}

std::size_t write_batch::count() const {
  return batch_ ? static_cast<std::size_t>(batch_->Count()) : 0;
}

std::size_t write_batch::size_bytes() const {
  return batch_ ? batch_->GetDataSize() : 0;
}

void share_memory(store_options& options) {
  options.block_cache = rocksdb::NewLRUCache(block_cache_bytes);
  options.write_buffers =
      std::make_shared<rocksdb::WriteBufferManager>(db_write_buffer_bytes);
}

}  // namespace durin::persistence
