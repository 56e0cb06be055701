// The node's RocksDB: one database with the column families of DESIGN.md
// (`runs`, `history`, `timers`, `active`, `meta`; later issues add `tokens`,
// `inbox`, `requests`). Only persistence/ touches RocksDB; the rest of durin
// reads through `store` and writes `write_batch`es through the committer.
//
// Thread-safety: all const methods may run concurrently from any thread.
// Reads see only durable data (every write is synced before it is
// answered), except on a replicated primary, whose group writes land before
// their fsync (write's `sync`) and are answered only after it.
// Errors are values: a failed read is storage-error, a record that fails its
// checksum or decoding is corrupt-record naming the key's family and run.
// Nothing here throws: RocksDB and allocation failures become storage-error.
// Key and value layouts byte by byte: persistence/README.md.
//
// Storage faults (a full disk, no file descriptors left, an I/O error): the
// first failed write, or a background error RocksDB reports, makes the store
// not ready. While not ready every read, batch and write fails at once with
// storage-error naming the fault in plain words (never a path), so nothing
// is decided on a view that the reopen below could still change (a failed
// write may or may not have landed). A thread of the store then closes the
// database and opens it again, with backoff, until its file system has room
// (reopen_free_bytes_min) and an open and a synced probe write succeed; then
// the store is ready again. RocksDB's own
// in-process recovery (Resume, auto-recovery) is switched off: in 7.8 it can
// write to a WAL file that already failed, which trips a RocksDB assertion
// (`sync_without_flush_called_`) and aborts the process.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "durin/error.hpp"
#include "persistence/fence.hpp"
#include "persistence/records.hpp"
#include "persistence/run_query.hpp"

namespace rocksdb {
class Cache;
class DB;
class ColumnFamilyHandle;
class FileSystem;
class Logger;
struct ReadOptions;
class Slice;
class Status;
class WriteBatch;
class WriteBufferManager;
}  // namespace rocksdb

namespace durin::persistence {

class write_batch;

enum class family : std::uint8_t {
  runs = 0,
  history,
  timers,
  active,
  meta,
  tokens,     // hook tokens: owner, state, retention (actors/token_*)
  inbox,      // payloads resumed to a token, resume ids
  requests,   // request idempotency keys (gateway/)
  tenants,    // tenants (gateway/)
  api_keys,   // API keys (gateway/)
  schedules,  // schedules and their firings (services/schedule_service)
  // The search attribute index (persistence/search_index.cpp). Last, so
  // that a database made before it gets it with the next id, the id a new
  // database gives it too: replicas' batches name families by id.
  search,
};
inline constexpr std::size_t family_count = 12;

// How scan_runs finds the runs of a query.
enum class run_list_path : std::uint8_t {
  // The search index, when the query's top level holds a comparison of an
  // attribute it answers (=, IN, <, >, <=, >=) and the candidates are few
  // enough; else every record.
  best,
  // Every record: what tests and benchmarks compare the index with.
  scan_only,
};

struct store_options {
  // Tests only: the file system RocksDB uses, e.g. a fault injector
  // (tests/support/faulty_file_system.hpp). Null (the default): the
  // operating system's.
  std::shared_ptr<rocksdb::FileSystem> file_system;
  // A store that is not ready tries to reopen after reopen_backoff_ms_min
  // (default 100), doubling the wait after each failed attempt up to
  // reopen_backoff_ms_max (default 1000).
  std::int64_t reopen_backoff_ms_min = 100;
  std::int64_t reopen_backoff_ms_max = 1000;
  // ... and only while its file system has at least this much free once it
  // has written (room for a memtable's flush), so a disk left just short of
  // full keeps it not ready instead of letting it flap between a successful
  // reopen and the next failed write.
  std::uint64_t reopen_free_bytes_min = 8u << 20;
  // The stores of a node's shards share one block cache and one budget for
  // their write buffers (services/runtime.cpp makes them), so a node's memory
  // does not grow with its shard count. Null: the store's own.
  std::shared_ptr<rocksdb::Cache> block_cache;
  std::shared_ptr<rocksdb::WriteBufferManager> write_buffers;
  // In a cluster: the node's right to use this shard (persistence/fence.hpp).
  // While it is closed the store is not ready, its database closed, and it
  // reopens as soon as the fence is granted. Null: always open.
  std::shared_ptr<persistence::fence> fence;
};

// The shared memory of `stores` stores (store_options above): the block
// cache one store has alone, and its write buffer budget, or 2 MiB a
// store when that is more.
void share_memory(store_options& options, std::size_t stores);

// Whether the store takes reads and writes now (see the header comment).
struct storage_health {
  bool ready = true;
  // Why not, in plain words ("the disk is full"); empty when ready.
  std::string fault;
  std::uint64_t faults = 0;       // changes from ready to not ready since open
  std::uint64_t reopens = 0;      // successful reopens since open
  std::int64_t not_ready_ms = 0;  // how long it has been not ready
  // Not ready because its fence is closed: this node does not hold the
  // shard now, which is no fault of the disk.
  bool fenced = false;
};

class store {
 public:
  // Opens or creates the database under `dir` (creating `dir`), checks the
  // schema version in `meta` (writing it on first open). A database written
  // by another schema version is refused with invalid-argument; a directory
  // held by another open is storage-error. An open that fails on a storage
  // fault (disk full, no descriptors, I/O error) returns a store that is
  // not ready and keeps trying to open, so that a node restarted on a full
  // disk comes up, says why it cannot write, and recovers by itself.
  static result<std::unique_ptr<store>> open(const std::string& dir,
                                             store_options options = {});
  ~store();

