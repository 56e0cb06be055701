// The node's RocksDB: one database with the column families of DESIGN.md
// (`runs`, `history`, `timers`, `active`, `meta`; later issues add `tokens`,
// `inbox`, `requests`). Only persistence/ touches RocksDB; the rest of durin
// reads through `store` and writes `write_batch`es through the committer.
//
// Thread-safety: all const methods may run concurrently from any thread.
// Reads see only durable data (every write is synced before it is answered).
// Errors are values: a failed read is storage-error, a record that fails its
// checksum or decoding is corrupt-record naming the key's family and run.
// Nothing here throws: RocksDB and allocation failures become storage-error.
// Key and value layouts byte by byte: persistence/README.md.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "durin/error.hpp"
#include "persistence/records.hpp"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class WriteBatch;
}  // namespace rocksdb

namespace durin::persistence {

class write_batch;

enum class family : std::uint8_t {
  runs = 0,
  history,
  timers,
  active,
  meta,
  tokens,    // hook tokens: owner, state, retention (actors/token_*)
  inbox,     // payloads resumed to a token, resume ids
  requests,  // request idempotency keys (gateway/)
  tenants,   // tenants (gateway/)
  api_keys,  // API keys (gateway/)
};
inline constexpr std::size_t family_count = 10;

class store {
 public:
  // Opens or creates the database under `dir` (creating `dir`), checks the
  // schema version in `meta` (writing it on first open). A database written
  // by another schema version is refused with invalid-argument.
  static result<std::unique_ptr<store>> open(const std::string& dir);
  ~store();

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
  // max == 0 or scan_max == 0 is invalid-argument.
  struct run_scan {
    std::vector<run_record> runs;
    std::string next_before_id;
  };
  result<run_scan> scan_runs(std::string_view before_id,
                             std::optional<run_status> status,
                             std::optional<std::string> flow, std::size_t max,
                             std::size_t scan_max = 100'000,
                             std::optional<std::string> tenant = {},
                             std::size_t bytes_max = SIZE_MAX) const;

  // Writes `batch` with sync=true, on the calling thread. The committer uses
  // this; others go through the committer. A batch with a refused put
  // (write_batch::problem) is invalid-argument and writes nothing; a batch
  // made by another store is internal. A failed write is storage-error.
  status write(write_batch& batch);

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

  // Called after each successful write() with the id and new status of
  // every run record that write stored, on the writing thread (the
  // committer's): it must be quick, and must neither block nor write. Null
  // removes it. Costs nothing per write while unset.
  using run_listener =
      std::function<void(std::string_view run_id, run_status status)>;
  void set_run_listener(run_listener listener);

  // Stored runs by status, indexed by the run_status value (pending = 1 ..
  // cancelled = 6; 0 and 7 stay 0). The first call counts the `runs` family
  // (one scan); from then on every write updates the counts under the lock
  // that orders it against the scan, so no write is missed or counted twice.
  // Keeps the status of each unfinished run in memory to know what a write
  // changes (a finished run's record is never rewritten).
  using status_counts = std::array<std::uint64_t, 8>;
  result<status_counts> runs_by_status();

  // For benchmarks and tests only: the raw database and its families.
  rocksdb::DB& raw_db() const { return *db_; }
  rocksdb::ColumnFamilyHandle* handle(family which) const;
  const std::string& dir() const { return dir_; }

 private:
  store() = default;
  status check_schema();
  // After a durable write: tells the run listener, updates the counts.
  void observe_runs(const write_batch& batch);

  struct run_watch;
  std::unique_ptr<run_watch> watch_;

  std::string dir_;
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

  std::size_t count() const;       // operations in the batch
  std::size_t size_bytes() const;  // bytes of the batch's representation
  bool empty() const { return count() == 0; }

  // Empty unless a put was refused; then the first refusal's reason.
  const std::string& problem() const { return problem_; }

  // REQUIRES: not moved from.
  rocksdb::WriteBatch& raw() { return *batch_; }

 private:
  friend class store;
  explicit write_batch(const store& owner);
  void refuse(std::string problem);

  const store* store_;
  std::unique_ptr<rocksdb::WriteBatch> batch_;
  std::string problem_;
};

}  // namespace durin::persistence
