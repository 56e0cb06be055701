// The schedule service (services/schedule_service.hpp): the firing loop,
// the two-write firing, overlap and catch-up, and the API's changes.
#include "services/schedule_service.hpp"

// GCC 12 reports the error side of a result<run_info> moved through a
// std::function's call as maybe uninitialized (as in services/start.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
#include <cstdio>
#include <future>

#include "actors/messages.hpp"
#include "actors/run_engine.hpp"
#include "base/json_text.hpp"
#include "base/time_text.hpp"
#include "durin/ids.hpp"
#include "durin/limits.hpp"
#include "persistence/keys.hpp"
#include "persistence/schedules.hpp"
#include "persistence/test_points.hpp"
#include "services/node.hpp"
#include "services/start.hpp"

namespace durin::services {

namespace {

// The loop looks at every shard's usability at least this often, and
// waits no longer between firings.
constexpr std::int64_t idle_wait_ms_max = 100;
// After a write or a start that failed, the schedule is looked at again
// after this.
constexpr std::int64_t retry_ms = 1000;
// Buffered occurrences wait for the running runs to end: looked at this
// often.
constexpr std::int64_t overlap_poll_ms = 250;
// An API change waits this long for the schedule's firing in flight.
constexpr auto idle_wait_max = std::chrono::seconds(10);
// Runs a schedule remembers as running (for its overlap policy).
constexpr std::size_t running_max = 1000;
constexpr std::int64_t catchup_window_ms_max = 366LL * 24 * 3600 * 1000;
// Occurrences counted one by one when a cron catches up; beyond, the
// schedule jumps to now and the count stops there.
constexpr std::uint64_t catchup_count_max = 1'000'000;

error not_found(const std::string& id) {
  return make_error(errc::schedule_not_found,
                    "no schedule with id '" + id + "'");
}

json time_json(std::int64_t ms) {
  return ms < 0 ? json(nullptr) : json(time_text::format_rfc3339_ms(ms));
}

json firing_json(const schedule_state::firing& one) {
  return {{"occurrence", time_text::format_rfc3339_ms(one.occurrence_ms)},
          {"runId", one.run_id}};
}

}  // namespace

std::string_view to_string(overlap_policy policy) {
  switch (policy) {
    case overlap_policy::skip:
      return "skip";
    case overlap_policy::buffer_one:
      return "buffer_one";
    case overlap_policy::buffer_all:
      return "buffer_all";
    case overlap_policy::allow_all:
      return "allow_all";
    case overlap_policy::cancel_other:
      return "cancel_other";
    case overlap_policy::terminate_other:
      return "terminate_other";
  }
  return "skip";
}

std::optional<overlap_policy> parse_overlap(std::string_view text) {
  for (auto policy :
       {overlap_policy::skip, overlap_policy::buffer_one,
        overlap_policy::buffer_all, overlap_policy::allow_all,
        overlap_policy::cancel_other, overlap_policy::terminate_other}) {
    if (text == to_string(policy)) {
      return policy;
    }
  }
  return std::nullopt;
}

// ---- definition and state
// ----------------------------------------------------

namespace {

error bad_definition(const std::string& message) {
  return make_error(errc::invalid_argument, message);
}

// The schedule's "action": the flow each firing starts, with what it gets.
status parse_action(const json& body, schedule_definition& out) {
  const auto* action = body.contains("action") ? &body["action"] : nullptr;
  if (action == nullptr || !action->is_object() || !action->contains("flow") ||
      !(*action)["flow"].is_string()) {
    return bad_definition(
        "missing field 'action.flow' (the flow each firing starts)");
  }
  if (auto problem = unknown_field(
          *action, {"flow", "input", "memo", "searchAttributes"}, "action.")) {
    return bad_definition(*problem);
  }
  out.flow = (*action)["flow"].get<std::string>();
  if (out.flow.empty() || out.flow.size() > limits::flow_name_bytes_max) {
    return bad_definition("action.flow is 1 to 128 bytes");
  }
  if (action->contains("input")) {
    out.input = (*action)["input"];
  }
  if (action->contains("memo")) {
    out.memo = (*action)["memo"];
    // Measured as a start measures it, so that no firing refuses what the
    // create took.
    std::string encoded;
    if (auto problem = actors::encode_memo(out.memo, "action.memo", encoded);
        !problem.empty()) {
      return bad_definition(problem);
    }
  }
  if (action->contains("searchAttributes") &&
      !(*action)["searchAttributes"].is_null()) {
    auto attributes =
        search_attributes_from_json((*action)["searchAttributes"]);
    if (!attributes) {
      return bad_definition("action.searchAttributes: " +
                            attributes.error().message);
    }
    out.search = std::move(*attributes);
  }
  return {};
}

// "overlap", "catchupWindow", "paused" and "note", each optional.
status parse_policies(const json& body, schedule_definition& out) {
  if (body.contains("overlap")) {
    auto policy = body["overlap"].is_string()
                      ? parse_overlap(body["overlap"].get<std::string>())
                      : std::nullopt;
    if (!policy) {
      return bad_definition(
          "overlap must be one of skip, buffer_one, buffer_all, "
          "allow_all, cancel_other, terminate_other");
    }
    out.overlap = *policy;
  }
  if (body.contains("catchupWindow")) {
    const auto& window = body["catchupWindow"];
    std::optional<double> ms;
    if (window.is_number()) {
      ms = window.get<double>();
    } else if (window.is_string()) {
      ms = time_text::parse_duration_ms(window.get<std::string>());
    }
    if (!ms || *ms < 0 || *ms > static_cast<double>(catchup_window_ms_max)) {
      return bad_definition(
          "catchupWindow must be a duration (\"1m\", \"1h\", or "
          "milliseconds) from 0 to 366 days");
    }
    out.catchup_window_ms = static_cast<std::int64_t>(*ms);
  }
  if (body.contains("paused") && !body["paused"].is_boolean()) {
    return bad_definition("paused must be true or false");
  }
  if (body.contains("note") &&
      (!body["note"].is_string() ||
       body["note"].get<std::string>().size() > 1024)) {
    return bad_definition("note must be a string of at most 1024 bytes");
  }
  return {};
}

}  // namespace

result<schedule_definition> schedule_definition::from_json(const json& body) {
  if (auto problem =
          unknown_field(body, {"scheduleId", "spec", "action", "overlap",
                               "catchupWindow", "paused", "note"})) {
    return bad_definition(*problem);
  }
  schedule_definition out;
  if (!body.contains("scheduleId") || !body["scheduleId"].is_string()) {
    return bad_definition("missing field 'scheduleId' (a string)");
  }
  out.id = body["scheduleId"].get<std::string>();
  if (auto problem = id_problem("scheduleId", out.id, schedule_id_bytes_max);
      !problem.empty()) {
    return bad_definition(problem);
  }
  if (!body.contains("spec")) {
    return bad_definition("missing field 'spec'");
  }
  auto spec = schedule_spec::from_json(body["spec"]);
  if (!spec) {
    return spec.error();
  }
  out.spec = std::move(*spec);
  if (auto action = parse_action(body, out); !action) {
    return action.error();
  }
  if (auto policies = parse_policies(body, out); !policies) {
    return policies.error();
  }
  return out;
}

namespace {

// What a create asks for, as compared with an earlier create of the id:
// every field with its default made explicit and durations in ms, so that
// a default sent explicitly, "1m" for 60000 or another key order is the
// same definition.
std::string meaning_of(const schedule_definition& definition,
                       const json& body) {
  json action = {{"flow", definition.flow},
                 {"input", definition.input},
                 {"memo", definition.memo},
                 {"searchAttributes", to_json(definition.search)}};
  return json{{"scheduleId", definition.id},
              {"spec", definition.spec.to_json()},
              {"action", std::move(action)},
              {"overlap", to_string(definition.overlap)},
              {"catchupWindow", definition.catchup_window_ms},
              {"paused", body.value("paused", false)},
              {"note", body.value("note", std::string())}}
      .dump();
}

}  // namespace

json schedule_state::to_json() const {
  json out = {
      {"nextMs", next_ms},
      {"fired", fired},
      {"missedCatchup", missed_catchup},
      {"skippedOverlap", skipped_overlap},
      {"running", running},
      {"buffered",
       json(std::vector<std::int64_t>(buffered.begin(), buffered.end()))},
      {"queued", json(std::vector<std::int64_t>(queued.begin(), queued.end()))},
      {"paused", paused},
      {"note", note},
      {"lastError", last_error},
      {"createdAtMs", created_at_ms},
      {"updatedAtMs", updated_at_ms}};
  auto firing_record = [](const firing& one) {
    return json{{"occurrenceMs", one.occurrence_ms}, {"runId", one.run_id}};
  };
  out["last"] = last ? firing_record(*last) : json(nullptr);
  json recent_json = json::array();
  for (const auto& one : recent) {
    recent_json.push_back(firing_record(one));
  }
  out["recent"] = std::move(recent_json);
  return out;
}

result<schedule_state> schedule_state::from_json(const json& state) {
  try {
    schedule_state out;
    out.next_ms = state.at("nextMs").get<std::int64_t>();
    out.fired = state.at("fired").get<std::uint64_t>();
    out.missed_catchup = state.at("missedCatchup").get<std::uint64_t>();
    out.skipped_overlap = state.at("skippedOverlap").get<std::uint64_t>();
    out.running = state.at("running").get<std::vector<std::string>>();
    for (auto ms : state.at("buffered").get<std::vector<std::int64_t>>()) {
      out.buffered.push_back(ms);
    }
    for (auto ms : state.at("queued").get<std::vector<std::int64_t>>()) {
      out.queued.push_back(ms);
    }
    out.paused = state.at("paused").get<bool>();
    out.note = state.at("note").get<std::string>();
    out.last_error = state.at("lastError").get<std::string>();
    out.created_at_ms = state.at("createdAtMs").get<std::int64_t>();
    out.updated_at_ms = state.at("updatedAtMs").get<std::int64_t>();
    auto firing_of = [](const json& one) {
      return firing{one.at("occurrenceMs").get<std::int64_t>(),
                    one.at("runId").get<std::string>()};
    };
    if (!state.at("last").is_null()) {
      out.last = firing_of(state.at("last"));
    }
    for (const auto& one : state.at("recent")) {
      out.recent.push_back(firing_of(one));
    }
    return out;
  } catch (const json::exception& e) {
    return make_error(errc::corrupt_record,
                      std::string("schedule state: ") + e.what());
  }
}

// ---- the service
// ---------------------------------------------------------------

schedule_service::schedule_service(node& owner)
    : node_(owner), parts_(owner.shards.size()) {}

schedule_service::~schedule_service() {
  stop();
}

void schedule_service::start() {
  thread_ = std::thread([this] { run(); });
}

void schedule_service::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  idle_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
}