  // Never blocks: whether reads and writes work now, and why not.
  storage_health health() const;
  bool ready() const;

  // Called on the store's recovery thread after each change of readiness
  // (with the new health), with no lock of the store held: it may read the
  // store, but must not wait for a write. Null removes it.
  using health_listener = std::function<void(const storage_health&)>;
  void set_health_listener(health_listener listener);

  // For persistence/ (requests, auth): one raw value, nullopt when absent.
  result<std::optional<std::string>> get_value(family which,
                                               std::string_view key) const;
  // For persistence/: every key and value of a family in key order until
  // `visit` answers false. `visit` must not call the store.
  status scan_values(
      family which,
      const std::function<bool(std::string_view key, std::string_view value)>&
          visit) const;

  store(const store&) = delete;
  store& operator=(const store&) = delete;

  // nullopt when there is no such run (also for an id too long to be a key).
  // A record that fails decoding, or that names another id, is
  // corrupt-record.
  result<std::optional<run_record>> get_run(std::string_view run_id) const;

  // The run's events in sequence order, starting at 1 with no gaps; a gap or
  // an undecodable event is corrupt-record.
  result<std::vector<event_record>> load_history(std::string_view run_id) const;

  // Ids of runs not yet ended (pending, running, waiting), in id order.
  // Read from the `active` family, which writers keep in step with the run
  // records (put_active / delete_active in the same batch as put_run). A
  // malformed entry is corrupt-record: recovery must not silently skip a run.
  result<std::vector<std::string>> active_runs() const;

  // Timers due at or before `until_ms`, in due order (then run id, call,
  // kind), at most `max`. A malformed entry is corrupt-record.
  // With `after_key` (a timers key, see keys::timer), only timers whose key
  // sorts after it: a reload continues where the last one stopped.
  result<std::vector<timer_record>> timers_until(
      std::int64_t until_ms, std::size_t max,
      std::string_view after_key = {}) const;

