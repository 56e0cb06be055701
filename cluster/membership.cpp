#include "cluster/membership.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "cluster/copy_marks.hpp"
#include "gateway/auth.hpp"

namespace durin::cluster {

namespace {

using json = nlohmann::json;

// How long a primary handing a shard over waits for its shipped writes to
// be answered before it lets go (they normally take a few ms).
constexpr std::chrono::milliseconds handover_settle_max{500};

std::int64_t margin_of(const membership_options& options) {
  if (options.margin_ms > 0) {
    return options.margin_ms;
  }
  return std::max<std::int64_t>(250, options.lease_ttl_s * 1000 / 5);
}

compare mod_is(std::string key, std::int64_t revision) {
  compare c;
  c.key = std::move(key);
  c.what = compare::target::mod;
  c.number = revision;
  return c;
}

compare absent(std::string key) {
  compare c;
  c.key = std::move(key);
  c.what = compare::target::create;
  c.number = 0;
  return c;
}

// The owner first, then the backups.
void place(shard_config& config, const std::vector<std::string>& ranked) {
  config.owner = ranked.empty() ? std::string() : ranked.front();
  config.backups.assign(ranked.size() > 1 ? ranked.begin() + 1 : ranked.end(),
                        ranked.end());
  config.in_sync.clear();
}

request_op put(std::string key, std::string value, std::int64_t lease = 0) {
  request_op op;
  op.what = request_op::kind::put;
  op.key = std::move(key);
  op.value = std::move(value);
  op.lease = lease;
  return op;
}

}  // namespace

result<std::unique_ptr<membership>> membership::open(
    membership_options options) {
  if (!valid_name(options.cluster)) {
    return make_error(errc::invalid_argument,
                      "cluster name '" + options.cluster +
                          "' must be 1 to 64 of A-Z a-z 0-9 . _ -");
  }
  if (!valid_name(options.node_id)) {
    return make_error(errc::invalid_argument,
                      "node id '" + options.node_id +
                          "' must be 1 to 64 of A-Z a-z 0-9 . _ -");
  }
  if (options.lease_ttl_s < 2 || options.lease_ttl_s > 60) {
    return make_error(errc::invalid_argument,
                      "the node lease TTL must be 2 to 60 s");
  }
  auto control = etcd_client::make(options.etcd);
  if (!control) {
    return control.error();
  }
  // A keepalive waits at most a third of the TTL: a slow one must not
  // outlive the deadline it would extend.
  auto keeper = etcd_client::make(options.etcd, options.lease_ttl_s * 1000 / 3);
  if (!keeper) {
    return keeper.error();
  }
  const layout keys(options.cluster);
  auto stored = control->range(keys.config());
  if (!stored) {
    return stored.error();
  }
  if (stored->kvs.empty()) {
    return make_error(errc::invalid_argument,
                      "cluster '" + options.cluster +
                          "' is not initialised in etcd: run durin cluster "
                          "init --etcd URL --cluster " +
                          options.cluster);
  }
  auto config = decode_config(stored->kvs.front().value);
  if (!config) {
    return config.error();
  }
  return std::unique_ptr<membership>(
      new membership(std::move(options), std::move(*config),
                     std::move(*control), std::move(*keeper)));
}

membership::membership(membership_options options, cluster_config config,
                       etcd_client control, etcd_client keeper)
    : options_(std::move(options)),
      config_(std::move(config)),
      keys_(options_.cluster),
      control_(std::move(control)),
      keeper_(std::move(keeper)),
      held_(config_.shards),
      resigned_(config_.shards),
      lost_(config_.shards),
      behind_(config_.shards) {
  for (std::uint32_t shard = 0; shard < config_.shards; ++shard) {
    fences_.push_back(std::make_shared<persistence::fence>());
  }
  table_.configs.resize(config_.shards);
  table_.leases.resize(config_.shards);
}

membership::~membership() {
  stop();
}

status membership::start() {
  joined_ = clock::now();
  if (register_node() == registration::taken) {
    return make_error(errc::invalid_argument,
                      "node id '" + options_.node_id +
                          "' is held in cluster '" + options_.cluster +
                          "' by a live node with another data directory; "
                          "stop that node first, or choose another id");
  }
  keeper_thread_ = std::thread([this] { keep_loop(); });
  acquirer_thread_ = std::thread([this] { acquire_loop(); });
  return {};
}

void membership::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) {
      return;
    }
    stopping_ = true;
  }
  woken_.notify_all();
  if (keeper_thread_.joinable()) {
    keeper_thread_.join();
  }
  if (acquirer_thread_.joinable()) {
    acquirer_thread_.join();
  }
  watch_.reset();
  for (std::uint32_t shard = 0; shard < config_.shards; ++shard) {
    fences_[shard]->close();
    held_[shard].store(0);
  }
  if (const auto lease = lease_.exchange(0); lease != 0) {
    (void)control_.revoke(lease);
  }
}