std::size_t schedule_service::loaded() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t count = 0;
  for (const auto& one : parts_) {
    count += one.entries.size();
  }
  return count;
}

bool schedule_service::usable(std::uint32_t shard) const {
  const auto& one = *node_.shards[shard];
  return one.store->ready() && !node::serves_no_more(one);
}

void schedule_service::follow_shards() {
  for (std::uint32_t shard = 0; shard < parts_.size(); ++shard) {
    auto& one = parts_[shard];
    const bool now_usable = usable(shard);
    if (one.loaded && !now_usable) {
      // Another node's, or reopening: its record is the truth when it
      // comes back; firings in flight find a newer generation and stop.
      one.entries.clear();
      one.loaded = false;
      ++one.generation;
    } else if (!one.loaded && now_usable) {
      if (auto loaded = load(shard); !loaded) {
        std::fprintf(stderr, "durin: schedules of shard %u not loaded: %s\n",
                     shard, loaded.error().to_string().c_str());
      }
    }
  }
}

status schedule_service::load(std::uint32_t shard) {
  auto& one = parts_[shard];
  std::map<std::string, entry> entries;
  status problem;
  auto scanned = persistence::scan_schedules(
      *node_.shards[shard]->store,
      [&](const std::string& tenant, const std::string& id,
          result<json> record) {
        if (!record) {
          problem = record.error();
          return false;
        }
        auto definition =
            schedule_definition::from_json(record->value("definition", json()));
        auto state = schedule_state::from_json(record->value("state", json()));
        if (!definition || !state) {
          problem = make_error(errc::corrupt_record,
                               "schedule '" + id + "' of tenant '" + tenant +
                                   "' does not decode");
          return false;
        }
        entry loaded;
        loaded.tenant = tenant;
        loaded.definition = std::move(*definition);
        loaded.canonical = (*record)["definition"].dump();
        loaded.state = std::move(*state);
        // The last firing's run may not have been admitted before a crash
        // or a move: looked up before anything else fires.
        loaded.unconfirmed = loaded.state.last.has_value();
        loaded.due_ms = 0;
        entries.emplace(persistence::keys::schedule(tenant, id),
                        std::move(loaded));
        return true;
      });
  if (!scanned) {
    return scanned;
  }
  if (!problem) {
    return problem;
  }
  one.entries = std::move(entries);
  one.loaded = true;
  ++one.generation;
  for (auto& [key, loaded] : one.entries) {
    set_due(shard, key, loaded, 0);
  }
  return {};
}

