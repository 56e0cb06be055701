// The group-commit writer: one thread, one synced RocksDB write per group.
#include "persistence/committer.hpp"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status_join.hpp"
#include "persistence/batch_check.hpp"
#include "persistence/test_points.hpp"

namespace durin::persistence {

namespace {

// A batch's bytes (rocksdb::WriteBatch's representation): an 8-byte sequence
// and a 4-byte little-endian count, then the records. RocksDB has no public
// WriteBatch::Append; concatenating the records behind one header is what it
// does inside, and copies each batch's bytes once instead of re-encoding
// every operation.
constexpr std::size_t batch_header_bytes = 12;
constexpr std::size_t batch_count_at = 8;

// Calls `done`; an exception from it must not end the committer thread,
// which would leave every later caller unanswered.
void answer(const committer::callback& done, const status& outcome) {
  if (!done) {
    return;
  }
  try {
    done(outcome);
  } catch (const std::exception& failure) {
    std::fprintf(stderr, "durin: committer callback threw: %s\n",
                 failure.what());
  } catch (...) {
    std::fprintf(stderr, "durin: committer callback threw\n");
  }
}

// Counts one group write on the store's fence (none on a single node) for
// as long as it lives: from before the write checks the fence until the
// write is shipped or failed, which is what a hand-over waits out.
class counted_write {
 public:
  explicit counted_write(fence* counted) : fence_(counted) {
    if (fence_ != nullptr) {
      fence_->begin_write();
    }
  }
  ~counted_write() {
    if (fence_ != nullptr) {
      fence_->end_write();
    }
  }
  counted_write(const counted_write&) = delete;
  counted_write& operator=(const counted_write&) = delete;

 private:
  fence* fence_;
};

}  // namespace

// Batches are answered in submission order, except that two replicated
// groups may settle on two threads at once (one's backups answered last,
// the next one's own fsync): ranges answered early wait in `ahead` until
// the ones before them are answered too.
struct committer::answered_log {
  struct waiter {
    std::uint64_t target = 0;  // answered once every batch up to it is
    std::uint64_t since = 0;   // `through` when it began to wait
    callback done;
  };

  std::mutex mutex;
  std::uint64_t through = 0;  // every batch up to this seq is answered
  std::map<std::uint64_t, std::uint64_t> ahead;  // first seq -> last seq
  std::uint64_t failed = 0;  // the last seq of the latest failed group write
  std::vector<waiter> waiting;
  bool gone = false;  // the committer is destroyed

  void note(std::uint64_t first, std::uint64_t last, bool group_failed) {
    std::vector<std::pair<callback, status>> ready;
    {
      std::lock_guard lock(mutex);
      if (group_failed) {
        failed = std::max(failed, last);
      }
      if (first > through + 1) {
        ahead.emplace(first, last);
      } else {
        through = std::max(through, last);
      }
      while (!ahead.empty() && ahead.begin()->first <= through + 1) {
        through = std::max(through, ahead.begin()->second);
        ahead.erase(ahead.begin());
      }
      std::erase_if(waiting, [&](waiter& one) {
        if (one.target > through) {
          return false;
        }
        ready.emplace_back(std::move(one.done), outcome_since(one.since));
        return true;
      });
    }
    for (const auto& [done, outcome] : ready) {
      answer(done, outcome);
    }
  }

  status outcome_since(std::uint64_t since) const {
    if (failed > since) {
      return make_error(errc::storage_error,
                        "a write this answer may reflect was not made "
                        "durable on every copy of the shard; retry");
    }
    return {};
  }

  void wait(std::uint64_t target, callback done) {
    status outcome;
    {
      std::lock_guard lock(mutex);
      if (gone) {
        outcome = make_error(errc::shutting_down, "the committer has stopped");
      } else if (through < target) {
        waiting.push_back({target, through, std::move(done)});
        return;
      }
    }
    answer(done, outcome);
  }

  void abandon() {
    std::vector<waiter> left;
    {
      std::lock_guard lock(mutex);
      gone = true;
      left.swap(waiting);
    }
    for (const auto& one : left) {
      answer(one.done,
             make_error(errc::shutting_down, "the committer has stopped"));
    }
  }
};

committer::committer(store& target, options opts)
    : store_(target),
      options_(opts),
      answered_(std::make_shared<answered_log>()) {
  thread_ = std::thread([this] { run(); });
  thread_id_ = thread_.get_id();
}

committer::~committer() {
  stop();
  answered_->abandon();
}

void committer::submit(write_batch batch, callback done) {
  {
    std::lock_guard lock(mutex_);
    if (!stopping_) {
      queue_.push_back(
          pending{std::move(batch), std::move(done), ++submitted_});
      wake_.notify_one();
      return;
    }
  }
  answer(done, make_error(errc::shutting_down, "the committer has stopped"));
}

void committer::after_submitted(callback done) {
  std::uint64_t target = 0;
  {
    std::lock_guard lock(mutex_);
    target = submitted_;
  }
  answered_->wait(target, std::move(done));
}

void committer::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (std::this_thread::get_id() == thread_id_) {
    // From a callback: the loop drains and ends by itself; joining here
    // would wait for ourselves.
    return;
  }
  std::lock_guard stop_lock(stop_mutex_);
  if (thread_.joinable()) {
    thread_.join();
  }
}