  // Runs newest first (ids sort by creation time), strictly older than
  // `before_id` when it is non-empty, that pass the filter; at most `max`
  // results and at most `scan_max` records examined. The second value is
  // the id to continue from, empty when the scan reached the oldest run.
  // Order is key order: by id length, then id bytes, which is creation
  // order for the fixed-length run ids durin makes. A run record that fails
  // decoding is skipped (and counts as examined) so that one bad record
  // cannot break listing; get_run reports it. The scan also stops after the
  // result whose stored records bring the results' bytes to `bytes_max` or
  // more (at least one result), so a page of huge inputs stays bounded.
  // max == 0 or scan_max == 0 is invalid-argument. With `schedule_id`, only
  // the runs that schedule started; with `query`, only the runs it matches
  // (persistence/run_query.hpp), evaluated only on runs of `tenant`.
  //
  // A query with a comparison the search index answers (run_list_path::best)
  // reads only the runs the index names for it, in the same order, and gives
  // the same page and the same `next_before_id`; `scan_max` then bounds the
  // runs read, not every record passed, so a page ended by `scan_max` may
  // end at another run than the scan's (both list every run once).
  struct run_scan {
    std::vector<run_record> runs;
    // The stored size of each of `runs`: what `bytes_max` counts, for a
    // caller merging scans under the same budget.
    std::vector<std::size_t> run_bytes;
    std::string next_before_id;
    // Run records read: what scan_max counts. For tests and benchmarks.
    std::size_t records_read = 0;
    // Search index entries read (0 for a scan). For tests and benchmarks.
    std::size_t entries_read = 0;
  };
  result<run_scan> scan_runs(std::string_view before_id,
                             std::optional<run_status> status,
                             std::optional<std::string> flow, std::size_t max,
                             std::size_t scan_max = 100'000,
                             std::optional<std::string> tenant = {},
                             std::size_t bytes_max = SIZE_MAX,
                             std::optional<std::string> schedule_id = {},
                             const run_query* query = nullptr,
                             run_list_path path = run_list_path::best) const;

  // Every (tenant, attribute name) the stored runs carry, once, with the
  // type of its first run in key order: what the node's search attribute types
  // are seeded with at open (services/search_types.hpp). One scan of `runs`; an
  // unreadable record is skipped, as in scan_runs.
  struct search_type_entry {
    std::string tenant;
    std::string name;
    search_attribute_type type = search_attribute_type::keyword;
  };
  result<std::vector<search_type_entry>> search_attribute_types() const;

  // Writes `batch` with sync=true, on the calling thread. The committer uses
  // this; others go through the committer. A batch with a refused put
  // (write_batch::problem) is invalid-argument and writes nothing; a batch
  // made by another store is internal. A failed write is storage-error.
  // Without `sync` the write is durable only once a later sync_log()
  // succeeds, and reads see it before that: only a replicated primary does
  // so, to overlap its own fsync with its backups' (committer.cpp).
  status write(write_batch& batch, bool sync = true);
  // One fsync of the log: every write before it is durable when ok. A
  // failure makes the store not ready, as a failed write does.
  status sync_log();

  // Reads or writes one `meta` value directly (sync). Values are framed and
  // checksummed like every other value (codec::encode_bytes); at most
  // codec::field_bytes_max bytes.
  result<std::optional<std::string>> get_meta(std::string_view name) const;
  status put_meta(std::string_view name, std::string_view value);

  // The token's record; nullopt when the token is free.
  result<std::optional<token_record>> get_token(std::string_view tenant,
                                                std::string_view token) const;
  // Payloads resumed to the token, from `from_sequence` on, at most `max`.
  result<std::vector<payload_record>> load_payloads(std::string_view tenant,
                                                    std::string_view token,
                                                    std::uint64_t from_sequence,
                                                    std::size_t max) const;
  // What a resume with `resume_id` got, if one was recorded.
  result<std::optional<resume_record>> get_resume(
      std::string_view tenant, std::string_view token,
      std::string_view resume_id) const;

  // The tenant whose run holds webhook `token`, from the webhook index
  // (written with the webhook's claim, removed with its release); nullopt
  // when no webhook holds it.
  result<std::optional<std::string>> get_webhook_tenant(
      std::string_view token) const;

  write_batch batch();

  // Stored runs by status, indexed by the run_status value (pending = 1 ..
  // cancelled = 6, terminated = 8; 0 and 7 stay 0). The first call counts the
  // `runs` family (one scan); from then on every write updates the counts under
  // the lock that orders it against the scan, so no write is missed or counted
  // twice. Keeps the status of each unfinished run in memory to know what a
  // write changes (a finished run's record is never rewritten).
  using status_counts = std::array<std::uint64_t, 9>;
  result<status_counts> runs_by_status();

  // For benchmarks and tests only: the raw database and its families, valid
  // while the store is ready (a reopen replaces them).
  rocksdb::DB& raw_db() const { return *db_; }
  rocksdb::ColumnFamilyHandle* handle(family which) const;
  const std::string& dir() const { return dir_; }