void schedule_service::run() {
  lock_type lock(mutex_);
  std::vector<due_item> ready;
  while (!stopping_) {
    follow_shards();
    const auto now = node_.clock->now_ms();
    // Taken out first: a schedule due again at once waits for the next
    // pass.
    ready.clear();
    while (!due_.empty() && due_.top().ms <= now) {
      ready.push_back(due_.top());
      due_.pop();
    }
    for (const auto& item : ready) {
      auto& entries = parts_[item.shard].entries;
      auto found = entries.find(item.key);
      if (found == entries.end() || found->second.busy ||
          found->second.due_ms != item.ms) {
        continue;  // stale
      }
      step(item.shard, item.key, found->second, now);
    }
    run_starts(lock);
    compact_due();
    std::int64_t wake_at = now + idle_wait_ms_max;
    if (!due_.empty()) {
      wake_at = std::min(wake_at, due_.top().ms);
    }
    if (wake_at > now && !stopping_) {
      loop_wake_ms_ = wake_at;
      wake_.wait_for(lock, std::chrono::milliseconds(wake_at - now));
      loop_wake_ms_ = INT64_MIN;
    }
  }
}

void schedule_service::compact_due() {
  std::size_t entries = 0;
  for (const auto& one : parts_) {
    entries += one.entries.size();
  }
  if (due_.size() <= 2 * entries + 1024) {
    return;
  }
  // Mostly stale items (schedules of shards dropped, due times set again
  // before they came up): one item per idle schedule instead.
  decltype(due_) fresh;
  for (std::uint32_t shard = 0; shard < parts_.size(); ++shard) {
    for (const auto& [key, one] : parts_[shard].entries) {
      if (!one.busy && one.due_ms != INT64_MAX) {
        fresh.push({one.due_ms, shard, key});
      }
    }
  }
  due_ = std::move(fresh);
}

void schedule_service::set_due(std::uint32_t shard, const std::string& key,
                               entry& one, std::int64_t ms) {
  one.due_ms = ms;
  if (ms == INT64_MAX) {
    return;
  }
  due_.push({ms, shard, key});
  if (ms < loop_wake_ms_) {
    wake_.notify_all();
  }
}