committer::stats committer::statistics() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void committer::set_fault_injector(std::function<fault()> injector) {
  std::lock_guard lock(mutex_);
  injector_ = std::move(injector);
}

void committer::run() {
  for (;;) {
    std::vector<pending> group;
    std::function<fault()> injector;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) {
        return;  // stopping, and everything queued is answered
      }
      group = take_group();
      injector = injector_;
    }
    fault injected = fault::none;
    if (injector) {
      try {
        injected = injector();
      } catch (...) {
        injected = fault::none;  // a broken test hook injects nothing
      }
    }
    commit_group(group, injected);
  }
}

std::vector<committer::pending> committer::take_group() {
  std::vector<pending> group;
  std::size_t group_bytes = 0;
  // Always at least one batch, however large, so nothing waits forever.
  do {
    group_bytes += queue_.front().batch.size_bytes();
    group.push_back(std::move(queue_.front()));
    queue_.pop_front();
  } while (!queue_.empty() && group_bytes + queue_.front().batch.size_bytes() <=
                                  options_.group_bytes_max);
  return group;
}

void committer::commit_group(std::vector<pending>& group, fault injected) {
  std::vector<status> outcomes(group.size());
  std::vector<std::size_t> valid;
  for (std::size_t index = 0; index < group.size(); ++index) {
    const write_batch& batch = group[index].batch;
    if (!batch.problem().empty()) {
      outcomes[index] = make_error(errc::invalid_argument,
                                   "batch refused: " + batch.problem());
    } else if (batch.unavailable()) {
      // Built while the store was not ready: it may lack some of its
      // operations, so it is never written, alone or merged.
      outcomes[index] = store_.unavailable();
    } else {
      valid.push_back(index);
    }
  }

  std::vector<std::size_t> members;  // indexes of the batches in the write
  bool answered_later = false;       // by the replicated write's settle
  bool failed = false;
  write_batch merged = store_.batch();
  write_batch* target = merge_group(group, valid, outcomes, members, merged);
  if (target != nullptr) {
    std::size_t operations = 0;
    for (const std::size_t index : members) {
      operations += group[index].batch.count();
    }
    std::uint64_t epoch = 0;
    std::uint64_t position = 0;
    const auto& fence = store_.guard();
    const bool replicated = fence && fence->replication() != nullptr;
    status written;
    {
      const counted_write counted(fence.get());
      bool landed = false;
      written = write_group(*target, members.size(), operations, injected,
                            !replicated, epoch, position, landed);
      if (landed && position != 0 && replicated) {
        // Shipped even when the fence closed during the write (answered
        // failed then): a copy must never lack a write its primary holds.
        replicate(*fence, group, members, outcomes, epoch, position, *target,
                  written);
        members.clear();  // answered once durable here and replicated
        answered_later = true;
      }
    }
    for (const std::size_t index : members) {
      outcomes[index] = written;
    }
    failed = !written;
  }

  // Outside the lock and in submission order: a callback may submit again.
  for (std::size_t index = 0; index < group.size(); ++index) {
    if (group[index].done) {
      answer(group[index].done, outcomes[index]);
    }
  }
  if (!answered_later) {
    answered_->note(group.front().seq, group.back().seq, failed);
  }
}

void committer::replicate(const fence& guard, std::vector<pending>& group,
                          const std::vector<std::size_t>& members,
                          std::vector<status>& outcomes, std::uint64_t epoch,
                          std::uint64_t position, write_batch& written,
                          const status& verdict) {
  // The two halves of a replicated write: the backups' and this node's
  // fsync. The last to finish answers, with the first failure if any.
  std::vector<callback> waiting;
  for (const std::size_t index : members) {
    waiting.push_back(std::move(group[index].done));
    group[index].done = nullptr;
    outcomes[index] = {};
  }
  auto settle =
      join_status(2, [waiting = std::move(waiting), answered = answered_,
                      first = group.front().seq,
                      last = group.back().seq](const status& outcome) {
        for (const auto& done : waiting) {
          answer(done, outcome);
        }
        answered->note(first, last, !outcome);
      });
  const auto* fenced = &guard;
  guard.replication()->ship(
      epoch, position, written.raw().Data(),
      [fenced, epoch, settle](const status& shipped) {
        status outcome = shipped;
        if (outcome && (!fenced->open() || fenced->epoch() != epoch)) {
          // Replicated, but the lease's deadline passed meanwhile: an
          // answer now would come from a node that may no longer hold the
          // shard (persistence/README.md, invariant 11).
          outcome = make_error(errc::storage_error,
                               "the shard's lease ended during the write; "
                               "it may or may not count, retry with the "
                               "same key");
        }
        settle(outcome);
      });
  DURIN_TEST_KILL_POINT("committer.before_sync");
  status synced = store_.sync_log();
  if (synced && DURIN_TEST_FAIL_POINT("committer.sync")) {
    synced = make_error(errc::storage_error, "injected: the sync failed");
  }
  if (!synced) {
    guard.replication()->lost(epoch, position);
    synced = make_error(errc::storage_error,
                        "the write could not be made durable on the shard's "
                        "primary; it may or may not count, retry with the "
                        "same key");
  }
  settle(synced ? verdict : synced);
}