void membership::wake() {
  {
    std::lock_guard lock(mutex_);
    changed_ = true;
  }
  woken_.notify_all();
}

// ---- the node's lease ------------------------------------------------------

bool membership::wait_for_lapse(std::int64_t lease) {
  const auto left = control_.time_to_live(lease);
  if (left && *left <= 0) {
    return true;
  }
  // A dead process's lease lapses within what it had left; one renewed
  // past that (and a margin for etcd's rounding to seconds) is alive.
  // Unread, it may have a whole TTL left.
  const auto until = clock::now() +
                     std::chrono::seconds(left ? *left : options_.lease_ttl_s) +
                     std::chrono::milliseconds(1500);
  while (clock::now() < until) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) {
        return false;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (auto now = control_.time_to_live(lease); now && *now <= 0) {
      return true;
    }
  }
  return false;
}

membership::registration membership::register_node() {
  // A previous incarnation of this node (killed before it could revoke):
  // its lease still holds shard lease keys until it expires. Ended now, so
  // that a restart serves again at once: the data directory it wrote is
  // ours (RocksDB's lock keeps a second process off it). One of another
  // data directory may be another live process given the same id: it is
  // waited out (before this node's own lease is granted, which would run
  // down meanwhile), never ended, and while it lives the id is not ours.
  if (auto before = control_.range(keys_.node(options_.node_id));
      before && !before->kvs.empty()) {
    if (auto old = decode_node(before->kvs.front().value);
        old && old->lease != 0) {
      const bool ours = old->data.empty() || options_.data_identity.empty() ||
                        old->data == options_.data_identity;
      if (ours) {
        (void)control_.revoke(old->lease);
      } else if (!wait_for_lapse(old->lease)) {
        return registration::taken;
      }
    }
  }
  const auto sent = clock::now();
  auto granted = control_.grant(options_.lease_ttl_s);
  if (!granted) {
    return registration::failed;
  }
  node_entry self{options_.node_id, options_.http, options_.peer, granted->id,
                  options_.data_identity};
  if (!control_.put(keys_.node(options_.node_id), encode(self), granted->id)) {
    (void)control_.revoke(granted->id);
    return registration::failed;
  }
  const auto ttl_ms = std::min(granted->ttl_s, options_.lease_ttl_s) * 1000;
  deadline_ticks_.store(
      (sent + std::chrono::milliseconds(ttl_ms - margin_of(options_)))
          .time_since_epoch()
          .count(),
      std::memory_order_release);
  lease_.store(granted->id, std::memory_order_release);
  wake();
  return registration::done;
}

void membership::keep_loop() {
  const auto interval = std::chrono::milliseconds(
      std::max<std::int64_t>(100, options_.lease_ttl_s * 1000 / 4));
  const auto keep_ms = options_.lease_ttl_s * 1000 - margin_of(options_);
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    const auto lease = lease_.load(std::memory_order_acquire);
    if (lease == 0) {
      if (register_node() == registration::taken) {
        std::fprintf(stderr,
                     "durin: node %s lost its lease, and another live node "
                     "now holds its id with another data directory; this "
                     "one serves nothing until that one stops\n",
                     options_.node_id.c_str());
      }
    } else {
      const auto sent = clock::now();
      auto kept = keeper_.keep_alive(lease);
      if (kept) {
        const auto until = sent + std::chrono::milliseconds(keep_ms);
        deadline_ticks_.store(until.time_since_epoch().count(),
                              std::memory_order_release);
        for (std::uint32_t shard = 0; shard < config_.shards; ++shard) {
          const auto epoch = held_[shard].load(std::memory_order_acquire);
          if (epoch == 0 ||
              resigned_[shard].load(std::memory_order_acquire) == epoch) {
            continue;
          }
          // Its lease key was never gone (the node lease lives): the same
          // tenure goes on. A fence closed by its deadline meanwhile is
          // granted again, which reopens the store.
          if (fences_[shard]->open()) {
            fences_[shard]->extend(epoch, until);
          } else if (clock::now() < until) {
            fences_[shard]->grant(epoch, until);
          }
        }
      } else if (kept.error().code == errc::invalid_argument) {
        std::fprintf(stderr,
                     "durin: node %s lost its lease in etcd; its shards "
                     "stop and are acquired again\n",
                     options_.node_id.c_str());
        lose_all();
        lease_.store(0, std::memory_order_release);
      }
      // Else etcd did not answer: the deadline runs out by itself, and the
      // fences close with it.
    }
    lock.lock();
    woken_.wait_for(lock, interval, [this] { return stopping_; });
  }
}