std::int64_t schedule_service::due_of(const entry& one,
                                      std::int64_t now_ms) const {
  const auto& state = one.state;
  if (one.unconfirmed || !state.queued.empty()) {
    return now_ms;
  }
  std::int64_t due = INT64_MAX;
  if (!state.buffered.empty()) {
    due = now_ms + overlap_poll_ms;
  }
  if (!state.paused && state.next_ms >= 0) {
    due = std::min(
        due, state.next_ms + one.definition.spec.jitter_of(
                                 one.tenant, one.definition.id, state.next_ms));
  }
  return due;
}

namespace {

// Whether a run a schedule remembers has ended. Unreadable: no (it may be
// running); absent: as `absent` says (a start refused, at the next firing;
// a start on its way, in a view).
bool run_ended(const persistence::store& store, const std::string& run_id,
               bool absent) {
  auto record = store.get_run(run_id);
  return record && (!*record ? absent : is_terminal((*record)->status));
}

}  // namespace

void schedule_service::prune_running(std::uint32_t shard,
                                     schedule_state& state) const {
  const auto& store = *node_.shards[shard]->store;
  std::erase_if(state.running, [&](const std::string& run_id) {
    return run_ended(store, run_id, true);
  });
}

void schedule_service::show_running_now(std::uint32_t shard, json& view) const {
  const auto& store = *node_.shards[shard]->store;
  json now = json::array();
  for (const auto& run_id : view["info"]["running"]) {
    if (!run_ended(store, run_id.get<std::string>(), false)) {
      now.push_back(run_id);
    }
  }
  view["info"]["running"] = std::move(now);
}

bool schedule_service::watch_running(std::uint32_t shard,
                                     const std::string& key, entry& one) {
  if (one.state.buffered.empty()) {
    return false;
  }
  const auto generation = parts_[shard].generation;
  bool added = false;
  for (const auto& run_id : one.state.running) {
    if (!one.watched.insert(run_id).second) {
      continue;
    }
    added = true;
    // Told on the run's actor thread: it only marks the schedule due.
    node_.events.subscribe(run_id, run_events::until::ended,
                           [this, shard, generation, key](const run_event&) {
                             std::lock_guard<std::mutex> lock(mutex_);
                             auto& one_part = parts_[shard];
                             auto found = one_part.entries.find(key);
                             if (one_part.generation == generation &&
                                 found != one_part.entries.end()) {
                               set_due(shard, key, found->second, 0);
                             }
                           });
  }
  return added;
}

void schedule_service::step(std::uint32_t shard, const std::string& key,
                            entry& one, std::int64_t now_ms) {
  if (one.unconfirmed) {
    auto found = node_.shards[shard]->store->get_run(one.state.last->run_id);
    if (!found) {
      // The store cannot tell: again later.
      set_due(shard, key, one, now_ms + retry_ms);
      return;
    }
    if (*found) {
      one.unconfirmed = false;
    } else {
      start_last(shard, key, one);  // the crash fell between the writes
      return;
    }
  }
  auto next = one.state;
  const auto& definition = one.definition;
  std::optional<std::int64_t> occurrence;
  bool by_policy = true;
  bool changed = false;
  if (!next.queued.empty()) {
    occurrence = next.queued.front();
    next.queued.pop_front();
    changed = true;
  } else if (!next.buffered.empty()) {
    prune_running(shard, next);
    if (next.running.empty()) {
      occurrence = next.buffered.front();
      next.buffered.pop_front();
      by_policy = false;
      changed = true;
    }
  }
  if (!occurrence && !next.paused && next.next_ms >= 0 &&
      next.next_ms + definition.spec.jitter_of(one.tenant, definition.id,
                                               next.next_ms) <=
          now_ms) {
    const std::int64_t oldest = now_ms - definition.catchup_window_ms;
    if (next.next_ms < oldest) {
      // Missed beyond the catch-up window: skipped, and counted.
      std::uint64_t missed = 0;
      while (next.next_ms >= 0 && next.next_ms < oldest &&
             missed < catchup_count_max) {
        if (definition.spec.interval_ms > 0) {
          auto behind =
              (oldest - next.next_ms + definition.spec.interval_ms - 1) /
              definition.spec.interval_ms;
          missed += static_cast<std::uint64_t>(behind);
          next.next_ms =
              definition.spec
                  .next_after(next.next_ms +
                              (behind - 1) * definition.spec.interval_ms)
                  .value_or(-1);
        } else {
          ++missed;
          next.next_ms = definition.spec.next_after(next.next_ms).value_or(-1);
        }
      }
      if (next.next_ms >= 0 && next.next_ms < oldest) {
        next.next_ms = definition.spec.next_after(now_ms).value_or(-1);
      }
      next.missed_catchup += missed;
      changed = true;
    }
    if (next.next_ms >= 0 && next.next_ms <= now_ms &&
        next.next_ms + definition.spec.jitter_of(one.tenant, definition.id,
                                                 next.next_ms) <=
            now_ms) {
      occurrence = next.next_ms;
      next.next_ms = definition.spec.next_after(next.next_ms).value_or(-1);
      changed = true;
    }
  }
  bool fire = occurrence.has_value();
  if (fire && by_policy) {
    prune_running(shard, next);
    if (!next.running.empty()) {
      switch (definition.overlap) {
        case overlap_policy::skip:
          ++next.skipped_overlap;
          fire = false;
          break;
        case overlap_policy::buffer_one:
        case overlap_policy::buffer_all: {
          const std::size_t room =
              definition.overlap == overlap_policy::buffer_one ? 1
                                                               : buffered_max;
          if (next.buffered.size() < room) {
            next.buffered.push_back(*occurrence);
          } else {
            ++next.skipped_overlap;
          }
          fire = false;
          break;
        }
        case overlap_policy::allow_all:
          break;
        case overlap_policy::cancel_other:
        case overlap_policy::terminate_other:
          // The runs are told to stop now (terminate_other: a forced stop
          // that runs none of their code); the new one does not wait.
          for (const auto& run_id : next.running) {
            const bool terminate =
                definition.overlap == overlap_policy::terminate_other;
            node_.relay->ask<run_info>(
                node_.runs_of(run_id), run_id, [](result<run_info>) {},
                actors::cancel_atom::value,
                actors::cancel_request{
                    std::string(terminate ? "terminated" : "cancelled") +
                        " by schedule '" + definition.id +
                        "': a newer occurrence started (overlap " +
                        std::string(to_string(definition.overlap)) + ")",
                    "", terminate});
          }
          break;
      }
    }
  }
  if (fire) {
    schedule_state::firing firing{*occurrence, node_.new_run_id(shard)};
    next.last = firing;
    next.running.push_back(firing.run_id);
    if (next.running.size() > running_max) {
      // allow_all with runs that never end: the oldest are forgotten (the
      // list only serves overlap decisions), so the record stays bounded.
      next.running.erase(next.running.begin());
    }
    ++next.fired;
    next.recent.push_back(firing);
    if (next.recent.size() > recent_firings_max) {
      next.recent.erase(next.recent.begin());
    }
  }
  if (!changed && !fire) {
    // A run that ended before its subscription is found by one more look.
    set_due(shard, key, one,
            watch_running(shard, key, one) ? now_ms : due_of(one, now_ms));
    return;
  }
  write_state(shard, key, one, std::move(next), fire);
}

