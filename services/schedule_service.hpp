// Schedules: start a flow on a cron or an interval, once per occurrence.
//
// A schedule lives in the shard its (tenant, schedule id) resolves to
// (shard_map::of_schedule), in the `schedules` family, as one record holding
// its definition and its state (persistence/README.md). The service holds
// in memory the schedules of the shards this node serves now (loaded when a
// shard's store becomes usable, dropped when it stops being so: a shard
// that moves is fired by its new owner from the durable record) and fires
// them from one thread.
//
// Exactly one run per (schedule, occurrence). A firing is two writes, in
// order: the schedule's record naming the occurrence and a run id drawn in
// the schedule's own shard (`last`), then the run's admission with that id
// (services/start.hpp; the run records the schedule and the occurrence).
// A crash between them leaves a record naming a run that does not exist:
// whoever loads the record next looks the run up in the shard and starts
// that very id if it is absent, so a re-fire is a replay, never a second
// run. Nothing fires an occurrence without first making that record
// durable, and the record moves past an occurrence only in the write that
// names its run.
//
// Missed occurrences (the node was down, the shard had no owner): those
// within the catch-up window of now fire once each, in order, subject to
// the overlap policy; older ones are skipped and counted (`missedCatchup`).
// Overlap (a run this schedule started has not ended): skip (counted as
// `skippedOverlap`), buffer_one, buffer_all (at most 1,000 buffered),
// allow_all, cancel_other or terminate_other (the running runs are
// cancelled, or terminated, then the new one starts). Jitter delays a firing by
// a deterministic 0..jitter (schedule_spec::jitter_of); the occurrence stays
// the nominal time. Paused, nothing fires; on unpause the schedule goes on
// from now (occurrences during the pause are not caught up). Trigger and
// backfill queue occurrences that fire as soon as the overlap policy lets
// them, whether or not the schedule is paused.
//
// Thread-safety: every method may be called from any thread but an actor's
// (they block until the change is durable, up to a few seconds). Answers
// are JSON views (`to_json` of a schedule: README.md, "HTTP API").
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "durin/error.hpp"
#include "durin/json.hpp"
#include "durin/search.hpp"
#include "services/schedule_spec.hpp"
#include "services/start.hpp"

namespace durin::services {

struct node;
struct shard;

enum class overlap_policy : std::uint8_t {
  skip,
  buffer_one,
  buffer_all,
  allow_all,
  cancel_other,
  terminate_other,
};
std::string_view to_string(overlap_policy policy);
std::optional<overlap_policy> parse_overlap(std::string_view text);

// Bounds (README.md, "HTTP API").
inline constexpr std::size_t schedule_id_bytes_max = 200;
inline constexpr std::size_t buffered_max = 1000;
inline constexpr std::size_t queued_max = 10'000;  // triggers and backfills
inline constexpr std::size_t backfill_occurrences_max = 1000;
inline constexpr std::size_t recent_firings_max = 10;
inline constexpr std::size_t schedules_page_max = 1000;

// What a schedule is, as its creator asked (the POST body, checked).
struct schedule_definition {
  std::string id;
  schedule_spec spec;
  std::string flow;
  json input = json::object();
  // Given to each run it starts (action.memo, action.searchAttributes).
  json memo;
  search_attributes search;
  overlap_policy overlap = overlap_policy::skip;
  std::int64_t catchup_window_ms = 60'000;

  static result<schedule_definition> from_json(const json& body);
};

// What the schedule did so far: the record's state (persistence/README.md).
struct schedule_state {
  struct firing {
    std::int64_t occurrence_ms = 0;
    std::string run_id;
  };
  std::int64_t next_ms = -1;   // the next nominal occurrence; -1: none left
  std::optional<firing> last;  // the last firing; its run may not exist yet
  std::vector<std::string> running;   // runs it started that may not have ended
  std::deque<std::int64_t> buffered;  // occurrences waiting for overlap
  std::deque<std::int64_t> queued;    // triggered or backfilled occurrences
  std::uint64_t fired = 0;
  std::uint64_t missed_catchup = 0;
  std::uint64_t skipped_overlap = 0;
  std::vector<firing> recent;  // newest last, at most recent_firings_max
  bool paused = false;
  std::string note;
  std::string last_error;  // why the last start was refused, if it was
  std::int64_t created_at_ms = 0;
  std::int64_t updated_at_ms = 0;

  json to_json() const;
  static result<schedule_state> from_json(const json& state);
};

class schedule_service {
 public:
  explicit schedule_service(node& owner);
  ~schedule_service();  // stop()

  void start();  // the firing thread
  void stop();   // joins it; firings in flight finish or are replayed later

  // POST /v1/schedules. A second create of the id answers the schedule as
  // it is when the definition is the same (a replay: `created` false),
  // schedule-exists otherwise.
  result<json> create(const std::string& tenant, const json& body);
  result<json> get(const std::string& tenant, const std::string& id);
  // Every schedule of the tenant in the shards this node serves, by id,
  // after `after_id`, at most `limit`.
  result<json> list(const std::string& tenant, const std::string& after_id,
                    std::size_t limit);
  result<json> pause(const std::string& tenant, const std::string& id,
                     bool paused, const std::string& note);
  // Queues one occurrence at now; answers {"scheduleId", "occurrence"}.
  result<json> trigger(const std::string& tenant, const std::string& id);
  // Queues every occurrence of the spec in [from_ms, to_ms].
  result<json> backfill(const std::string& tenant, const std::string& id,
                        std::int64_t from_ms, std::int64_t to_ms);
  status remove(const std::string& tenant, const std::string& id);