  // Keeps the database open (no reopen) while held, so that handle() stays
  // valid; false, holding nothing, while the store is not ready.
  class pin {
   public:
    explicit operator bool() const { return lock_.owns_lock(); }

   private:
    friend class store;
    std::shared_lock<std::shared_mutex> lock_;
  };
  pin hold() const;
  // storage-error naming why the store is not ready.
  error unavailable() const;

  // The shard's log position: how many fenced group writes it has taken
  // (persistence/README.md, invariant 11). Read at every open; only the
  // committer advances it, with the write that records it. 0 outside a
  // cluster, where writes are not counted.
  std::uint64_t log_position() const {
    return log_position_.load(std::memory_order_acquire);
  }
  // The epoch of the write at log_position() (0 before any).
  std::uint64_t last_epoch() const {
    return last_epoch_.load(std::memory_order_acquire);
  }
  void advanced_to(std::uint64_t position, std::uint64_t epoch) {
    last_epoch_.store(epoch, std::memory_order_release);
    log_position_.store(position, std::memory_order_release);
  }
  const std::shared_ptr<fence>& guard() const { return options_.fence; }

  // A shard moving between nodes (persistence/store_move.cpp). Both
  // REQUIRE the fence closed (this node does not hold the shard): they
  // close the database and keep it closed. export_files hard-links (SST
  // files: immutable) or copies (the rest) every database file into
  // `into`, a new directory, and syncs them: a consistent copy, since a
  // closed database's files are. replace_files swaps the store's directory
  // for `from` (a copy received whole, synced), which the next grant
  // opens.
  status export_files(const std::string& into);
  status replace_files(const std::string& from);

  // A backup's copy (cluster/replication.hpp). follow() opens the database
  // behind a closed fence for the primary's writes alone: the store stays
  // not ready (fenced) for everyone else, so no run of the shard is read
  // or acted on here. A grant reopens it as any store (a promotion);
  // unfollow() closes it. REQUIRE the fence closed; follow() when
  // following already does nothing.
  status follow();
  void unfollow();
  bool following() const { return following_.load(std::memory_order_acquire); }
  // Writes one group write of the primary, `data` its WriteBatch
  // representation (which carries the epoch and position itself), only
  // as the next position: invalid-argument otherwise, or when not
  // following. Durable when ok with `sync`; without it, durable once a
  // later sync_replicated() succeeds (one fsync for many writes), and
  // log_position() counts it already: a caller that answers from it must
  // wait for that sync, and must unfollow() when it fails (the reopen
  // reads the durable position again).
  status apply_replicated(std::uint64_t epoch, std::uint64_t position,
                          std::string_view data, bool sync = true);
  status sync_replicated();
  // A consistent copy of the open database (a RocksDB checkpoint: SSTs
  // hard-linked) in `into`, a new directory; serving or following. Its
  // log position is the one in its `meta`.
  status checkpoint(const std::string& into);
  // Every key and value of every family but `meta`'s local probe, hashed
  // (FNV-1a, in key order): equal on replicas that hold the same writes.
  // Serving or following.
  result<std::uint64_t> checksum() const;