void membership::lose_all() {
  for (std::uint32_t shard = 0; shard < config_.shards; ++shard) {
    held_[shard].store(0, std::memory_order_release);
    fences_[shard]->close();
  }
}

// ---- the routing table ----------------------------------------------------

status membership::resync() {
  auto all = control_.range(keys_.prefix(), true);
  if (!all) {
    return all.error();
  }
  // Built aside and swapped in at once: a reader never sees a table half
  // read (a node missing from it would miss a key change sent to every
  // node, gateway/key_sync.cpp).
  table fresh;
  fresh.configs.assign(config_.shards, shard_config{});
  fresh.leases.assign(config_.shards, shard_lease{});
  for (const auto& item : all->kvs) {
    apply_to(fresh, item, false);
  }
  {
    std::unique_lock lock(table_mutex_);
    table_ = std::move(fresh);
  }
  watch_.reset();
  watch_options watched;
  watched.key = keys_.prefix();
  watched.prefix = true;
  watched.start_revision = all->revision + 1;
  auto started = etcd_watch::start(
      options_.etcd, watched,
      [this](std::vector<watch_event> events, std::int64_t) {
        for (const auto& event : events) {
          apply(event.now, event.what == watch_event::type::erase);
        }
        wake();
      },
      [this] {
        {
          std::lock_guard lock(mutex_);
          resync_needed_ = true;
        }
        woken_.notify_all();
      });
  if (!started) {
    return started.error();
  }
  watch_.emplace(std::move(*started));
  return {};
}

void membership::apply(const kv& now, bool erased) {
  std::unique_lock lock(table_mutex_);
  apply_to(table_, now, erased);
}

void membership::apply_to(table& target, const kv& now, bool erased) const {
  const auto& key = now.key;
  if (key.compare(0, keys_.nodes().size(), keys_.nodes()) == 0) {
    const auto id = key.substr(keys_.nodes().size());
    if (erased) {
      target.nodes.erase(id);
    } else if (auto node = decode_node(now.value)) {
      target.nodes[id] = std::move(*node);
    }
    return;
  }
  auto shard = keys_.shard_of_key(key);
  if (!shard || shard->first >= config_.shards) {
    return;
  }
  if (shard->second) {
    auto& lease = target.leases[shard->first];
    lease = shard_lease{};
    if (!erased) {
      if (auto decoded = decode_lease(now.value)) {
        lease = std::move(*decoded);
        lease.lease = now.lease;
        lease.create_revision = now.create_revision;
      }
    }
    return;
  }
  auto& config = target.configs[shard->first];
  config = shard_config{};
  if (!erased) {
    if (auto decoded = decode_shard(now.value)) {
      config = std::move(*decoded);
      config.mod_revision = now.mod_revision;
    }
  }
}

// ---- acquisition ------------------------------------------------------------

void membership::acquire_loop() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    const bool resync_now = resync_needed_;
    resync_needed_ = false;
    changed_ = false;
    lock.unlock();
    if (resync_now) {
      if (auto synced = resync(); !synced) {
        std::lock_guard again(mutex_);
        resync_needed_ = true;
      }
    }
    acquire_round();
    lock.lock();
    woken_.wait_for(lock, std::chrono::milliseconds(200),
                    [this] { return stopping_ || changed_ || resync_needed_; });
  }
}

void membership::acquire_round() {
  const auto lease = lease_.load(std::memory_order_acquire);
  if (lease == 0 || clock::now() >= deadline()) {
    return;
  }
  table seen;
  {
    std::shared_lock lock(table_mutex_);
    seen = table_;
  }
  for (std::uint32_t shard = 0; shard < config_.shards; ++shard) {
    const auto& config = seen.configs[shard];
    if (config.state == shard_state::moving && move_listener_) {
      move_listener_(shard, config);
    }
    const bool mine = config.owner == options_.node_id &&
                      config.state == shard_state::active &&
                      config.mod_revision != 0;
    if (mine) {
      tend_owned(shard, seen, lease);
    } else {
      tend_not_owned(shard, seen, lease);
    }
  }
  place_unplaced(seen);
}

