// The right of this node to use one shard's store: the epoch at which it
// holds the shard's lease, until a deadline on the steady clock. In a
// cluster (cluster/membership.hpp) the membership grants it once the
// shard's lease key is created in etcd at that epoch, extends it after each
// keepalive that etcd answered, and closes it when the lease is lost; the
// deadline ends before etcd could expire the lease, so a node paused or cut
// off stops by itself before another node can take over. The store checks
// it before every read and write, the committer around every group write
// (persistence/README.md, invariant 11). A store without a fence (a node
// outside a cluster) is always open.
//
// Thread-safety: every method may be called from any thread. A check that
// races a grant or a close may see the fence closed a moment early, never
// open a moment late. The epoch and deadline are sequentially consistent:
// a close followed by `writing()` sees every group write that saw the
// fence open (the committer's count comes before its check).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "persistence/replication.hpp"

namespace durin::persistence {

class fence {
 public:
  using clock = std::chrono::steady_clock;

  // Opens the fence at `epoch` (> 0) until `deadline`, then tells the
  // listener (the store reopens at once instead of at its next backoff).
  void grant(std::uint64_t epoch, clock::time_point deadline) {
    deadline_ns_.store(0);
    epoch_.store(epoch);
    deadline_ns_.store(ticks(deadline));
    tell();
  }

  // A keepalive came back: the current epoch's deadline moves. No-op when
  // the fence was closed or granted again at another epoch meanwhile.
  void extend(std::uint64_t epoch, clock::time_point deadline) {
    if (epoch_.load() == epoch) {
      deadline_ns_.store(ticks(deadline));
    }
  }

  // Closes the fence, then tells the listener (the store stops being
  // ready at once, not at its next read: a grant later must find it not
  // ready, so that it reopens and its runs are recovered).
  void close() {
    epoch_.store(0);
    deadline_ns_.store(0);
    tell();
  }

  bool open(clock::time_point now = clock::now()) const {
    return epoch_.load() != 0 && ticks(now) < deadline_ns_.load();
  }

  // The epoch granted last; 0 when closed. Open or not by its deadline.
  std::uint64_t epoch() const { return epoch_.load(); }

  clock::time_point deadline() const {
    return clock::time_point(clock::duration(deadline_ns_.load()));
  }

  // The committer counts a group write from before it checks the fence
  // until the write is shipped (or failed): a primary handing its shard
  // over closes the fence, then waits for `writing()` to be false and its
  // shipping settled, so that every write that landed here reaches the
  // target before it promotes (one log, no re-copy).
  void begin_write() { writing_.fetch_add(1); }
  void end_write() { writing_.fetch_sub(1); }
  bool writing() const { return writing_.load() != 0; }

  // Whether the store behind the fence is open and takes writes now: set
  // by the store once it reopened under the grant, cleared by a fault or
  // a close. A shard is served where its fence is open and its store
  // ready; between a grant and the reopen, it is not yet.
  bool ready() const { return ready_.load(std::memory_order_acquire); }
  void set_ready(bool ready) { ready_.store(ready, std::memory_order_release); }
  bool serving(clock::time_point now = clock::now()) const {
    return ready() && open(now);
  }

  // Called after every grant and close; set by the store that the fence
  // guards (and unset, null, as it goes). It must not call the fence.
  void on_change(std::function<void()> listener) {
    std::lock_guard lock(mutex_);
    listener_ = std::move(listener);
  }

  // In a cluster with backups: where the committer ships every group write
  // made under this fence. Set once, before the first grant.
  void set_replication(std::shared_ptr<persistence::replication> shipping) {
    replication_ = std::move(shipping);
  }
  persistence::replication* replication() const { return replication_.get(); }

 private:
  // Under the mutex, so that a store that unsets its listener as it is
  // destroyed is never called after.
  void tell() {
    std::lock_guard lock(mutex_);
    if (listener_) {
      listener_();
    }
  }

  static std::int64_t ticks(clock::time_point at) {
    return at.time_since_epoch().count();
  }

  std::atomic<std::uint64_t> epoch_{0};
  std::atomic<std::int64_t> deadline_ns_{0};
  std::atomic<bool> ready_{false};
  std::atomic<int> writing_{0};
  std::mutex mutex_;
  std::function<void()> listener_;
  std::shared_ptr<persistence::replication> replication_;
};

}  // namespace durin::persistence