 private:
  store() = default;
  status check_schema();  // REQUIRES: as open_database
  // Builds the search index from the run records unless `meta` says it is
  // built (a database written before the index existed). REQUIRES: as
  // open_database. search_index.cpp.
  status ensure_search_index();
  // Index entries put (+) or deleted (-), by run (a hash of its id).
  using entry_deltas = std::vector<std::pair<std::uint64_t, std::int64_t>>;
  // Appends to `batch` what its puts of run records change in the search
  // index: entries of a run's attributes it no longer has deleted, new
  // ones put; `deltas` gets what they change in the entry counts. Reads
  // the stored record of a run that has entries, so REQUIRES: the store
  // pinned and the watch's lock held (no other write between this and the
  // write).
  rocksdb::Status index_search_attributes(rocksdb::WriteBatch& batch,
                                          entry_deltas& deltas) const;
  // An index entry put (true) or deleted.
  using index_change = std::pair<std::string, bool>;
  using index_change_list = std::vector<index_change>;
  // The index changes the run records `batch` puts and deletes make, in
  // the order index_search_attributes appends them; `own`, when given,
  // gets the index changes the batch holds already. REQUIRES: as
  // index_search_attributes.
  rocksdb::Status index_changes(const rocksdb::WriteBatch& batch,
                                index_change_list& changes,
                                entry_deltas& deltas,
                                index_change_list* own) const;
  // A backup's check of a replicated batch (the primary's, index changes
  // included): true when they are not the changes its records make here
  // (a primary of a build without the index, in a rolling upgrade), and
  // then the batch also deletes `meta/search_index_version`, so that the
  // copy is indexed afresh when it opens to serve (check_schema); the
  // caller sets index_stale_ once that batch is written. `deltas` gets
  // what it moves in the entry counts. REQUIRES: the watch's lock, no
  // other writer (the replication applier).
  result<bool> follow_index(rocksdb::WriteBatch& batch,
                            entry_deltas& deltas) const;
  // After a write: the counts move by `deltas`. REQUIRES: the watch's lock.
  void count_entries(const entry_deltas& deltas);
  // The counts made afresh from the `search` family. REQUIRES: as
  // open_database.
  status count_stored_entries();
  // scan_runs through the search index; nullopt when the index cannot
  // answer the request well (scan instead).
  struct run_list_request;  // store_internal.hpp
  result<std::optional<run_scan>> scan_by_index(
      const run_list_request& request) const;
  // The page of the runs whose keys (keys::run, newest first, each once)
  // `next_key` gives (nullopt after the last), that the request admits,
  // read at `read`'s snapshot. REQUIRES: the store pinned.
  using next_run_key =
      std::function<rocksdb::Status(std::optional<std::string>& key)>;
  result<run_scan> read_candidate_runs(const run_list_request& request,
                                       const rocksdb::ReadOptions& read,
                                       const next_run_key& next_key) const;
  // scan_runs through every record. REQUIRES: the store pinned.
  result<run_scan> scan_every_run(const run_list_request& request) const;
  result<std::optional<std::string>> read_meta(std::string_view name) const;
  rocksdb::Status write_meta(std::string_view name, std::string_view value);
  struct health_state;
  class fault_listener;
  // Opens the database files; the store must hold none. REQUIRES: db_mutex_
  // held exclusively, or the store not yet shared.
  rocksdb::Status open_database();
  // Destroys the handles and closes the database, if open.
  void close_database();
  // A write or background job of database generation `generation` failed.
  void report_fault(std::uint64_t generation, const std::string& fault);
  // The recovery thread: waits for a fault, then reopens with backoff.
  void recover_loop();
  // One attempt: close, open, check the schema, probe with a synced write.
  // Never creates the database once this store has opened it (a missing
  // one was deleted under it: created afresh, it would answer its runs as
  // never started, and a keyed retry with a second run).
  status reopen();
  // Refuses a reopen while the file system has less than
  // reopen_free_bytes_min free.
  status check_free_space() const;
  // The fence was granted: the recovery thread tries at once.
  void poke();
  // The fence was granted (reopen now) or closed (not ready from now on).
  void fence_changed();

  store_options options_;
  std::shared_ptr<health_state> health_;
  // Shared by every use of db_ and the handles; exclusive while they are
  // replaced (close_database, open_database).
  mutable std::shared_mutex db_mutex_;
  // A database was opened in dir_ (guarded by db_mutex_, as open_database).
  bool opened_before_ = false;
  // After a durable write: updates the runs-by-status counts.
  void observe_runs(const write_batch& batch);
  // The counts are made afresh at the next runs_by_status.
  void forget_counts();

  struct run_watch;
  std::unique_ptr<run_watch> watch_;
  // How many search index entries each run has, by a hash of its id. A
  // write of a run record no count names, whose new record has no
  // attributes, leaves the index as it is and reads no stored record: most
  // runs have no attributes, and that read cost a no-op run ~8% of its
  // throughput (benchmarks/README.md).
  // Colliding ids share a count: a run is then thought to have entries,
  // which costs a read, never a wrong index. Made at open, moved by every
  // write (store::write, apply_replicated) under the watch's lock.
  std::unordered_map<std::uint64_t, std::uint64_t> entry_counts_;
  // A backup's index no longer follows its records (follow_index): checked
  // no more until the copy is indexed again. Under the watch's lock.
  bool index_stale_ = false;