  // Schedules loaded now (tests, metrics).
  std::size_t loaded() const;

 private:
  struct entry {
    std::string tenant;
    schedule_definition definition;
    std::string canonical;  // the definition's JSON, for replays
    schedule_state state;
    std::int64_t due_ms = 0;   // when the loop looks at it next
    bool busy = false;         // a write or a start in flight
    bool unconfirmed = false;  // state.last's run may not be admitted
    // Running runs whose end the run-event hub will tell (buffered
    // occurrences wait for it).
    std::set<std::string> watched;
  };
  struct part {  // one shard's schedules
    bool loaded = false;
    std::uint64_t generation = 0;          // +1 at every load and drop
    std::map<std::string, entry> entries;  // by keys::schedule(tenant, id)
  };
  using lock_type = std::unique_lock<std::mutex>;

  void run();
  // Loads or drops the shards whose usability changed. REQUIRES: mutex_.
  void follow_shards();
  status load(std::uint32_t shard);  // REQUIRES: mutex_
  bool usable(std::uint32_t shard) const;
  // One decision for a due schedule: at most one write or start.
  void step(std::uint32_t shard, const std::string& key, entry& one,
            std::int64_t now_ms);
  // Writes `next` as the schedule's state, then (fire) starts its last run.
  void write_state(std::uint32_t shard, const std::string& key, entry& one,
                   schedule_state next, bool fire);
  // Queues the start of the schedule's last run (run_starts makes it).
  void start_last(std::uint32_t shard, const std::string& key, entry& one);
  // Makes the queued starts with the lock released. REQUIRES: lock held.
  void run_starts(lock_type& lock);
  void settle(std::uint32_t shard, std::uint64_t generation,
              const std::string& key,
              const std::function<void(entry&)>& change);
  void prune_running(std::uint32_t shard, schedule_state& state) const;
  // A view's info.running as the store says now (the state is pruned only
  // at the next firing). Reads the store: called without mutex_.
  void show_running_now(std::uint32_t shard, json& view) const;
  // With occurrences buffered: asks the run-event hub to say when each
  // running run ends, so the next one starts then. REQUIRES: mutex_.
  // Whether it subscribed to a run it did not watch yet.
  bool watch_running(std::uint32_t shard, const std::string& key, entry& one);
  std::int64_t due_of(const entry& one, std::int64_t now_ms) const;
  // Sets when the loop looks at `one` next, and indexes it (INT64_MAX:
  // never, until set again); wakes the loop when that is before its own
  // wake. REQUIRES: mutex_.
  void set_due(std::uint32_t shard, const std::string& key, entry& one,
               std::int64_t ms);
  // Rebuilds the due index when most of its items are stale. REQUIRES:
  // mutex_.
  void compact_due();

  // The API's read-modify-write of one schedule: waits for it to be idle,
  // applies `change` to a copy of its state, writes it, then applies it.
  // `change` answers the view to return, or an error (nothing written).
  result<json> modify(
      const std::string& tenant, const std::string& id,
      const std::function<result<json>(entry&, schedule_state&)>& change);
  // Until the schedule is not busy (or gone): timeout after idle_wait_max,
  // shutting-down once the service stops. REQUIRES: lock held.
  status wait_idle(lock_type& lock, std::uint32_t shard, const std::string& key,
                   const std::string& id);
  // The shard of the schedule, loaded; schedule-not-found etc. as errors.
  result<std::uint32_t> home(lock_type& lock, const std::string& tenant,
                             const std::string& id);
  status write_now(std::uint32_t shard, const std::string& key,
                   const entry& one, const schedule_state& state,
                   lock_type& lock);
  json view(const entry& one) const;

  node& node_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;  // the loop
  std::condition_variable idle_;  // an entry stopped being busy
  // Keys of the schedules an API change waits on (idle_ is told only when
  // one of them settles, not at every firing). REQUIRES: mutex_.
  std::map<std::string, int> idle_waiters_;
  std::vector<part> parts_;
  // Every schedule's due time, soonest first, so that a pass of the loop
  // looks only at the schedules due (not at every one). Each set_due adds
  // an item; an item whose entry is gone, busy, or due at another time
  // now is stale and skipped when it comes up.
  struct due_item {
    std::int64_t ms;
    std::uint32_t shard;
    std::string key;
    bool operator>(const due_item& other) const { return ms > other.ms; }
  };
  std::priority_queue<due_item, std::vector<due_item>, std::greater<>> due_;
  // When the waiting loop wakes by itself; INT64_MIN while it runs (it
  // reads the index before it waits again).
  std::int64_t loop_wake_ms_ = INT64_MIN;
  struct pending_start {
    start_request request;
    std::function<void(result<run_info>)> done;
  };
  std::vector<pending_start> starts_;  // queued under mutex_
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace durin::services
