#include "cluster/replication.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <condition_variable>
#include <cstdio>
#include <filesystem>

#include "base/latency_histogram.hpp"
#include "cluster/detail/job_pool.hpp"
#include "cluster/detail/overdue.hpp"
#include "cluster/detail/peer_router.hpp"
#include "cluster/detail/peer_wire.hpp"
#include "cluster/etcd.hpp"
#include "cluster/peer_messages.hpp"
#include "cluster/shard_move.hpp"
#include "persistence/test_points.hpp"

namespace durin::cluster {

namespace {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

constexpr auto control_interval = std::chrono::milliseconds(100);
// A backup that joined and is still not in step after this long joins
// again (the primary may have dropped it meanwhile).
constexpr auto rejoin_after = std::chrono::seconds(3);
constexpr auto retry_pause = std::chrono::milliseconds(20);
constexpr auto peer_timeout = std::chrono::seconds(30);

// How a change of a shard's in-sync set in etcd went (sent as an int32
// between the swapping thread and the primary actor).
enum class swap_outcome : std::int32_t {
  done,
  superseded,  // the config moved on: another epoch or owner
  failed,      // etcd did not answer: try again
  refused,     // the change declined: the node is no copy of the shard
};

// One group write as the log keeps it.
struct log_entry {
  std::uint64_t epoch = 0;
  std::uint64_t position = 0;
  std::string data;
};

// The recent writes of one shard, on its primary and on its backups (for
// after a promotion): contiguous positions, oldest trimmed first. `base_*`
// name the write just before the first one kept.
struct shard_log {
  std::mutex mutex;
  std::deque<log_entry> entries;
  std::size_t bytes = 0;
  std::uint64_t base_epoch = 0;
  std::uint64_t base_position = 0;

  // REQUIRES: mutex held.
  void append(std::uint64_t epoch, std::uint64_t position, std::string data,
              std::size_t bytes_max) {
    if (!entries.empty() && position != entries.back().position + 1) {
      // Not contiguous (a re-copy, a write that was never shipped): the
      // log starts again here.
      entries.clear();
      bytes = 0;
    }
    if (entries.empty()) {
      base_position = position - 1;
      base_epoch = 0;  // unknown: a join at the base re-copies
    }
    bytes += data.size();
    entries.push_back({epoch, position, std::move(data)});
    while (bytes > bytes_max && entries.size() > 1) {
      bytes -= entries.front().data.size();
      base_epoch = entries.front().epoch;
      base_position = entries.front().position;
      entries.pop_front();
    }
  }

  // Whether a copy whose last write is (epoch, position) holds exactly the
  // writes this shard holds up to that position, so that it can follow by
  // the writes after it: the log holds that very write, or the copy's last
  // write is the store's last, (last_epoch, last_position) (one writer per
  // epoch), or neither has any; and the log holds nothing past it the copy
  // would miss. REQUIRES: mutex held.
  bool continues(std::uint64_t epoch, std::uint64_t position,
                 std::uint64_t last_epoch, std::uint64_t last_position) const {
    if (holds(epoch, position)) {
      return true;
    }
    const bool same_last = (position == last_position && epoch == last_epoch) ||
                           (position == 0 && last_position == 0);
    return same_last &&
           (entries.empty() || entries.back().position <= position);
  }

 private:
  bool holds(std::uint64_t epoch, std::uint64_t position) const {
    if (entries.empty()) {
      return false;
    }
    if (position == base_position) {
      // An empty copy precedes every log that starts at the first write.
      return position == 0 || (base_epoch != 0 && base_epoch == epoch);
    }
    if (position < base_position || position > entries.back().position) {
      return false;
    }
    return entries[position - base_position - 1].epoch == epoch;
  }
};

// Writes shipped and not yet answered, in log order.
struct shard_waits {
  struct shipped {
    std::uint64_t position = 0;
    clock_type::time_point at;  // handed to the primary actor
    persistence::replication::done_fn done;
  };
  std::mutex mutex;
  std::condition_variable room;
  std::deque<shipped> queue;
};

}  // namespace

struct replicator::impl {
  membership& members;
  store_of stores;
  shard_mover& mover;
  caf::actor_system& system;
  replication_options options;
  layout keys;
  std::optional<etcd_client> etcd;  // swaps of the in-sync set

  std::vector<std::unique_ptr<shard_log>> logs;
  std::vector<std::unique_ptr<shard_waits>> waits;
  caf::actor primary_actor;
  std::vector<caf::actor> appliers;
  std::mutex actors_mutex;

  std::atomic<bool> stopping{false};
  std::thread control;
  std::mutex control_mutex;
  std::condition_variable control_wake;
  // One thread each, as both block: etcd compare-and-swaps, and re-copies
  // of a checkpoint. What is left at a stop is dropped.
  detail::job_pool swaps{1, false};
  detail::job_pool copies{1, false};

  // The control thread's view, per shard.
  struct follow_state {
    std::uint64_t joined_epoch = 0;
    clock_type::time_point joined_at{};
    std::int64_t seen_revision = -1;
    bool copying = false;
  };
  std::vector<follow_state> follows;
  std::mutex copying_mutex;  // guards follow_state::copying

  std::atomic<std::uint64_t> shipped{0}, applied{0}, synced{0}, answered{0},
      dropped{0}, added{0}, recopies{0};
  // From a write's ship to every in-sync backup having it (primary), and
  // a backup's fsync of the writes it applied.
  latency_histogram round_trip, backup_sync;