void schedule_service::write_state(std::uint32_t shard, const std::string& key,
                                   entry& one, schedule_state next, bool fire) {
  next.updated_at_ms = node_.clock->now_ms();
  auto& home = *node_.shards[shard];
  auto batch = home.store->batch();
  persistence::put_schedule(batch, one.tenant, one.definition.id,
                            json{{"definition", json::parse(one.canonical)},
                                 {"state", next.to_json()}});
  one.busy = true;
  const auto generation = parts_[shard].generation;
  home.committer->submit(std::move(batch),
                         [this, shard, generation, key, fire,
                          next = std::move(next)](const status& written) {
                           settle(shard, generation, key, [&](entry& again) {
                             if (!written) {
                               again.due_ms = node_.clock->now_ms() + retry_ms;
                               return;
                             }
                             again.state = next;
                             if (fire) {
                               DURIN_TEST_KILL_POINT("schedule.after_mark");
                               again.unconfirmed = true;
                               start_last(shard, key, again);
                             }
                           });
                         });
}

void schedule_service::start_last(std::uint32_t shard, const std::string& key,
                                  entry& one) {
  const auto& last = *one.state.last;
  start_request start;
  start.flow = one.definition.flow;
  start.input = one.definition.input;
  start.options.tenant = one.tenant;
  start.options.memo = one.definition.memo;
  start.options.search = one.definition.search;
  start.run_id = last.run_id;
  start.schedule_id = one.definition.id;
  start.occurrence_ms = last.occurrence_ms;
  one.busy = true;
  const auto generation = parts_[shard].generation;
  starts_.push_back({std::move(start),
                     [this, shard, generation, key](result<run_info> started) {
                       if (started) {
                         DURIN_TEST_KILL_POINT("schedule.after_start");
                       }
                       settle(shard, generation, key, [&](entry& again) {
                         if (started) {
                           again.unconfirmed = false;
                           again.state.last_error.clear();
                           return;
                         }
                         if (start_outcome_indefinite(started.error().code)) {
                           // May or may not be admitted: looked up again later.
                           again.due_ms = node_.clock->now_ms() + retry_ms;
                           return;
                         }
                         // Refused for certain (the flow is gone, its input
                         // does not convert): this occurrence has no run; said
                         // on the schedule, kept with its next write.
                         again.unconfirmed = false;
                         again.state.last_error = started.error().to_string();
                         std::erase(again.state.running,
                                    again.state.last->run_id);
                       });
                     }});
}

void schedule_service::run_starts(lock_type& lock) {
  if (starts_.empty()) {
    return;
  }
  auto starts = std::move(starts_);
  starts_.clear();
  // Outside the lock: a start refused at once answers on this thread, and
  // its answer takes the lock.
  lock.unlock();
  for (auto& one : starts) {
    start_run(node_, std::move(one.request), std::move(one.done));
  }
  lock.lock();
}