void membership::tend_not_owned(std::uint32_t shard, const table& seen,
                                std::int64_t lease) {
  const auto& config = seen.configs[shard];
  const auto& taken = seen.leases[shard];
  if (held_[shard].load() != 0 ||
      (taken.create_revision != 0 && taken.node == options_.node_id &&
       taken.lease == lease)) {
    release(shard, taken);
    return;
  }
  if (taken.create_revision != 0 || config.mod_revision == 0 ||
      config.state != shard_state::active) {
    return;  // held by another lease, or not a shard to take now
  }
  if (config.in_step(options_.node_id, lease) &&
      (config.target == options_.node_id || !target_in_step(seen, config))) {
    // A hand-over's target only, while in step.
    promote(shard, config,
            config.target.empty() ? "its lease is gone; this copy is in step"
                                  : "handed over; this copy is in step");
  } else if (config.is_backup(options_.node_id) &&
             config.loss_accepted_by() == options_.node_id) {
    promote(shard, config,
            "the operator accepted the loss of the writes this copy "
            "lacks");
  } else if (config.is_backup(options_.node_id) &&
             !live_backup_in_step(seen, config, {}) &&
             behind_[shard].exchange(config.epoch, std::memory_order_acq_rel) !=
                 config.epoch) {
    std::fprintf(
        stderr,
        "durin: node %s keeps a copy of shard %u that is not in step, "
        "and no copy in step is live: the shard waits for its owner %s; "
        "`durin cluster accept-loss %u --to %s` lets this node serve "
        "what its copy holds (the writes it lacks are lost)\n",
        options_.node_id.c_str(), shard, config.owner.c_str(), shard,
        options_.node_id.c_str());
  }
}

