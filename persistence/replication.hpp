// A shard's replication as the committer sees it: every group write made
// under a fence (persistence/fence.hpp) goes to the shard's in-sync
// backups after it landed here, and its callers are answered only once
// every one of them has it durably (cluster/replication.hpp implements
// it), and it is synced here. A store without one answers its writes as
// soon as they are synced.
//
// Thread-safety: ship is called by the committer thread only; `done` runs
// on another thread, once, in log order.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "durin/error.hpp"

namespace durin::persistence {

class replication {
 public:
  using done_fn = std::function<void(const status&)>;
  virtual ~replication() = default;

  // The group write at (epoch, position), `data` its WriteBatch
  // representation, landed locally: `done` gets ok once every in-sync
  // backup wrote it (or was dropped from the in-sync set, in etcd, for not
  // answering), storage-error when that cannot be known (an indefinite
  // outcome: the write may count). Blocks while the window of writes in
  // flight is full, which holds the committer back (CAF has no
  // backpressure of its own).
  virtual void ship(std::uint64_t epoch, std::uint64_t position,
                    std::string data, done_fn done) = 0;

  // The write shipped at (epoch, position) failed to become durable here
  // (its fsync failed: the committer ships a write before its own fsync
  // returns, so that the two overlap). This copy may lack it after the
  // store reopens while backups have it, so the position must never be
  // written again at this epoch: the shard is given up at `epoch`.
  virtual void lost(std::uint64_t epoch, std::uint64_t position) = 0;

  // True when every write shipped has been answered: a primary handing
  // its shard over waits for it, so that the target has every write this
  // copy has and the two copies stay one log (no re-copy).
  virtual bool settled() const { return true; }
};

}  // namespace durin::persistence