  std::string dir_;
  // The Env over options_.file_system, when a test set one; outlives db_.
  std::shared_ptr<void> env_;
  std::shared_ptr<rocksdb::Cache> cache_;      // one block cache across reopens
  std::shared_ptr<rocksdb::Logger> info_log_;  // the LOG file, across reopens
  std::atomic<std::uint64_t> generation_{0};   // of db_; +1 on every open
  std::atomic<std::uint64_t> log_position_{0};
  std::atomic<std::uint64_t> last_epoch_{0};
  std::atomic<bool> following_{false};
  // Reads the log position from `meta`. REQUIRES: as check_schema.
  status load_log_position();
  std::vector<std::uint32_t> family_ids_;  // of the first open
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;  // indexed by family
  // RocksDB's required `default` family, and families found on disk that
  // this build does not know (kept open so that the database opens at all;
  // never read or written).
  rocksdb::ColumnFamilyHandle* default_handle_ = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> other_handles_;
};

// A set of writes applied atomically: all of them or none. Built by one
// thread, then handed to the committer (or store::write). Every put checks
// its record first (ids fit a key, fields within codec::field_bytes_max,
// enums in range); a refused put leaves a `problem` and the whole batch is
// refused when written, so a bad record never reaches the disk.
class write_batch {
 public:
  write_batch(write_batch&&) noexcept;
  write_batch& operator=(write_batch&&) noexcept;
  ~write_batch();

  void put_run(const run_record& record);
  void put_event(std::string_view run_id, std::uint64_t sequence,
                 const event_record& event);
  void put_timer(const timer_record& timer);
  void delete_timer(const timer_record& timer);
  void put_active(std::string_view run_id);
  void delete_active(std::string_view run_id);
  void put_token(const token_record& record);
  void delete_token(std::string_view tenant, std::string_view token);
  void put_payload(std::string_view tenant, std::string_view token,
                   const payload_record& record);
  void put_resume(std::string_view tenant, std::string_view token,
                  std::string_view resume_id, const resume_record& record);
  // Every payload and resume id of the token.
  void delete_inbox(std::string_view tenant, std::string_view token);
  // The webhook index: webhook tokens are global (a POST carries no tenant),
  // so `token` -> `tenant` is kept beside the token records, under the empty
  // tenant (no real tenant is empty).
  void put_webhook_tenant(std::string_view token, std::string_view tenant);
  void delete_webhook_tenant(std::string_view token);
  // The shard's epoch and log position (the committer, in a cluster).
  void put_position(std::uint64_t epoch, std::uint64_t position);

  std::size_t count() const;       // operations in the batch
  std::size_t size_bytes() const;  // bytes of the batch's representation
  bool empty() const { return count() == 0; }

  // Empty unless a put was refused; then the first refusal's reason.
  const std::string& problem() const { return problem_; }
  // True when a put found the store not ready: writing the batch is then
  // storage-error (nothing is written), like any write while not ready.
  bool unavailable() const { return unavailable_; }

  // For persistence/ (requests, auth): one raw put or delete in `which`.
  void put_value(family which, std::string_view key, std::string_view value);
  void delete_key(family which, std::string_view key);

  // REQUIRES: not moved from.
  rocksdb::WriteBatch& raw() { return *batch_; }

 private:
  friend class store;
  explicit write_batch(const store& owner);
  void refuse(std::string problem);
  // One operation on the family, with the store pinned (the handle stays
  // valid); while the store is not ready they mark the batch unavailable
  // and answer ok having done nothing.
  rocksdb::Status put_to(family which, const rocksdb::Slice& key,
                         const rocksdb::Slice& value);
  rocksdb::Status delete_from(family which, const rocksdb::Slice& key);
  rocksdb::Status delete_range_from(family which, const rocksdb::Slice& begin,
                                    const rocksdb::Slice& end);

  const store* store_;
  std::unique_ptr<rocksdb::WriteBatch> batch_;
  std::string problem_;
  bool unavailable_ = false;
};

}  // namespace durin::persistence