void membership::tend_owned(std::uint32_t shard, const table& seen,
                            std::int64_t lease) {
  const auto& config = seen.configs[shard];
  const auto& taken = seen.leases[shard];
  if (taken.create_revision != 0) {
    if (taken.lease == lease && taken.epoch == config.epoch &&
        held_[shard].load() == taken.epoch && handing_over(seen, config)) {
      // An online move: the target has every write; this node steps
      // down at its epoch and the target promotes itself at the next.
      std::fprintf(stderr,
                   "durin: node %s hands shard %u over to %s (in step)\n",
                   options_.node_id.c_str(), shard, config.target.c_str());
      resigned_[shard].store(taken.epoch, std::memory_order_release);
      fences_[shard]->close();
      // Writes that landed here before the close (also one the committer
      // is writing now) reach the target before it promotes: it then
      // continues this copy's log, which follows it without a re-copy.
      // Bounded: a backup that does not answer is dropped by the shipping
      // itself within its timeout.
      const auto& fence = *fences_[shard];
      const auto* shipping = fence.replication();
      const auto until = clock::now() + handover_settle_max;
      while (shipping != nullptr && (fence.writing() || !shipping->settled()) &&
             clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    if (taken.lease == lease &&
        resigned_[shard].load(std::memory_order_acquire) == taken.epoch) {
      release(shard, taken);  // retried each round until etcd erased it
      return;
    }
    if (taken.lease == lease && taken.epoch == config.epoch &&
        held_[shard].load() != config.epoch) {
      hold(shard, config.epoch);  // acquired before the watch said so
    }
    return;  // held by us, or still by a lease that has not expired
  }
  if (live_backup_in_step(seen, config, options_.node_id)) {
    return;  // the backup takes it (promote)
  }
  if (const auto by = config.loss_accepted_by();
      !by.empty() && by != options_.node_id) {
    return;  // the operator gave it to a backup's copy
  }
  if (!copy_holds_history(shard, config)) {
    return;
  }
  acquire(shard, config);
}

void membership::acquire(std::uint32_t shard, const shard_config& config) {
  const auto lease = lease_.load(std::memory_order_acquire);
  shard_config next = config;
  next.epoch = config.epoch + 1;
  // A new tenure: backups are in step with it only once they joined it.
  next.in_sync.clear();
  next.accept_loss_at = 0;  // spent
  next.accept_loss_by.clear();
  shard_lease held{options_.node_id, next.epoch, lease, 0};
  if (!mark_before_taking(shard)) {
    return;  // tried again next round
  }
  auto done =
      control_.txn({mod_is(keys_.shard_config(shard), config.mod_revision),
                    absent(keys_.shard_lease(shard))},
                   {put(keys_.shard_config(shard), encode(next)),
                    put(keys_.shard_lease(shard), encode(held), lease)});
  if (done && done->succeeded) {
    hold(shard, next.epoch);
  }
}

void membership::promote(std::uint32_t shard, const shard_config& config,
                         const char* why) {
  shard_config next = config;
  next.owner = options_.node_id;
  next.target.clear();
  std::erase(next.backups, options_.node_id);
  // The old owner joins back as a backup, unless this node was a copy
  // added for a move beyond the cluster's replicas: then the move drops
  // the old owner's copy.
  if (!config.owner.empty() && next.backups.size() + 1 < config_.replicas) {
    next.backups.push_back(config.owner);
  }
  std::fprintf(stderr, "durin: node %s takes shard %u from %s (%s)\n",
               options_.node_id.c_str(), shard, config.owner.c_str(), why);
  acquire(shard, next);
}

bool membership::copy_holds_history(std::uint32_t shard,
                                    const shard_config& config) {
  if (!copy_dirs_ || config.epoch == 0 || copy_marked(copy_dirs_(shard))) {
    lost_[shard].store(0, std::memory_order_release);
    return true;
  }
  if (config.loss_accepted_by() == options_.node_id) {
    std::fprintf(stderr,
                 "durin: node %s takes shard %u with an empty copy: the "
                 "operator accepted the loss of its history at epoch %llu\n",
                 options_.node_id.c_str(), shard,
                 static_cast<unsigned long long>(config.epoch));
    lost_[shard].store(0, std::memory_order_release);
    return true;
  }
  if (lost_[shard].exchange(config.epoch, std::memory_order_acq_rel) !=
      config.epoch) {
    std::fprintf(stderr,
                 "durin: node %s does not take shard %u: its copy here lost "
                 "the shard's history (served up to epoch %llu; the data "
                 "directory was deleted or replaced), and no copy in step is "
                 "live; it waits for one, or `durin cluster accept-loss %u` "
                 "lets this node serve the shard without it\n",
                 options_.node_id.c_str(), shard,
                 static_cast<unsigned long long>(config.epoch), shard);
  }
  return false;
}

bool membership::mark_before_taking(std::uint32_t shard) {
  if (!copy_dirs_) {
    return true;
  }
  if (auto marked = mark_copy(copy_dirs_(shard)); !marked) {
    std::fprintf(stderr, "durin: node %s does not take shard %u yet: %s\n",
                 options_.node_id.c_str(), shard,
                 marked.error().message.c_str());
    return false;
  }
  return true;
}

std::vector<std::uint32_t> membership::copies_lost() const {
  std::vector<std::uint32_t> out;
  std::shared_lock lock(table_mutex_);
  for (std::uint32_t shard = 0; shard < table_.configs.size(); ++shard) {
    const auto& config = table_.configs[shard];
    if (config.owner == options_.node_id && config.epoch != 0 &&
        lost_[shard].load(std::memory_order_acquire) == config.epoch &&
        !fences_[shard]->serving()) {
      out.push_back(shard);
    }
  }
  return out;
}

bool membership::target_in_step(const table& seen, const shard_config& config) {
  if (config.target.empty() || config.state != shard_state::active) {
    return false;
  }
  auto node = seen.nodes.find(config.target);
  return node != seen.nodes.end() &&
         config.in_step(config.target, node->second.lease);
}

bool membership::handing_over(const table& seen,
                              const shard_config& config) const {
  return config.target != options_.node_id && target_in_step(seen, config);
}

bool membership::live_backup_in_step(const table& seen,
                                     const shard_config& config,
                                     const std::string& except) {
  for (const auto& entry : config.in_sync) {
    if (entry.node == except) {
      continue;
    }
    auto node = seen.nodes.find(entry.node);
    if (node != seen.nodes.end() && node->second.lease == entry.lease) {
      return true;
    }
  }
  return false;
}

shard_config membership::config_of(std::uint32_t shard) const {
  std::shared_lock lock(table_mutex_);
  return shard < table_.configs.size() ? table_.configs[shard] : shard_config{};
}

bool membership::finish_move(std::uint32_t shard,
                             const shard_config& expected) {
  shard_config placed = expected;
  if (expected.is_backup(options_.node_id) && !expected.owner.empty()) {
    // The copies stay as many: the old owner keeps one in this one's place.
    std::erase(placed.backups, options_.node_id);
    placed.backups.push_back(expected.owner);
  }
  placed.in_sync.clear();
  placed.owner = options_.node_id;
  placed.state = shard_state::active;
  placed.target.clear();
  if (!mark_before_taking(shard)) {
    return false;
  }
  auto done =
      control_.txn({mod_is(keys_.shard_config(shard), expected.mod_revision)},
                   {put(keys_.shard_config(shard), encode(placed))});
  if (done && done->succeeded) {
    wake();
    return true;
  }
  return false;
}

std::string membership::peer_of(const std::string& id) const {
  std::shared_lock lock(table_mutex_);
  auto node = table_.nodes.find(id);
  return node == table_.nodes.end() ? std::string() : node->second.peer;
}

void membership::resign(std::uint32_t shard, std::uint64_t epoch) {
  if (shard >= config_.shards || epoch == 0 ||
      held_[shard].load(std::memory_order_acquire) != epoch) {
    return;
  }
  std::fprintf(stderr,
               "durin: node %s gives up shard %u at epoch %llu (a write it "
               "shipped did not become durable here)\n",
               options_.node_id.c_str(), shard,
               static_cast<unsigned long long>(epoch));
  resigned_[shard].store(epoch, std::memory_order_release);
  fences_[shard]->close();
  wake();
}

void membership::hold(std::uint32_t shard, std::uint64_t epoch) {
  held_[shard].store(epoch, std::memory_order_release);
  fences_[shard]->grant(epoch, deadline());
}

void membership::release(std::uint32_t shard, const shard_lease& seen) {
  held_[shard].store(0, std::memory_order_release);
  fences_[shard]->close();
  if (seen.create_revision != 0 && seen.node == options_.node_id) {
    // Only the very key this node created: a newer owner's stays.
    compare same;
    same.key = keys_.shard_lease(shard);
    same.what = compare::target::create;
    same.number = seen.create_revision;
    request_op erase;
    erase.what = request_op::kind::erase;
    erase.key = keys_.shard_lease(shard);
    (void)control_.txn({same}, {erase});
  }
}

void membership::place_unplaced(const table& seen) {
  if (clock::now() - joined_ < std::chrono::milliseconds(options_.settle_ms)) {
    return;
  }
  std::vector<std::string> live;
  for (const auto& [id, node] : seen.nodes) {
    live.push_back(id);
  }
  if (live.empty()) {
    return;
  }
  for (std::uint32_t shard = 0; shard < config_.shards; ++shard) {
    const auto& config = seen.configs[shard];
    if (config.mod_revision == 0 || !config.owner.empty()) {
      continue;
    }
    auto ranked = rendezvous_ranked(shard, live, config_.replicas);
    if (ranked.empty() || ranked.front() != options_.node_id) {
      continue;
    }
    shard_config placed = config;
    place(placed, ranked);
    (void)control_.txn({mod_is(keys_.shard_config(shard), config.mod_revision)},
                       {put(keys_.shard_config(shard), encode(placed))});
  }
}

// ---- routing ----------------------------------------------------------------

route membership::locate(std::uint32_t shard) const {
  route found;
  if (shard >= config_.shards) {
    return found;
  }
  if (fences_[shard]->serving()) {
    found.at = route::where::here;
    found.node = options_.node_id;
    found.epoch = fences_[shard]->epoch();
    return found;
  }
  std::shared_lock lock(table_mutex_);
  const auto& taken = table_.leases[shard];
  if (taken.create_revision == 0 || taken.node == options_.node_id) {
    return found;
  }
  auto node = table_.nodes.find(taken.node);
  if (node == table_.nodes.end()) {
    return found;
  }
  found.at = route::where::there;
  found.node = taken.node;
  found.peer = node->second.peer;
  found.epoch = taken.epoch;
  return found;
}

std::vector<std::uint32_t> membership::one_shard_per_other_node() const {
  std::vector<std::uint32_t> out;
  std::map<std::string, std::uint32_t> first;
  std::shared_lock lock(table_mutex_);
  for (std::uint32_t shard = 0; shard < config_.shards; ++shard) {
    const auto& taken = table_.leases[shard];
    if (taken.create_revision != 0 && taken.node != options_.node_id &&
        table_.nodes.count(taken.node) != 0) {
      first.emplace(taken.node, shard);
    }
  }
  for (const auto& [node, shard] : first) {
    out.push_back(shard);
  }
  return out;
}

std::vector<node_entry> membership::live_nodes() const {
  std::vector<node_entry> out;
  std::shared_lock lock(table_mutex_);
  for (const auto& [id, node] : table_.nodes) {
    out.push_back(node);
  }
  return out;
}

std::vector<std::uint32_t> membership::unserved() const {
  std::vector<std::uint32_t> out;
  for (std::uint32_t shard = 0; shard < config_.shards; ++shard) {
    if (locate(shard).at == route::where::nowhere) {
      out.push_back(shard);
    }
  }
  return out;
}

std::vector<std::uint32_t> membership::awaited() const {
  std::vector<std::uint32_t> out;
  std::shared_lock lock(table_mutex_);
  for (std::uint32_t shard = 0; shard < table_.configs.size(); ++shard) {
    const auto& config = table_.configs[shard];
    if (config.owner == options_.node_id &&
        config.state == shard_state::active && !fences_[shard]->serving()) {
      out.push_back(shard);
    }
  }
  return out;
}

bool membership::local_shard(std::uint32_t& shard) const {
  for (std::uint32_t index = 0; index < config_.shards; ++index) {
    if (fences_[index]->serving()) {
      shard = index;
      return true;
    }
  }
  return false;
}

bool membership::any_shard(std::uint32_t& shard) const {
  if (local_shard(shard)) {
    return true;
  }
  auto others = one_shard_per_other_node();
  if (others.empty()) {
    return false;
  }
  shard =
      others[static_cast<std::size_t>(clock::now().time_since_epoch().count()) %
             others.size()];
  return true;
}

std::int64_t membership::lease_left_ms() const {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline() - clock::now())
                        .count();
  return std::max<std::int64_t>(0, left);
}

std::size_t membership::shards_served() const {
  std::size_t served = 0;
  for (const auto& fence : fences_) {
    served += fence->serving() ? 1 : 0;
  }
  return served;
}

result<json> membership::describe() {
  return read_status(control_, options_.cluster);
}

// ---- status and init --------------------------------------------------------

namespace {

json in_sync_nodes(const shard_config& config) {
  json out = json::array();
  for (const auto& entry : config.in_sync) {
    out.push_back(entry.node);
  }
  return out;
}

// Everything etcd holds of one cluster, decoded (undecodable entries left
// out: the status shows what can be read).
struct cluster_keys {
  std::optional<cluster_config> config;
  std::map<std::string, node_entry> nodes;
  std::map<std::uint32_t, shard_config> configs;
  std::map<std::uint32_t, shard_lease> leases;
};

result<cluster_keys> read_cluster_keys(etcd_client& etcd, const layout& keys) {
  auto all = etcd.range(keys.prefix(), true);
  if (!all) {
    return all.error();
  }
  cluster_keys read;
  for (const auto& item : all->kvs) {
    if (item.key == keys.config()) {
      if (auto decoded = decode_config(item.value)) {
        read.config = std::move(*decoded);
      }
    } else if (item.key.compare(0, keys.nodes().size(), keys.nodes()) == 0) {
      if (auto node = decode_node(item.value)) {
        node->lease = item.lease;
        read.nodes[item.key.substr(keys.nodes().size())] = std::move(*node);
      }
    } else if (auto shard = keys.shard_of_key(item.key)) {
      if (shard->second) {
        if (auto lease = decode_lease(item.value)) {
          lease->lease = item.lease;
          read.leases[shard->first] = std::move(*lease);
        }
      } else if (auto decoded = decode_shard(item.value)) {
        read.configs[shard->first] = std::move(*decoded);
      }
    }
  }
  return read;
}

}  // namespace

result<json> read_status(etcd_client& etcd, const std::string& cluster) {
  auto read = read_cluster_keys(etcd, layout(cluster));
  if (!read) {
    return read.error();
  }
  auto& [config, nodes, configs, leases] = *read;
  if (!config) {
    return make_error(errc::invalid_argument,
                      "cluster '" + cluster + "' is not initialised in etcd");
  }
  std::map<std::int64_t, std::int64_t> left_ms;  // by lease id
  json node_list = json::array();
  for (const auto& [id, node] : nodes) {
    auto ttl = etcd.time_to_live(node.lease);
    left_ms[node.lease] = ttl ? *ttl * 1000 : 0;
    node_list.push_back({{"id", id},
                         {"http", node.http},
                         {"peer", node.peer},
                         {"leaseLeftMs", left_ms[node.lease]}});
  }
  json shard_list = json::array();
  for (std::uint32_t shard = 0; shard < config->shards; ++shard) {
    const auto& placed = configs[shard];
    auto taken = leases.find(shard);
    const bool live =
        taken != leases.end() && nodes.count(taken->second.node) != 0;
    shard_list.push_back(
        {{"id", shard},
         {"owner", live ? json(taken->second.node) : json(nullptr)},
         {"placedOn",
          placed.owner.empty() ? json(nullptr) : json(placed.owner)},
         {"epoch", placed.epoch},
         {"state", live ? std::string(to_string(placed.state))
                        : std::string("unavailable")},
         {"leaseLeftMs", live ? left_ms[taken->second.lease] : 0},
         {"backups", placed.backups},
         {"inSync", in_sync_nodes(placed)}});
  }
  return json{{"cluster", cluster},
              {"shardCount", config->shards},
              {"hashVersion", config->hash_version},
              {"replicas", config->replicas},
              {"nodes", std::move(node_list)},
              {"shards", std::move(shard_list)}};
}

result<cluster_config> init_cluster(etcd_client& etcd,
                                    const std::string& cluster,
                                    std::uint32_t shards,
                                    const std::vector<std::string>& nodes,
                                    std::uint32_t replicas) {
  if (!valid_name(cluster)) {
    return make_error(
        errc::invalid_argument,
        "cluster name '" + cluster + "' must be 1 to 64 of A-Z a-z 0-9 . _ -");
  }
  if (shards < 1 || shards > 1024) {
    return make_error(
        errc::invalid_argument,
        "--shards must be 1 to 1024; got " + std::to_string(shards));
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const auto& node = nodes[i];
    if (!valid_name(node)) {
      return make_error(
          errc::invalid_argument,
          "node id '" + node + "' must be 1 to 64 of A-Z a-z 0-9 . _ -");
    }
    // A repeated id would count as a node that can hold a copy.
    if (std::find(nodes.begin(), nodes.begin() + i, node) !=
        nodes.begin() + i) {
      return make_error(errc::invalid_argument,
                        "--nodes names node id '" + node + "' twice");
    }
  }
  if (replicas == 0) {
    // The default: a backup of every shard once there are two nodes to
    // hold them (or none named yet: the nodes that join hold them).
    replicas = nodes.size() == 1 ? 1 : 2;
  }
  if (replicas > 3) {
    return make_error(
        errc::invalid_argument,
        "--replicas must be 1, 2 or 3; got " + std::to_string(replicas));
  }
  if (!nodes.empty() && nodes.size() < replicas) {
    return make_error(errc::invalid_argument,
                      "--replicas " + std::to_string(replicas) +
                          " needs at least as many nodes; --nodes names " +
                          std::to_string(nodes.size()));
  }
  const layout keys(cluster);
  cluster_config config;
  config.shards = shards;
  config.replicas = replicas;
  config.admin_key = gateway::auth::new_secret();
  // The config first, only if it is absent: a second init changes nothing.
  // Then the shards' configs, in txns of at most 100 puts (etcd's default
  // limit is 128 operations per txn); a node serves a shard once its config
  // is there.
  auto done =
      etcd.txn({absent(keys.config())}, {put(keys.config(), encode(config))});
  if (!done) {
    return done.error();
  }
  if (!done->succeeded) {
    return make_error(errc::invalid_argument,
                      "cluster '" + cluster +
                          "' is initialised already; its config stays as it "
                          "is");
  }
  std::vector<request_op> writes;
  for (std::uint32_t shard = 0; shard < shards; ++shard) {
    shard_config placed;
    if (!nodes.empty()) {
      place(placed, rendezvous_ranked(shard, nodes, replicas));
    }
    writes.push_back(put(keys.shard_config(shard), encode(placed)));
    if (writes.size() == 100 || shard + 1 == shards) {
      if (auto written = etcd.txn({}, writes); !written) {
        return written.error();
      }
      writes.clear();
    }
  }
  return config;
}

}  // namespace durin::cluster