void schedule_service::settle(std::uint32_t shard, std::uint64_t generation,
                              const std::string& key,
                              const std::function<void(entry&)>& change) {
  {
    lock_type lock(mutex_);
    auto& one = parts_[shard];
    if (one.generation != generation) {
      return;  // dropped meanwhile: the loaded record is the truth
    }
    auto found = one.entries.find(key);
    if (found == one.entries.end()) {
      return;
    }
    auto& settled = found->second;
    settled.busy = false;
    settled.due_ms = node_.clock->now_ms();
    change(settled);  // may set a later due_ms, or start again (busy)
    if (!settled.busy) {
      const auto now = node_.clock->now_ms();
      set_due(shard, key, settled,
              watch_running(shard, key, settled)
                  ? now
                  : std::max(settled.due_ms, due_of(settled, now)));
    }
    run_starts(lock);
    if (idle_waiters_.count(key) == 0) {
      return;  // nobody waits for this one (an API change)
    }
  }
  idle_.notify_all();
}

// ---- the API
// ---------------------------------------------------------------------

json schedule_service::view(const entry& one) const {
  const auto& state = one.state;
  json recent = json::array();
  for (const auto& firing : state.recent) {
    recent.push_back(firing_json(firing));
  }
  json out = json::parse(one.canonical);
  out["spec"] = one.definition.spec.to_json();
  out["overlap"] = std::string(to_string(one.definition.overlap));
  out["catchupWindow"] = one.definition.catchup_window_ms;
  out["action"] = {{"flow", one.definition.flow},
                   {"input", one.definition.input}};
  if (!one.definition.memo.is_null()) {
    out["action"]["memo"] = one.definition.memo;
  }
  if (!one.definition.search.empty()) {
    out["action"]["searchAttributes"] = to_json(one.definition.search);
  }
  out["paused"] = state.paused;
  out["note"] = state.note;
  out["nextOccurrence"] =
      state.paused ? json(nullptr) : time_json(state.next_ms);
  out["info"] = {
      {"fired", state.fired},
      {"missedCatchup", state.missed_catchup},
      {"skippedOverlap", state.skipped_overlap},
      {"running", state.running},
      {"buffered", state.buffered.size()},
      {"queued", state.queued.size()},
      {"lastFiring", state.last ? firing_json(*state.last) : json(nullptr)},
      {"recent", std::move(recent)},
      {"lastError",
       state.last_error.empty() ? json(nullptr) : json(state.last_error)},
      {"createdAt", time_json(state.created_at_ms)},
      {"updatedAt", time_json(state.updated_at_ms)}};
  return out;
}

result<std::uint32_t> schedule_service::home(lock_type& lock,
                                             const std::string& tenant,
                                             const std::string& id) {
  (void)lock;
  if (auto problem =
          id_length_problem("a schedule id", id, schedule_id_bytes_max);
      !problem.empty()) {
    return make_error(errc::invalid_argument, problem);
  }
  if (node_.closing) {
    return make_error(errc::shutting_down, "the runtime is closing");
  }
  const auto shard = node_.map.of_schedule(tenant, id);
  auto& one = parts_[shard];
  if (!one.loaded) {
    if (!usable(shard)) {
      return node_.shards[shard]->store->ready()
                 ? make_error(errc::shutting_down,
                              "this node does not serve the schedule's "
                              "shard now")
                 : node_.shards[shard]->store->unavailable();
    }
    if (auto loaded = load(shard); !loaded) {
      return loaded.error();
    }
  }
  return shard;
}

status schedule_service::write_now(std::uint32_t shard, const std::string& key,
                                   const entry& one,
                                   const schedule_state& state,
                                   lock_type& lock) {
  (void)key;
  auto& home_shard = *node_.shards[shard];
  auto batch = home_shard.store->batch();
  persistence::put_schedule(batch, one.tenant, one.definition.id,
                            json{{"definition", json::parse(one.canonical)},
                                 {"state", state.to_json()}});
  auto written = std::make_shared<std::promise<status>>();
  auto outcome = written->get_future();
  home_shard.committer->submit(std::move(batch), [written](const status& done) {
    written->set_value(done);
  });
  lock.unlock();
  auto result_of = outcome.get();
  lock.lock();
  return result_of;
}

