// The group-commit writer. Any thread hands it write batches; one dedicated
// thread merges everything pending into a single RocksDB write with
// sync=true, then calls each batch's callback with the outcome. Nothing is
// reported durable before the fsync returned. Callbacks run on the committer
// thread in submission order and must not block (actors send a message);
// in a cluster with backups, a fenced write's callbacks run once the
// shard's replication says every in-sync backup has it (persistence/
// replication.hpp) and its own fsync returned, in log order. There the
// write lands unsynced, is shipped, and only then synced, so that this
// node's fsync and its backups' overlap instead of adding up.
//
// A failed write is indefinite (storage-error): it may or may not have
// landed, so callers re-read the truth before acting on it. A batch with a
// refused put (write_batch::problem) is answered invalid-argument and left
// out of its group; the other batches of the group are unaffected.
//
// after_submitted answers once every batch submitted before it is answered:
// a read that may have seen a replicated write landed unsynced (visible,
// not yet durable here or on the backups) waits with it before its caller
// learns what it saw.
//
// Thread-safety: submit, after_submitted, stop and statistics may be called
// from any thread,
// including from a callback (stop() from a callback only asks the thread to
// end; the destructor, which must not run on the committer thread, joins).
// The queue is unbounded: callers bound what they have in flight.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "durin/error.hpp"
#include "persistence/store.hpp"

namespace durin::persistence {

class committer {
 public:
  using callback = std::function<void(const status&)>;

  struct options {
    // A group write holds at most this many bytes; the rest waits its turn.
    std::size_t group_bytes_max = 8 << 20;
  };

  // What a fault injector decides for one group write (tests only).
  enum class fault : std::uint8_t {
    none,
    fail_before_write,  // nothing is written, callbacks get storage-error
    fail_after_write,   // written and synced, callbacks still get storage-error
  };

  // Counts what reached the disk: a fail_after_write group counts (it was
  // written), and so does one that landed as its fence closed; a
  // fail_before_write or failed write does not.
  struct stats {
    std::uint64_t group_writes = 0;  // fsync'd RocksDB writes
    std::uint64_t batches = 0;       // batches committed
    std::uint64_t operations = 0;    // puts and deletes committed
    // Group writes that landed while their shard's fence closed (a lease
    // ended or a hand-over began): answered failed, shipped to the backups
    // all the same. Counted so that tests of that race can see it was met.
    std::uint64_t landed_as_fence_closed = 0;
  };

  // Starts the committer thread. REQUIRES: `target` outlives the committer.
  committer(store& target, options opts);
  explicit committer(store& target) : committer(target, options{}) {}
  ~committer();  // stop()

  committer(const committer&) = delete;
  committer& operator=(const committer&) = delete;

  // Queues `batch`; `done` runs once it is durable or failed. After stop(),
  // `done` runs at once (on the caller's thread) with shutting-down.
  void submit(write_batch batch, callback done);

  // Calls `done` once every batch submitted before this call is answered
  // (at once when none is outstanding), on the thread that answers the
  // last of them; with storage-error when one of those that were not yet
  // answered failed (it may be visible, and may not count). After the
  // committer is destroyed, a `done` still waiting gets shutting-down.
  void after_submitted(callback done);

  // Writes everything already queued, then ends the thread. Idempotent.
  void stop();

  stats statistics() const;

  // Consulted before each group write; for tests that inject storage faults.
  // Runs on the committer thread.
  void set_fault_injector(std::function<fault()> injector);

 private:
  struct pending {
    write_batch batch;
    callback done;
    std::uint64_t seq = 0;  // 1, 2, ... in submission order
  };
  // Which batches are answered, shared with replicated groups' answers
  // (they may come after the committer is gone).
  struct answered_log;

  void run();
  // Moves the next group off the queue. REQUIRES: mutex_ held, queue_ not
  // empty.
  std::vector<pending> take_group();
  // Writes one group and answers every batch in it, in order.
  void commit_group(std::vector<pending>& group, fault injected);
  // The write of a group's `valid` batches: the one batch itself, or
  // `merged`, their records concatenated in order (of those whose every
  // operation check_families accepts; their indexes in `members`); null
  // when none is left to write (their outcomes set instead).
  write_batch* merge_group(std::vector<pending>& group,
                           const std::vector<std::size_t>& valid,
                           std::vector<status>& outcomes,
                           std::vector<std::size_t>& members,
                           write_batch& merged);
  // Ships the landed, unsynced write at `position` to the shard's
  // replication, then syncs it here: the members' callbacks are answered
  // once both are done (ok only when both are and `verdict`, the write's
  // own outcome, is), the sync's failure gives the shard up at `epoch`
  // (replication::lost).
  void replicate(const fence& guard, std::vector<pending>& group,
                 const std::vector<std::size_t>& members,
                 std::vector<status>& outcomes, std::uint64_t epoch,
                 std::uint64_t position, write_batch& written,
                 const status& verdict);
  // Writes `target` (synced unless not `sync`) and counts it, or fails it
  // as `injected` says. In a cluster, `position` gets the log position
  // written (0 outside); `landed` whether the write reached the store,
  // also when it is answered failed (the fence closed meanwhile).
  status write_group(write_batch& target, std::size_t batches,
                     std::size_t operations, fault injected, bool sync,
                     std::uint64_t& epoch, std::uint64_t& position,
                     bool& landed);

  store& store_;
  options options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<pending> queue_;
  std::uint64_t submitted_ = 0;  // the last batch's seq
  bool stopping_ = false;
  std::shared_ptr<answered_log> answered_;
  std::function<fault()> injector_;
  stats stats_;
  std::mutex stop_mutex_;      // serialises joins of concurrent stop() calls
  std::thread::id thread_id_;  // the committer thread; set before any submit
  std::thread thread_;
};

}  // namespace durin::persistence
