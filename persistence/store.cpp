// The RocksDB store: its options, opening a database (schema check, the
// info log), the counts of runs by status, durable writes and `meta`
// values. Readiness and reopening after storage faults are in
// store_faults.cpp, reads of runs, history, timers and raw values in
// store_reads.cpp, write batches in store_batch.cpp, tokens and the webhook
// index in tokens.cpp.
#include "persistence/store.hpp"

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <rocksdb/write_buffer_manager.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "persistence/codec.hpp"
#include "persistence/keys.hpp"
#include "persistence/storage_error.hpp"
#include "persistence/store_internal.hpp"
#include "persistence/test_points.hpp"

namespace durin::persistence {

using namespace store_detail;

namespace {

constexpr std::string_view schema_version_name = "schema_version";

// Shared by every family: run records and recent history are the hot set,
// small next to the node's memory.
constexpr std::size_t block_cache_bytes = 32u << 20;
// Per family memtable; small records, so 8 MiB holds many thousands.
constexpr std::size_t write_buffer_bytes = 8u << 20;
// Cap on all memtables together, so five families cannot hold 5 x 64 MiB.
constexpr std::size_t db_write_buffer_bytes = 48u << 20;
// What a memtable takes from that cap at its first write, and in steps
// after (RocksDB's default is write_buffer_size / 8, 1 MiB): a node keeps a
// store for every shard of the cluster, each with a memtable per family it
// writes, and at 1 MiB each a few dozen nearly empty memtables filled the
// shared cap, so the write buffer manager flushed one after another.
constexpr std::size_t arena_block_bytes = 64u << 10;
// Bound on a store's live write-ahead logs (db_options).
constexpr std::size_t max_total_wal_bytes = 2 * write_buffer_bytes;
// The least share of a shared write buffer budget each store gets.
constexpr std::size_t store_write_buffer_floor_bytes = 2u << 20;
// Bits per key of the bloom filters (~1% false positives).
constexpr double bloom_bits_per_key = 10.0;
// Share of a memtable spent on its whole-key bloom filter.
constexpr double memtable_bloom_ratio = 0.02;
// Messages quote at most this much of an id read from disk.
constexpr std::size_t printable_bytes_max = 128;
}  // namespace

namespace store_detail {

const char* name_of(family which) {
  return family_names[static_cast<std::size_t>(which)];
}
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
error corrupt(family which, std::string_view subject,
              const std::string& problem) {
  return make_error(errc::corrupt_record, std::string(name_of(which)) + ": " +
                                              std::string(subject) + ": " +
                                              problem);
}

rocksdb::WriteOptions sync_write() {
  rocksdb::WriteOptions options;
  // Durability is the product: nothing is answered before the fsync.
  options.sync = true;
  return options;
}

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
}  // namespace store_detail

namespace {

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
  // A log is deleted only once every family with entries in it has flushed;
  // families written seldom (meta, tenants) would keep hundreds of MiB of
  // logs (RocksDB's default bound is 4 x all write buffers) that a full disk
  // then holds. Past this, the families holding the oldest log flush.
  options.max_total_wal_size = max_total_wal_bytes;
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
  options.arena_block_size = arena_block_bytes;
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
    store* self = opened.get();
    if (const auto& fence = opened->options_.fence) {
      fence->on_change([self] { self->fence_changed(); });
    }
    if (opened->options_.fence && !opened->options_.fence->open()) {
      // Not this node's shard now: opened once the fence is granted.
      health.ready.store(false, std::memory_order_release);
      health.fault = std::string(fenced_words);
      health.since = std::chrono::steady_clock::now();
      health.announced_ready = false;
      health.thread = std::thread([self] { self->recover_loop(); });
      return opened;
    }
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
    if (opened->options_.fence && health.ready.load()) {
      opened->options_.fence->set_ready(true);
    }
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
  opened_before_ = true;
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
    return ensure_search_index();
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
  if (auto loaded = load_log_position(); !loaded) {
    return loaded;
  }
  return ensure_search_index();
}

status store::load_log_position() {
  auto stored = read_meta(position_name);
  if (!stored) {
    return stored.error();
  }
  std::uint64_t position = 0;
  if (stored->has_value()) {
    if ((*stored)->size() != 8) {
      return corrupt(family::meta, printable(position_name),
                     "value of " + std::to_string((*stored)->size()) +
                         " bytes, expected a u64");
    }
    position = keys::get_u64((*stored)->data());
  }
  auto epoch_stored = read_meta(epoch_name);
  if (!epoch_stored) {
    return epoch_stored.error();
  }
  std::uint64_t epoch = 0;
  if (epoch_stored->has_value() && (*epoch_stored)->size() == 8) {
    epoch = keys::get_u64((*epoch_stored)->data());
  }
  advanced_to(position, epoch);
  return {};
}

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
      status > static_cast<std::uint8_t>(run_status::terminated) ||
      status == static_cast<std::uint8_t>(run_status::blocked)) {
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
         status == run_status::cancelled || status == run_status::terminated;
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

void store::forget_counts() {
  std::lock_guard lock(watch_->mutex);
  watch_->counting.store(false, std::memory_order_release);
  watch_->open_runs.clear();
  for (auto& count : watch_->counts) {
    count.store(0, std::memory_order_relaxed);
  }
}

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

store::~store() {
  if (options_.fence) {
    options_.fence->on_change(nullptr);
  }
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

// ---- writes -----------------------------------------------------------------

status store::write(write_batch& batch, bool sync) {
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
    // once (before or after it, never between), and the search index reads
    // the records this write replaces with no other write between.
    std::lock_guard lock(watch_->mutex);
    // The index's changes join the batch (search_index.cpp), and leave it
    // again when the write fails, so that a batch written again is indexed
    // against the records then stored.
    batch.batch_->SetSavePoint();
    entry_deltas deltas;
    if (const auto indexed = index_search_attributes(*batch.batch_, deltas);
        !indexed.ok()) {
      (void)batch.batch_->RollbackToSavePoint();
      if (indexed.IsNotSupported()) {
        return make_error(errc::invalid_argument,
                          "batch refused: " + indexed.ToString());
      }
      return storage_failure("write batch: search index", indexed);
    }
    rocksdb::WriteOptions options = sync_write();
    options.sync = sync;
    DURIN_TEST_SLOW_POINT("store.write");  // past the fence's check
    const rocksdb::Status written = db_->Write(options, batch.batch_.get());
    if (!written.ok()) {
      (void)batch.batch_->RollbackToSavePoint();
      // Not ready from now on: nothing more is read or written until the
      // database reopens (store.hpp).
      report_fault(generation_.load(std::memory_order_acquire),
                   plain_words(written) + " (a write failed)");
      return storage_failure("write batch", written);
    }
    (void)batch.batch_->PopSavePoint();
    count_entries(deltas);
    observe_runs(batch);
    return {};
  });
}

status store::sync_log() {
  return guarded("sync the log", [&]() -> status {
    // Not hold(): a write that landed is synced even if the fence closed
    // since, as its backups may have it already.
    std::shared_lock shared(db_mutex_);
    if (!db_) {
      return unavailable();
    }
    if (const rocksdb::Status synced = db_->SyncWAL(); !synced.ok()) {
      report_fault(generation_.load(std::memory_order_acquire),
                   plain_words(synced) + " (a sync failed)");
      return storage_failure("sync the log", synced);
    }
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

write_batch store::batch() {
  return write_batch(*this);
}
void share_memory(store_options& options, std::size_t stores) {
  options.block_cache = rocksdb::NewLRUCache(block_cache_bytes);
  // At least what the stores' nearly idle memtables hold together (one
  // arena block or so for each family they write), or the manager flushes
  // them one after another, each a few entries (benchmarks/README.md).
  options.write_buffers = std::make_shared<rocksdb::WriteBufferManager>(
      std::max(db_write_buffer_bytes, stores * store_write_buffer_floor_bytes));
}

}  // namespace durin::persistence