result<json> schedule_service::create(const std::string& tenant,
                                      const json& body) {
  if (!body.is_object()) {
    return make_error(errc::invalid_argument, "the body must be an object");
  }
  auto definition = schedule_definition::from_json(body);
  if (!definition) {
    return definition.error();
  }
  if (node_.flows.find_flow(definition->flow) == nullptr) {
    return make_error(errc::flow_not_found,
                      "no flow registered under '" + definition->flow + "'");
  }
  // As a start would be refused (nothing fixed: no run has them yet).
  if (auto checked = node_.search.check(tenant, definition->search); !checked) {
    return make_error(errc::invalid_argument,
                      "action.searchAttributes: " + checked.error().message);
  }
  lock_type lock(mutex_);
  auto shard = home(lock, tenant, definition->id);
  if (!shard) {
    return shard.error();
  }
  const auto key = persistence::keys::schedule(tenant, definition->id);
  const auto canonical = body.dump();
  auto& entries = parts_[*shard].entries;
  if (auto found = entries.find(key); found != entries.end()) {
    if (meaning_of(found->second.definition,
                   json::parse(found->second.canonical)) !=
        meaning_of(*definition, body)) {
      return make_error(errc::schedule_exists,
                        "schedule '" + definition->id +
                            "' exists with another definition; delete it "
                            "first or choose another id");
    }
    auto out = view(found->second);
    out["created"] = false;
    return out;
  }
  entry fresh;
  fresh.tenant = tenant;
  fresh.definition = std::move(*definition);
  fresh.canonical = canonical;
  const auto now = node_.clock->now_ms();
  fresh.state.created_at_ms = now;
  fresh.state.updated_at_ms = now;
  fresh.state.paused = body.value("paused", false);
  fresh.state.note = body.value("note", std::string());
  fresh.state.next_ms = fresh.definition.spec.next_after(now).value_or(-1);
  fresh.busy = true;
  const auto generation = parts_[*shard].generation;
  auto [at, inserted] = entries.emplace(key, std::move(fresh));
  (void)inserted;
  auto copy = at->second;
  auto written = write_now(*shard, key, copy, copy.state, lock);
  auto& part = parts_[*shard];
  if (part.generation != generation) {
    return written ? make_error(errc::shutting_down,
                                "the schedule's shard moved while it was "
                                "created; its record is durable")
                   : written.error();
  }
  if (!written) {
    part.entries.erase(key);
    idle_.notify_all();
    return make_error(
        errc::storage_error,
        "the schedule may or may not be created: " + written.error().message);
  }
  auto& made = part.entries.at(key);
  made.busy = false;
  set_due(*shard, key, made, due_of(made, node_.clock->now_ms()));
  idle_.notify_all();
  auto out = view(made);
  out["created"] = true;
  return out;
}

status schedule_service::wait_idle(lock_type& lock, std::uint32_t shard,
                                   const std::string& key,
                                   const std::string& id) {
  const auto deadline = std::chrono::steady_clock::now() + idle_wait_max;
  ++idle_waiters_[key];
  status outcome;
  for (;;) {
    auto& entries = parts_[shard].entries;
    auto found = entries.find(key);
    if (found == entries.end() || !found->second.busy) {
      break;
    }
    if (stopping_) {
      outcome = make_error(errc::shutting_down, "the runtime is closing");
      break;
    }
    if (idle_.wait_until(lock, deadline) == std::cv_status::timeout) {
      outcome = make_error(errc::timeout,
                           "schedule '" + id + "' is busy firing; try again");
      break;
    }
  }
  if (--idle_waiters_[key] == 0) {
    idle_waiters_.erase(key);
  }
  return outcome;
}

result<json> schedule_service::modify(
    const std::string& tenant, const std::string& id,
    const std::function<result<json>(entry&, schedule_state&)>& change) {
  lock_type lock(mutex_);
  auto shard = home(lock, tenant, id);
  if (!shard) {
    return shard.error();
  }
  const auto key = persistence::keys::schedule(tenant, id);
  auto find = [&]() -> entry* {
    auto& entries = parts_[*shard].entries;
    auto found = entries.find(key);
    return found == entries.end() ? nullptr : &found->second;
  };
  if (auto idle = wait_idle(lock, *shard, key, id); !idle) {
    return idle.error();
  }
  auto* one = find();
  if (one == nullptr) {
    return not_found(id);
  }
  auto next = one->state;
  auto answer = change(*one, next);
  if (!answer) {
    return answer;
  }
  next.updated_at_ms = node_.clock->now_ms();
  const auto generation = parts_[*shard].generation;
  one->busy = true;
  auto copy = *one;
  auto written = write_now(*shard, key, copy, next, lock);
  if (parts_[*shard].generation != generation) {
    return make_error(errc::storage_error,
                      "the schedule's shard moved during the change; it may "
                      "or may not be made");
  }
  one = find();
  if (one == nullptr) {
    return not_found(id);
  }
  one->busy = false;
  if (written) {
    one->state = next;
  }
  set_due(*shard, key, *one, due_of(*one, node_.clock->now_ms()));
  idle_.notify_all();
  if (!written) {
    return make_error(
        errc::storage_error,
        "the change may or may not be made: " + written.error().message);
  }
  if (answer->is_null()) {
    return view(*one);
  }
  return answer;
}

result<json> schedule_service::get(const std::string& tenant,
                                   const std::string& id) {
  lock_type lock(mutex_);
  auto shard = home(lock, tenant, id);
  if (!shard) {
    return shard.error();
  }
  auto& entries = parts_[*shard].entries;
  auto found = entries.find(persistence::keys::schedule(tenant, id));
  if (found == entries.end()) {
    return not_found(id);
  }
  auto out = view(found->second);
  lock.unlock();
  show_running_now(*shard, out);
  return out;
}