  impl(membership& m, store_of s, shard_mover& mv, caf::actor_system& sys,
       replication_options o)
      : members(m),
        stores(std::move(s)),
        mover(mv),
        system(sys),
        options(o),
        keys(m.options().cluster) {
    const auto shards = members.config().shards;
    for (std::uint32_t shard = 0; shard < shards; ++shard) {
      logs.push_back(std::make_unique<shard_log>());
      waits.push_back(std::make_unique<shard_waits>());
    }
    appliers.resize(shards);
    follows.resize(shards);
    if (auto made = etcd_client::make(members.options().etcd)) {
      etcd.emplace(std::move(*made));
    }
  }

  // Answers the waiting writes of `shard` up to `position` with `outcome`.
  void finish(std::uint32_t shard, std::uint64_t position,
              const status& outcome) {
    std::vector<persistence::replication::done_fn> done;
    {
      const auto now = clock_type::now();
      auto& waiting = *waits[shard];
      std::lock_guard lock(waiting.mutex);
      while (!waiting.queue.empty() &&
             waiting.queue.front().position <= position) {
        auto& front = waiting.queue.front();
        if (outcome) {
          round_trip.observe(now - front.at);
        }
        done.push_back(std::move(front.done));
        waiting.queue.pop_front();
      }
      waiting.room.notify_all();
    }
    for (auto& answer : done) {
      answer(outcome);
    }
  }

  void fail_all(std::uint32_t shard, const status& outcome) {
    finish(shard, UINT64_MAX, outcome);
  }

  // The in-sync set of `shard`, changed by `change` on its config in etcd
  // while that config is still at `epoch` with this node its owner.
  // `change` answers false when the node is no copy of the shard any more.
  swap_outcome swap_in_sync(std::uint32_t shard, std::uint64_t epoch,
                            const std::function<bool(shard_config&)>& change) {
    if (!etcd) {
      return swap_outcome::failed;
    }
    for (int attempt = 0; attempt < 5; ++attempt) {
      auto read = etcd->range(keys.shard_config(shard));
      if (!read || read->kvs.empty()) {
        return swap_outcome::failed;
      }
      auto config = decode_shard(read->kvs.front().value);
      if (!config) {
        return swap_outcome::failed;
      }
      if (config->epoch != epoch ||
          config->owner != members.options().node_id) {
        return swap_outcome::superseded;
      }
      shard_config next = *config;
      if (!change(next)) {
        return swap_outcome::refused;
      }
      compare same;
      same.key = keys.shard_config(shard);
      same.what = compare::target::mod;
      same.number = read->kvs.front().mod_revision;
      request_op write;
      write.key = same.key;
      write.value = encode(next);
      auto done = etcd->txn({same}, {write});
      if (!done) {
        return swap_outcome::failed;
      }
      if (done->succeeded) {
        return swap_outcome::done;
      }
    }
    return swap_outcome::failed;
  }
};

namespace {

using ship_atom = caf::atom_constant<caf::atom("rship")>;
using config_atom = caf::atom_constant<caf::atom("rconfig")>;
using resend_atom = caf::atom_constant<caf::atom("rresend")>;
using swapped_atom = caf::atom_constant<caf::atom("rswapped")>;
using connected_atom = caf::atom_constant<caf::atom("rconn")>;
using overdue_atom = caf::atom_constant<caf::atom("roverdue")>;

// The committer's side of one shard.
class shard_shipping final : public persistence::replication {
 public:
  shard_shipping(std::shared_ptr<replicator::impl> owner, std::uint32_t shard)
      : keep_(std::move(owner)), owner_(*keep_), shard_(shard) {}

  void ship(std::uint64_t epoch, std::uint64_t position, std::string data,
            done_fn done) override {
    auto& waiting = *owner_.waits[shard_];
    {
      std::unique_lock lock(waiting.mutex);
      waiting.room.wait(lock, [&] {
        return owner_.stopping.load() ||
               waiting.queue.size() < owner_.options.window;
      });
      if (owner_.stopping.load()) {
        lock.unlock();
        done(make_error(errc::shutting_down,
                        "the node is stopping; the write may count"));
        return;
      }
      waiting.queue.push_back({position, clock_type::now(), std::move(done)});
    }
    {
      auto& log = *owner_.logs[shard_];
      std::lock_guard lock(log.mutex);
      log.append(epoch, position, data, owner_.options.log_bytes_max);
    }
    DURIN_TEST_KILL_POINT("replication.before_ship");
    caf::actor primary;
    {
      std::lock_guard lock(owner_.actors_mutex);
      primary = owner_.primary_actor;
    }
    if (primary) {
      caf::anon_send(primary, ship_atom::value, shard_, epoch, position,
                     std::move(data));
    } else {
      owner_.fail_all(shard_, make_error(errc::shutting_down,
                                         "the node is stopping; the write "
                                         "may count"));
    }
  }

  void lost(std::uint64_t epoch, std::uint64_t /*position*/) override {
    {
      // A backup that joins must not be told it continues this log: the
      // store may reopen without the lost write, and the next write would
      // take its position. An empty log makes such a copy re-copy.
      auto& log = *owner_.logs[shard_];
      std::lock_guard lock(log.mutex);
      log.entries.clear();
      log.bytes = 0;
      log.base_epoch = 0;
      log.base_position = 0;
    }
    owner_.members.resign(shard_, epoch);
  }

  bool settled() const override {
    auto& waiting = *owner_.waits[shard_];
    std::lock_guard lock(waiting.mutex);
    return waiting.queue.empty();
  }