write_batch* committer::merge_group(std::vector<pending>& group,
                                    const std::vector<std::size_t>& valid,
                                    std::vector<status>& outcomes,
                                    std::vector<std::size_t>& members,
                                    write_batch& merged) {
  // One batch is written as it is; several are merged into one write.
  if (valid.size() == 1) {
    members = valid;
    return &group[valid[0]].batch;
  }
  if (valid.empty()) {
    return nullptr;
  }
  // The check looks up handles: the database must not reopen meanwhile.
  auto pinned = store_.hold();
  if (!pinned) {
    for (const std::size_t index : valid) {
      outcomes[index] = store_.unavailable();
    }
    return nullptr;
  }
  std::vector<std::uint32_t> known;
  known.reserve(family_count);
  for (std::size_t index = 0; index < family_count; ++index) {
    known.push_back(store_.handle(static_cast<family>(index))->GetID());
  }
  std::size_t bytes = batch_header_bytes;
  for (const std::size_t index : valid) {
    if (auto checked = check_families(group[index].batch.raw(), known);
        !checked) {
      outcomes[index] = make_error(errc::invalid_argument,
                                   "batch refused: " + checked.error().message);
    } else {
      members.push_back(index);
      bytes += group[index].batch.raw().GetDataSize() - batch_header_bytes;
    }
  }
  if (members.empty()) {
    return nullptr;
  }
  std::string rep;
  rep.reserve(bytes);
  rep.assign(batch_header_bytes, '\0');
  std::uint32_t count = 0;
  for (const std::size_t index : members) {
    const auto& raw = group[index].batch.raw();
    rep.append(raw.Data(), batch_header_bytes);
    count += raw.Count();
  }
  for (std::size_t byte = 0; byte < 4; ++byte) {
    rep[batch_count_at + byte] =
        static_cast<char>((count >> (8 * byte)) & 0xff);
  }
  merged.raw() = rocksdb::WriteBatch(std::move(rep));
  return &merged;
}

status committer::write_group(write_batch& target, std::size_t batches,
                              std::size_t operations, fault injected, bool sync,
                              std::uint64_t& epoch, std::uint64_t& position,
                              bool& landed) {
  if (injected == fault::fail_before_write) {
    return make_error(errc::storage_error, "injected fault: group not written");
  }
  // In a cluster every group write carries the epoch this node holds the
  // shard at and the next log position, and none is written once the
  // lease's deadline has passed (persistence/README.md, invariant 11).
  const auto& fence = store_.guard();
  epoch = 0;
  position = 0;
  landed = false;
  if (fence) {
    epoch = fence->epoch();
    if (epoch == 0 || !fence->open()) {
      (void)store_.hold();  // makes the store not ready: it reports why
      return store_.unavailable();
    }
    position = store_.log_position() + 1;
    target.put_position(epoch, position);
  }
  DURIN_TEST_KILL_POINT("committer.before_write");
  status written = store_.write(target, sync);  // durable when ok and sync
  DURIN_TEST_KILL_POINT("committer.after_write");
  landed = static_cast<bool>(written);
  bool fence_closed = false;
  if (fence && written) {
    store_.advanced_to(position, epoch);
    fence_closed = !fence->open() || fence->epoch() != epoch;
    if (fence_closed) {
      // The deadline passed or a hand-over closed the fence during the
      // write: it landed, but an answer now would come from a node that no
      // longer holds the shard.
      written = make_error(errc::storage_error,
                           "the shard's lease ended during the write; it "
                           "may or may not count, retry with the same key");
    }
  }
  if (landed) {
    std::lock_guard lock(mutex_);
    stats_.group_writes += 1;
    stats_.batches += batches;
    stats_.operations += operations;
    stats_.landed_as_fence_closed += fence_closed ? 1 : 0;
  }
  if (written && injected == fault::fail_after_write) {
    written = make_error(errc::storage_error,
                         "injected fault: group written, reported failed");
  }
  return written;
}

}  // namespace durin::persistence