result<json> schedule_service::list(const std::string& tenant,
                                    const std::string& after_id,
                                    std::size_t limit) {
  lock_type lock(mutex_);
  follow_shards();
  std::vector<std::pair<const entry*, std::uint32_t>> mine;
  for (std::uint32_t shard = 0; shard < parts_.size(); ++shard) {
    for (const auto& [key, candidate] : parts_[shard].entries) {
      (void)key;
      if (candidate.tenant == tenant && candidate.definition.id > after_id) {
        mine.emplace_back(&candidate, shard);
      }
    }
  }
  std::sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) {
    return a.first->definition.id < b.first->definition.id;
  });
  std::vector<std::pair<json, std::uint32_t>> views;
  for (const auto& [one, shard] : mine) {
    if (views.size() == limit) {
      break;
    }
    views.emplace_back(view(*one), shard);
  }
  const bool more = views.size() == limit && mine.size() > limit;
  lock.unlock();
  json page = json::array();
  for (auto& [one, shard] : views) {
    show_running_now(shard, one);
    page.push_back(std::move(one));
  }
  json next = more ? json(page.back()["scheduleId"]) : json(nullptr);
  return json{{"schedules", std::move(page)}, {"nextCursor", std::move(next)}};
}

result<json> schedule_service::pause(const std::string& tenant,
                                     const std::string& id, bool paused,
                                     const std::string& note) {
  if (note.size() > 1024) {
    return make_error(errc::invalid_argument, "a note is at most 1024 bytes");
  }
  const auto now = node_.clock->now_ms();
  return modify(
      tenant, id, [&](entry& one, schedule_state& next) -> result<json> {
        if (next.paused && !paused) {
          // Occurrences during the pause are not caught up.
          next.next_ms = one.definition.spec.next_after(now).value_or(-1);
        }
        next.paused = paused;
        next.note = note;
        return json(nullptr);
      });
}

result<json> schedule_service::trigger(const std::string& tenant,
                                       const std::string& id) {
  const auto now = node_.clock->now_ms();
  return modify(tenant, id, [&](entry&, schedule_state& next) -> result<json> {
    if (next.queued.size() >= queued_max) {
      return make_error(errc::invalid_argument,
                        "schedule '" + id + "' has " +
                            std::to_string(queued_max) +
                            " occurrences queued already");
    }
    next.queued.push_back(now);
    return json{{"scheduleId", id},
                {"occurrence", time_text::format_rfc3339_ms(now)}};
  });
}

result<json> schedule_service::backfill(const std::string& tenant,
                                        const std::string& id,
                                        std::int64_t from_ms,
                                        std::int64_t to_ms) {
  if (to_ms < from_ms) {
    return make_error(errc::invalid_argument, "endAt is before startAt");
  }
  return modify(
      tenant, id, [&](entry& one, schedule_state& next) -> result<json> {
        std::vector<std::int64_t> found;
        auto at = one.definition.spec.next_after(from_ms - 1);
        while (at && *at <= to_ms) {
          if (found.size() == backfill_occurrences_max) {
            return make_error(errc::invalid_argument,
                              "the range holds more than " +
                                  std::to_string(backfill_occurrences_max) +
                                  " occurrences; backfill it in parts");
          }
          found.push_back(*at);
          at = one.definition.spec.next_after(*at);
        }
        if (next.queued.size() + found.size() > queued_max) {
          return make_error(errc::invalid_argument,
                            "schedule '" + id + "' would have more than " +
                                std::to_string(queued_max) +
                                " occurrences queued");
        }
        json times = json::array();
        for (auto ms : found) {
          next.queued.push_back(ms);
          times.push_back(time_text::format_rfc3339_ms(ms));
        }
        return json{{"scheduleId", id}, {"occurrences", std::move(times)}};
      });
}

status schedule_service::remove(const std::string& tenant,
                                const std::string& id) {
  lock_type lock(mutex_);
  auto shard = home(lock, tenant, id);
  if (!shard) {
    return shard.error();
  }
  const auto key = persistence::keys::schedule(tenant, id);
  if (auto idle = wait_idle(lock, *shard, key, id); !idle) {
    return idle.error();
  }
  auto& entries = parts_[*shard].entries;
  auto found = entries.find(key);
  if (found == entries.end()) {
    return not_found(id);
  }
  found->second.busy = true;
  const auto generation = parts_[*shard].generation;
  auto& home_shard = *node_.shards[*shard];
  auto batch = home_shard.store->batch();
  persistence::delete_schedule(batch, tenant, id);
  auto written = std::make_shared<std::promise<status>>();
  auto outcome = written->get_future();
  home_shard.committer->submit(std::move(batch), [written](const status& done) {
    written->set_value(done);
  });
  lock.unlock();
  auto deleted = outcome.get();
  lock.lock();
  if (parts_[*shard].generation == generation) {
    if (deleted) {
      parts_[*shard].entries.erase(key);
    } else if (auto again = parts_[*shard].entries.find(key);
               again != parts_[*shard].entries.end()) {
      again->second.busy = false;
      set_due(*shard, key, again->second, again->second.due_ms);
    }
  }
  idle_.notify_all();
  if (!deleted) {
    return make_error(
        errc::storage_error,
        "the schedule may or may not be deleted: " + deleted.error().message);
  }
  return {};
}

}  // namespace durin::services