 private:
  std::shared_ptr<replicator::impl> keep_;
  replicator::impl& owner_;
  std::uint32_t shard_;
};

// ---- the primary's side -----------------------------------------------------

struct target_state {
  std::int64_t lease = 0;
  caf::actor handle;
  bool streaming = false;  // sent every write after `acked`
  bool waited = false;     // its acks hold the writes' answers
  bool adding = false;     // a swap into the in-sync set is under way
  bool dropping = false;   // a swap out of it is under way
  std::uint64_t acked = 0;
  // The writes sent to `handle` and not answered yet: position -> when it
  // is overdue (a position sent again is in twice).
  std::multimap<std::uint64_t, clock_type::time_point> unanswered;
};

struct primary_shard {
  std::uint64_t epoch = 0;
  std::uint64_t last = 0;  // the last position shipped
  bool superseded = false;
  std::map<std::string, target_state> targets;
};

struct primary_state {
  std::map<std::uint32_t, primary_shard> shards;
  bool overdue_armed = false;           // an overdue check is on its way
  std::set<caf::actor_addr> monitored;  // the backups' routers
  static inline const char* name = "durin.replication-primary";
};

// A broker on the middleman's multiplexer thread, with the peer router
// (cluster/peers.cpp): a backup's answer reaches it, and its writes reach
// the wire, without waking a scheduler thread. Its handlers never block:
// etcd swaps run on `swaps`, re-copies on `copies`.
using primary_actor = caf::io::stateful_broker<primary_state>;

void complete(primary_actor* self, replicator::impl* owner,
              std::uint32_t shard) {
  auto& state = self->state.shards[shard];
  if (state.superseded) {
    return;
  }
  // Every write up to `through` is on every waited backup.
  std::uint64_t through = state.last;
  for (const auto& [node, target] : state.targets) {
    if (target.waited) {
      through = std::min(through, target.acked);
    }
  }
  owner->finish(shard, through, {});
}

void supersede(primary_actor* self, replicator::impl* owner,
               std::uint32_t shard) {
  auto& state = self->state.shards[shard];
  state.superseded = true;
  owner->fail_all(shard, make_error(errc::storage_error,
                                    "the shard has a newer primary; the "
                                    "write may or may not count, retry with "
                                    "the same key"));
}

void send_entry(primary_actor* self, replicator::impl* owner,
                std::uint32_t shard, const std::string& node,
                const log_entry& entry);

// Takes `node` out of the in-sync set (when it is in it), then forgets it:
// it joins again.
void drop(primary_actor* self, replicator::impl* owner, std::uint32_t shard,
          const std::string& node) {
  auto& state = self->state.shards[shard];
  auto found = state.targets.find(node);
  if (found == state.targets.end()) {
    return;
  }
  auto& target = found->second;
  target.streaming = false;
  // Its writes are forgotten (no longer overdue): it joins again, and that
  // join resends what it lacks.
  target.unanswered.clear();
  if (!target.waited) {
    state.targets.erase(found);
    return;
  }
  const auto config = owner->members.config_of(shard);
  if (config.epoch == state.epoch && !config.is_backup(node) &&
      !config.in_step(node, target.lease)) {
    // Its copy was taken out of the config (drain --remove) before this
    // actor heard: nothing to swap, and no write waits for it.
    state.targets.erase(found);
    complete(self, owner, shard);
    return;
  }
  if (target.dropping) {
    return;
  }
  target.dropping = true;
  const auto epoch = state.epoch;
  auto me = caf::actor_cast<caf::actor>(self);
  owner->swaps.post([owner, me, shard, epoch, node] {
    const auto outcome =
        owner->swap_in_sync(shard, epoch, [&node](shard_config& config) {
          // Already out (this node's view of the config was behind): no
          // swap, and nothing is dropped.
          return std::erase_if(config.in_sync, [&](const auto& entry) {
                   return entry.node == node;
                 }) != 0;
        });
    caf::anon_send(me, swapped_atom::value, shard, epoch, node, false,
                   static_cast<std::int32_t>(outcome));
  });
}

// A backup that caught up with every write shipped is added to the
// in-sync set; it is waited for from before the swap. A backup that
// restarted joins with a new node lease while the set still names its old
// one: it is waited for still, and the swap puts its new lease in the set
// (without it, it could never be promoted, and its owner could take the
// shard back with a lost disk).
void maybe_add(primary_actor* self, replicator::impl* owner,
               std::uint32_t shard, const std::string& node) {
  auto& state = self->state.shards[shard];
  auto& target = state.targets[node];
  if (target.adding || !target.streaming || target.acked < state.last) {
    return;
  }
  if (target.waited &&
      owner->members.config_of(shard).in_step(node, target.lease)) {
    return;
  }
  target.adding = true;
  target.waited = true;
  const auto epoch = state.epoch;
  const auto lease = target.lease;
  auto me = caf::actor_cast<caf::actor>(self);
  owner->swaps.post([owner, me, shard, epoch, node, lease] {
    const auto outcome =
        owner->swap_in_sync(shard, epoch, [&node, lease](shard_config& config) {
          if (!config.is_backup(node)) {
            return false;  // its copy was taken out (drain --remove)
          }
          std::erase_if(config.in_sync,
                        [&](const auto& entry) { return entry.node == node; });
          config.in_sync.push_back({node, lease});
          return true;
        });
    caf::anon_send(me, swapped_atom::value, shard, epoch, node, true,
                   static_cast<std::int32_t>(outcome));
  });
}

void on_answer(primary_actor* self, replicator::impl* owner,
               std::uint32_t shard, const std::string& node,
               std::uint64_t position, std::uint64_t code, std::uint64_t at) {
  auto& state = self->state.shards[shard];
  auto found = state.targets.find(node);
  if (found == state.targets.end() || !found->second.streaming) {
    return;
  }
  auto& target = found->second;
  switch (static_cast<replica_code>(code)) {
    case replica_code::ok:
      target.acked = std::max(target.acked, position);
      maybe_add(self, owner, shard, node);
      complete(self, owner, shard);
      return;
    case replica_code::retry:
      self->delayed_send(self, retry_pause, resend_atom::value, shard, node,
                         position);
      return;
    case replica_code::stale:
      supersede(self, owner, shard);
      return;
    case replica_code::gap: {
      // It has fewer writes than it acknowledged to us: resent from its
      // position while the log holds them, else it re-copies.
      auto& log = *owner->logs[shard];
      std::vector<log_entry> again;
      {
        std::lock_guard lock(log.mutex);
        if (!log.entries.empty() && at >= log.base_position &&
            at < log.entries.back().position) {
          for (auto index = at - log.base_position; index < log.entries.size();
               ++index) {
            again.push_back(log.entries[index]);
          }
        }
      }
      if (again.empty() || target.acked > at) {
        drop(self, owner, shard, node);
        return;
      }
      for (const auto& entry : again) {
        send_entry(self, owner, shard, node, entry);
      }
      return;
    }
    default:
      drop(self, owner, shard, node);
      return;
  }
}

void send_entry(primary_actor* self, replicator::impl* owner,
                std::uint32_t shard, const std::string& node,
                const log_entry& entry) {
  auto& target = self->state.shards[shard].targets[node];
  if (!target.handle) {
    return;
  }
  owner->shipped.fetch_add(1);
  // Sent, not requested (cluster/detail/overdue.hpp): the backup answers
  // with a `replicated` message. The tenure's epoch fences the sender; the
  // write's own epoch (older for a catch-up from the log) is what the
  // backup records with it.
  self->send(target.handle, replicate_atom::value, shard,
             self->state.shards[shard].epoch, entry.epoch, entry.position,
             entry.data, node);
  target.unanswered.emplace(entry.position,
                            clock_type::now() + owner->options.timeout);
  detail::arm_overdue_check(self, self->state.overdue_armed,
                            owner->options.timeout, overdue_atom::value);
}

// Sends the log's writes after `after` to `node`.
void stream_from(primary_actor* self, replicator::impl* owner,
                 std::uint32_t shard, const std::string& node,
                 std::uint64_t after) {
  std::vector<log_entry> pending;
  {
    auto& log = *owner->logs[shard];
    std::lock_guard lock(log.mutex);
    for (const auto& entry : log.entries) {
      if (entry.position > after) {
        pending.push_back(entry);
      }
    }
  }
  for (const auto& entry : pending) {
    send_entry(self, owner, shard, node, entry);
  }
  maybe_add(self, owner, shard, node);
}

void connect_target(primary_actor* self, replicator::impl* owner,
                    std::uint32_t shard, const std::string& node,
                    std::uint64_t after) {
  std::string host;
  std::uint16_t port = 0;
  if (!detail::split_address(owner->members.peer_of(node), host, port)) {
    drop(self, owner, shard, node);
    return;
  }
  auto mm = self->system().middleman().actor_handle();
  self->request(mm, std::chrono::seconds(5), caf::connect_atom::value, host,
                port)
      .then(
          [self, owner, shard, node, after](const caf::node_id&,
                                            caf::strong_actor_ptr& ptr,
                                            const std::set<std::string>&) {
            auto& targets = self->state.shards[shard].targets;
            auto found = targets.find(node);
            if (found == targets.end()) {
              return;
            }
            if (!ptr) {
              drop(self, owner, shard, node);
              return;
            }
            found->second.handle = caf::actor_cast<caf::actor>(ptr);
            // Its connection's loss drops it at once (down handler), not
            // only when its writes are overdue.
            if (self->state.monitored.insert(found->second.handle.address())
                    .second) {
              self->monitor(found->second.handle);
            }
            found->second.streaming = true;
            stream_from(self, owner, shard, node, after);
          },
          [self, owner, shard, node](caf::error&) {
            // Never forgotten while the in-sync set names it: dropped.
            drop(self, owner, shard, node);
          });
}

// Drops every target whose writes are overdue; true while any write is
// still unanswered (so the check goes on).
bool drop_overdue(primary_actor* self, replicator::impl* owner) {
  const auto now = clock_type::now();
  bool waiting = false;
  for (auto& [shard, state] : self->state.shards) {
    std::vector<std::string> overdue;
    for (auto& [node, target] : state.targets) {
      for (const auto& [position, due] : target.unanswered) {
        if (due <= now) {
          overdue.push_back(node);
          break;
        }
      }
      waiting = waiting || !target.unanswered.empty();
    }
    for (const auto& node : overdue) {
      drop(self, owner, shard, node);
    }
  }
  return waiting;
}

// A backup's answer to the write at `position` (cumulative when ok); one
// sent by an earlier process of that node is ignored.
void on_replicated(primary_actor* self, replicator::impl* owner,
                   std::uint32_t shard, const std::string& node,
                   std::uint64_t position, std::uint64_t code,
                   std::uint64_t at) {
  auto& targets = self->state.shards[shard].targets;
  auto found = targets.find(node);
  const auto& from = self->current_sender();
  if (found != targets.end() && found->second.handle && from &&
      from->node() != found->second.handle.node()) {
    // From an earlier process of that node, which joined again: its
    // new copy may lack what the old one held.
    return;
  }
  if (found != targets.end()) {
    auto& unanswered = found->second.unanswered;
    if (static_cast<replica_code>(code) == replica_code::ok) {
      // Cumulative: the backup holds every position up to this one.
      unanswered.erase(unanswered.begin(), unanswered.upper_bound(position));
    } else if (auto sent = unanswered.find(position);
               sent != unanswered.end()) {
      unanswered.erase(sent);
    }
  }
  on_answer(self, owner, shard, node, position, code, at);
}

// The committer's write at `position`: sent to every backup that streams.
void on_ship(primary_actor* self, replicator::impl* owner, std::uint32_t shard,
             std::uint64_t epoch, std::uint64_t position,
             const std::string& data) {
  auto& state = self->state.shards[shard];
  if (state.epoch != epoch) {
    // A new tenure: backups join it afresh.
    state = primary_shard{};
    state.epoch = epoch;
  }
  if (state.superseded) {
    supersede(self, owner, shard);
    return;
  }
  state.last = position;
  const log_entry entry{epoch, position, data};
  for (auto& [node, target] : state.targets) {
    if (target.streaming) {
      send_entry(self, owner, shard, node, entry);
    }
  }
  complete(self, owner, shard);
}

// A backup asks to follow from (epoch, position): streamed from there when
// the log holds that very write, else told to re-copy.
caf::result<std::uint64_t, std::uint64_t> on_join(
    primary_actor* self, replicator::impl* owner, std::uint32_t shard,
    const std::string& node, std::int64_t lease, std::uint64_t epoch,
    std::uint64_t position) {
  auto* store = owner->stores(shard);
  const auto at = owner->members.locate(shard);
  const auto config = owner->members.config_of(shard);
  if (store == nullptr || at.at != route::where::here ||
      !config.is_backup(node)) {
    return {static_cast<std::uint64_t>(replica_code::not_primary),
            std::uint64_t{0}};
  }
  auto& state = self->state.shards[shard];
  if (state.epoch != at.epoch) {
    state = primary_shard{};
    state.epoch = at.epoch;
    state.last = store->log_position();
  }
  bool continues = false;
  {
    auto& log = *owner->logs[shard];
    std::lock_guard lock(log.mutex);
    continues = log.continues(epoch, position, store->last_epoch(),
                              store->log_position());
  }
  if (!continues) {
    return {static_cast<std::uint64_t>(replica_code::recopy),
            store->log_position()};
  }
  auto& target = state.targets[node];
  const bool waited = target.waited;
  target = target_state{};
  target.lease = lease;
  target.acked = position;
  target.waited = waited;  // still in the set until a swap says not
  connect_target(self, owner, shard, node, position);
  return {static_cast<std::uint64_t>(replica_code::ok), position};
}

// The shard's config changed in etcd: a newer epoch supersedes this tenure;
// otherwise the in-sync set decides which targets are waited for.
void on_config(primary_actor* self, replicator::impl* owner,
               std::uint32_t shard) {
  auto& state = self->state.shards[shard];
  const auto config = owner->members.config_of(shard);
  if (state.epoch != 0 && config.epoch != state.epoch) {
    if (config.epoch > state.epoch) {
      supersede(self, owner, shard);
    }
    return;
  }
  for (auto it = state.targets.begin(); it != state.targets.end();) {
    auto& [node, target] = *it;
    if (!config.is_backup(node) && !target.waited) {
      it = state.targets.erase(it);
      continue;
    }
    if (!target.adding && !target.dropping) {
      target.waited = config.in_step(node, target.lease);
    }
    ++it;
  }
  complete(self, owner, shard);
}

// A backup missed the write at `position`: sent again from the log, or the
// backup is dropped when the log no longer holds it.
void on_resend(primary_actor* self, replicator::impl* owner,
               std::uint32_t shard, const std::string& node,
               std::uint64_t position) {
  auto& log = *owner->logs[shard];
  std::optional<log_entry> entry;
  {
    std::lock_guard lock(log.mutex);
    if (!log.entries.empty() && position > log.base_position &&
        position <= log.entries.back().position) {
      entry = log.entries[position - log.base_position - 1];
    }
  }
  if (!entry) {
    drop(self, owner, shard, node);
    return;
  }
  send_entry(self, owner, shard, node, *entry);
}

// The outcome of adding `node` to the in-sync set (adding) or dropping it
// from it, by a CAS on the shard's config at `epoch`.
void on_swapped(primary_actor* self, replicator::impl* owner,
                std::uint32_t shard, std::uint64_t epoch,
                const std::string& node, bool adding, std::int32_t code) {
  const auto outcome = static_cast<swap_outcome>(code);
  auto& state = self->state.shards[shard];
  if (state.epoch != epoch) {
    return;
  }
  if (outcome == swap_outcome::superseded) {
    supersede(self, owner, shard);
    return;
  }
  auto found = state.targets.find(node);
  if (found == state.targets.end()) {
    return;
  }
  auto& target = found->second;
  if (adding) {
    target.adding = false;
    if (outcome == swap_outcome::done) {
      owner->added.fetch_add(1);
    } else if (outcome == swap_outcome::refused) {
      state.targets.erase(found);  // no copy: nothing more is sent
    } else {
      target.waited = false;  // tried again at its next answer
    }
    complete(self, owner, shard);
    return;
  }
  target.dropping = false;
  if (outcome == swap_outcome::refused) {
    state.targets.erase(found);  // not in the set: nothing waits for it
    complete(self, owner, shard);
    return;
  }
  if (outcome == swap_outcome::done) {
    owner->dropped.fetch_add(1);
    std::fprintf(stderr,
                 "durin: shard %u goes on without backup %s (it did "
                 "not answer)\n",
                 shard, node.c_str());
    state.targets.erase(found);
    complete(self, owner, shard);
    return;
  }
  // etcd did not answer: the writes wait, and the drop is tried
  // again (the lease's deadline bounds the wait).
  drop(self, owner, shard, node);
}

// A backup's applier is gone (its process, or its connection): dropped
// from every shard it followed.
void on_down(primary_actor* self, replicator::impl* owner,
             const caf::down_msg& down) {
  self->state.monitored.erase(down.source);
  for (auto& [shard, state] : self->state.shards) {
    std::vector<std::string> gone;
    for (const auto& [node, target] : state.targets) {
      if (target.handle && target.handle.address() == down.source) {
        gone.push_back(node);
      }
    }
    for (const auto& node : gone) {
      drop(self, owner, shard, node);
    }
  }
}

caf::behavior primary_behavior(primary_actor* self, replicator::impl* owner) {
  self->set_down_handler(
      [self, owner](caf::down_msg& down) { on_down(self, owner, down); });
  return {
      [self, owner](replicated_atom, std::uint32_t shard,
                    const std::string& node, std::uint64_t position,
                    std::uint64_t code, std::uint64_t at) {
        on_replicated(self, owner, shard, node, position, code, at);
      },
      [self, owner](overdue_atom atom) {
        detail::run_overdue_check(self, self->state.overdue_armed,
                                  owner->options.timeout, atom,
                                  [&] { return drop_overdue(self, owner); });
      },
      [self, owner](ship_atom, std::uint32_t shard, std::uint64_t epoch,
                    std::uint64_t position, const std::string& data) {
        on_ship(self, owner, shard, epoch, position, data);
      },
      [self, owner](
          join_atom, std::uint32_t shard, const std::string& node,
          std::int64_t lease, std::uint64_t epoch,
          std::uint64_t position) -> caf::result<std::uint64_t, std::uint64_t> {
        return on_join(self, owner, shard, node, lease, epoch, position);
      },
      [self, owner](config_atom, std::uint32_t shard) {
        on_config(self, owner, shard);
      },
      [self, owner](resend_atom, std::uint32_t shard, const std::string& node,
                    std::uint64_t position) {
        on_resend(self, owner, shard, node, position);
      },
      [self, owner](swapped_atom, std::uint32_t shard, std::uint64_t epoch,
                    const std::string& node, bool adding, std::int32_t code) {
        on_swapped(self, owner, shard, epoch, node, adding, code);
      },
  };
}

// ---- the backup's side ------------------------------------------------------

// A backup's writes are answered once durable, and one fsync serves every
// write that arrived meanwhile: each is written unsynced as it comes, and
// a flush message sent behind it (so behind every write already queued)
// syncs them all and answers them (one cumulative answer a primary). A write
// already held (sent again) that may still be unsynced is answered with that
// flush too.
using flush_atom = caf::atom_constant<caf::atom("replflush")>;

struct applier_state {
  // An answer to send once the writes before it are synced.
  struct waiting {
    caf::actor primary;
    std::string node;
    std::uint64_t sent = 0;      // the position the primary sent
    std::uint64_t position = 0;  // the position held once synced
  };
  std::vector<waiting> unsynced;
  bool flush_sent = false;
  static inline const char* name = "durin.replication-applier";
};

using applier_actor = caf::stateful_actor<applier_state>;

// Answers a replicate message of the primary that sent it (from `self`,
// whose node tells the primary which process of the backup answered).
void answer_write(applier_actor* self, const caf::actor& primary,
                  std::uint32_t shard, const std::string& node,
                  std::uint64_t sent, replica_code code, std::uint64_t at) {
  if (primary) {
    self->send(primary, replicated_atom::value, shard, node, sent,
               static_cast<std::uint64_t>(code), at);
  }
}

caf::behavior applier_behavior(applier_actor* self, replicator::impl* owner,
                               std::uint32_t shard) {
  // The answer once the writes before it are synced.
  auto after_sync = [self](caf::actor primary, std::string node,
                           std::uint64_t sent, std::uint64_t position) {
    self->state.unsynced.push_back(
        {std::move(primary), std::move(node), sent, position});
    if (!self->state.flush_sent) {
      self->state.flush_sent = true;
      self->send(self, flush_atom::value);
    }
  };
  return {
      [self, owner, shard, after_sync](
          replicate_atom, std::uint32_t, std::uint64_t epoch,
          std::uint64_t written_at, std::uint64_t position, std::string& data,
          std::string& node) {
        auto primary = caf::actor_cast<caf::actor>(self->current_sender());
        auto reply = [&](replica_code code, std::uint64_t at) {
          answer_write(self, primary, shard, node, position, code, at);
        };
        auto* store = owner->stores(shard);
        const auto config = owner->members.config_of(shard);
        if (store == nullptr) {
          return reply(replica_code::retry, 0);
        }
        if (config.epoch > epoch) {
          return reply(replica_code::stale, 0);
        }
        if (config.epoch < epoch) {
          return reply(replica_code::retry, 0);  // the watch is behind
        }
        if (!config.is_backup(owner->members.options().node_id)) {
          return reply(replica_code::not_primary, 0);
        }
        if (!store->following()) {
          if (auto followed = store->follow(); !followed) {
            return reply(replica_code::retry, 0);
          }
        }
        const auto now = store->log_position();
        if (position <= now) {
          // Sent again: has it (durably, unless a sync is still due).
          if (self->state.unsynced.empty()) {
            return reply(replica_code::ok, now);
          }
          return after_sync(std::move(primary), std::move(node), position, now);
        }
        if (position != now + 1) {
          return reply(replica_code::gap, now);
        }
        if (auto applied =
                store->apply_replicated(written_at, position, data, false);
            !applied) {
          std::fprintf(stderr, "durin: shard %u: a replicated write: %s\n",
                       shard, applied.error().message.c_str());
          return reply(replica_code::retry, now);
        }
        owner->applied.fetch_add(1);
        {
          auto& log = *owner->logs[shard];
          std::lock_guard lock(log.mutex);
          log.append(written_at, position, std::move(data),
                     owner->options.log_bytes_max);
        }
        after_sync(std::move(primary), std::move(node), position, position);
      },
      [self, owner, shard](flush_atom) {
        auto& st = self->state;
        st.flush_sent = false;
        auto waiting = std::move(st.unsynced);
        st.unsynced.clear();
        auto* store = owner->stores(shard);
        const auto began = clock_type::now();
        const auto synced =
            store != nullptr ? store->sync_replicated()
                             : status{make_error(errc::shutting_down,
                                                 "the shard's copy is gone")};
        if (synced) {
          owner->synced.fetch_add(1);
          owner->backup_sync.observe(clock_type::now() - began);
        } else {
          std::fprintf(stderr, "durin: shard %u: replicated writes: %s\n",
                       shard, synced.error().message.c_str());
          if (store != nullptr) {
            // Its position counts writes that may be lost: the reopen at
            // the next write reads the durable one.
            store->unfollow();
          }
        }
        if (!synced) {
          for (const auto& one : waiting) {
            answer_write(self, one.primary, shard, one.node, one.sent,
                         replica_code::retry, 0);
          }
          return;
        }
        // One answer for each run of writes from the same primary: an ok
        // is cumulative (writes are applied in position order and this
        // sync made every one applied durable), so the highest answers for
        // those before it, and a flush costs one message, not one a write.
        for (std::size_t first = 0; first < waiting.size();) {
          const auto& one = waiting[first];
          auto sent = one.sent;
          auto position = one.position;
          auto next = first + 1;
          for (;
               next < waiting.size() && waiting[next].primary == one.primary &&
               waiting[next].node == one.node;
               ++next) {
            sent = std::max(sent, waiting[next].sent);
            position = std::max(position, waiting[next].position);
          }
          answer_write(self, one.primary, shard, one.node, sent,
                       replica_code::ok, position);
          owner->answered.fetch_add(1);
          first = next;
        }
      },
  };
}

}  // namespace

// ---- the control thread -----------------------------------------------------

namespace {

// A blocking exchange with node `peer`'s router.
template <class Handler, class... Ts>
status ask_peer(caf::actor_system& system, const std::string& peer,
                std::chrono::milliseconds timeout, Handler on_answer,
                Ts&&... message) {
  auto router = detail::peer_router(system, peer);
  if (!router) {
    return router.error();
  }
  caf::scoped_actor self{system};
  status outcome;
  self->request(*router, timeout, std::forward<Ts>(message)...)
      .receive(on_answer, [&](caf::error& problem) {
        outcome =
            make_error(errc::shutting_down, "no answer from " + peer + ": " +
                                                system.render(problem));
      });
  return outcome;
}

void recopy(replicator::impl& owner, std::uint32_t shard,
            const std::string& peer) {
  auto* store = owner.stores(shard);
  const auto incoming = store->dir() + ".incoming";
  std::error_code ignored;
  std::filesystem::remove_all(incoming, ignored);
  status done = owner.mover.pull_checkpoint(shard, peer, incoming);
  if (done) {
    done = store->replace_files(incoming);
  }
  if (done) {
    done = store->follow();
  }
  if (!done) {
    std::filesystem::remove_all(incoming, ignored);
    std::fprintf(stderr, "durin: shard %u: the copy from its primary: %s\n",
                 shard, done.error().message.c_str());
  } else {
    owner.recopies.fetch_add(1);
    std::fprintf(stderr,
                 "durin: shard %u re-copied from its primary (at write %llu)\n",
                 shard, static_cast<unsigned long long>(store->log_position()));
  }
  std::lock_guard lock(owner.copying_mutex);
  owner.follows[shard].copying = false;
  owner.follows[shard].joined_epoch = 0;
}

// One shard, on every tick of the control thread.
// The primary's side of a tick: a change of the shard's config (the in-sync
// set, a backup's lease) reaches the primary actor once.
void tend_served(replicator::impl& owner, std::uint32_t shard,
                 std::int64_t mod_revision) {
  auto& state = owner.follows[shard];
  if (mod_revision == state.seen_revision) {
    return;
  }
  state.seen_revision = mod_revision;
  caf::actor primary;
  {
    std::lock_guard lock(owner.actors_mutex);
    primary = owner.primary_actor;
  }
  if (primary) {
    caf::anon_send(primary, config_atom::value, shard);
  }
}

// Asks the primary at `at` to take this copy as a backup: it joins (and
// catches up from the primary's log), or is copied afresh when the log cannot
// bring it in step.
void join_primary(replicator::impl& owner, std::uint32_t shard,
                  persistence::store& store, const route& at,
                  std::uint64_t epoch) {
  auto& state = owner.follows[shard];
  const auto& me = owner.members.options().node_id;
  std::uint64_t code = 0;
  std::uint64_t position = 0;
  auto asked = ask_peer(
      owner.system, at.peer, std::chrono::milliseconds(2000),
      [&](std::uint64_t c, std::uint64_t p) {
        code = c;
        position = p;
      },
      join_atom::value, shard, me, owner.members.lease_id(), store.last_epoch(),
      store.log_position());
  if (!asked) {
    return;
  }
  if (code == static_cast<std::uint64_t>(replica_code::ok)) {
    state.joined_epoch = epoch;
    state.joined_at = clock_type::now();
    return;
  }
  if (code == static_cast<std::uint64_t>(replica_code::recopy)) {
    std::fprintf(stderr,
                 "durin: shard %u: this copy (write %llu) cannot follow the "
                 "primary's log; it is copied afresh\n",
                 shard, static_cast<unsigned long long>(store.log_position()));
    {
      std::lock_guard lock(owner.copying_mutex);
      state.copying = true;
    }
    auto* impl = &owner;
    const auto peer = at.peer;
    owner.copies.post([impl, shard, peer] { recopy(*impl, shard, peer); });
  }
}

void tend(replicator::impl& owner, std::uint32_t shard) {
  auto* store = owner.stores(shard);
  if (store == nullptr) {
    return;
  }
  auto& state = owner.follows[shard];
  const auto& me = owner.members.options().node_id;
  const auto config = owner.members.config_of(shard);
  const auto at = owner.members.locate(shard);
  if (at.at == route::where::here) {
    tend_served(owner, shard, config.mod_revision);
    return;
  }
  state.seen_revision = -1;
  {
    std::lock_guard lock(owner.copying_mutex);
    if (state.copying) {
      return;
    }
  }
  const auto& fence = store->guard();
  if (!config.is_backup(me) || config.owner.empty()) {
    if (store->following() && fence && !fence->open()) {
      store->unfollow();
    }
    state.joined_epoch = 0;
    return;
  }
  if (fence && fence->open()) {
    return;  // promoted meanwhile: served once the store reopens
  }
  if (!store->following()) {
    if (auto followed = store->follow(); !followed) {
      return;  // tried again at the next tick
    }
  }
  if (config.in_step(me, owner.members.lease_id()) &&
      state.joined_epoch == config.epoch) {
    return;
  }
  if (at.at != route::where::there || at.epoch != config.epoch) {
    return;  // no primary serves the shard now
  }
  if (state.joined_epoch == config.epoch &&
      clock_type::now() - state.joined_at < rejoin_after) {
    return;  // catching up
  }
  join_primary(owner, shard, *store, at, config.epoch);
}

}  // namespace

replicator::replicator(membership& members, store_of stores, shard_mover& mover,
                       caf::actor_system& system, replication_options options)
    : impl_(std::make_shared<impl>(members, std::move(stores), mover, system,
                                   options)) {
  impl_->primary_actor =
      system.middleman().spawn_broker(primary_behavior, impl_.get());
}

replicator::~replicator() {
  stop();
}

std::shared_ptr<persistence::replication> replicator::shipping(
    std::uint32_t shard) {
  return std::make_shared<shard_shipping>(impl_, shard);
}

void replicator::start() {
  auto* self = impl_.get();
  self->control = std::thread([self] {
    std::unique_lock lock(self->control_mutex);
    while (!self->stopping.load()) {
      lock.unlock();
      for (std::uint32_t shard = 0; shard < self->members.config().shards;
           ++shard) {
        if (self->stopping.load()) {
          break;
        }
        tend(*self, shard);
      }
      lock.lock();
      self->control_wake.wait_for(lock, control_interval,
                                  [self] { return self->stopping.load(); });
    }
  });
}

void replicator::stop() {
  auto& self = *impl_;
  if (self.stopping.exchange(true)) {
    return;
  }
  self.control_wake.notify_all();
  if (self.control.joinable()) {
    self.control.join();
  }
  self.copies.stop();
  self.swaps.stop();
  for (std::uint32_t shard = 0; shard < self.waits.size(); ++shard) {
    self.waits[shard]->room.notify_all();
    self.fail_all(shard, make_error(errc::shutting_down,
                                    "the node is stopping; the write may "
                                    "count"));
  }
  std::lock_guard lock(self.actors_mutex);
  if (self.primary_actor) {
    caf::anon_send_exit(self.primary_actor, caf::exit_reason::user_shutdown);
  }
  for (auto& one : self.appliers) {
    if (one) {
      caf::anon_send_exit(one, caf::exit_reason::user_shutdown);
    }
  }
  self.primary_actor = caf::actor{};
  for (auto& one : self.appliers) {
    one = caf::actor{};
  }
}

caf::actor replicator::primary() const {
  std::lock_guard lock(impl_->actors_mutex);
  return impl_->primary_actor;
}

caf::actor replicator::applier(std::uint32_t shard) {
  auto& self = *impl_;
  std::lock_guard lock(self.actors_mutex);
  if (self.stopping.load() || shard >= self.appliers.size()) {
    return caf::actor{};
  }
  if (!self.appliers[shard]) {
    // Detached: an applied write waits for its fsync.
    self.appliers[shard] =
        self.system.spawn<caf::detached>(applier_behavior, &self, shard);
  }
  return self.appliers[shard];
}

json replicator::local_view() const {
  json out = json::array();
  auto& self = *impl_;
  for (std::uint32_t shard = 0; shard < self.members.config().shards; ++shard) {
    auto* store = self.stores(shard);
    if (store == nullptr) {
      continue;
    }
    const bool primary = self.members.locate(shard).at == route::where::here;
    if (!primary && !store->following()) {
      continue;
    }
    out.push_back({{"shard", shard},
                   {"role", primary ? "primary" : "backup"},
                   {"epoch", store->last_epoch()},
                   {"position", store->log_position()}});
  }
  return out;
}

void replicator::render_latencies(std::string& out) const {
  impl_->round_trip.render(
      out, "durin_replication_round_trip_seconds",
      "From a write shipped to backups to every in-sync backup having it "
      "durably (this node as a primary).");
  impl_->backup_sync.render(
      out, "durin_replication_backup_sync_seconds",
      "The fsyncs that made applied writes durable (this node as a "
      "backup).");
}

replicator::counters replicator::statistics() const {
  const auto& self = *impl_;
  return {self.shipped.load(),  self.applied.load(), self.synced.load(),
          self.answered.load(), self.dropped.load(), self.added.load(),
          self.recopies.load()};
}

}  // namespace durin::cluster
