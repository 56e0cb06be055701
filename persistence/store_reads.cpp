// The store's reads: runs, a run's history, the active runs, due timers,
// the listing of runs, and raw values for the rest of persistence/. Each
// read pins the database (no reopen while it runs) and fails at once while
// the store is not ready; bad bytes are corrupt-record naming the family
// and run.
#include <rocksdb/db.h>
#include <rocksdb/iterator.h>

#include <memory>
#include <set>

#include "persistence/codec.hpp"
#include "persistence/keys.hpp"
#include "persistence/storage_error.hpp"
#include "persistence/store.hpp"
#include "persistence/store_internal.hpp"

namespace durin::persistence {

using namespace store_detail;

result<std::optional<run_record>> store::get_run(
    std::string_view run_id) const {
  using answer = result<std::optional<run_record>>;
  return guarded("get run", [&]() -> answer {
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    if (!keys::fits(run_id)) {
      return std::optional<run_record>();  // no key can name it
    }
    rocksdb::PinnableSlice value;
    const rocksdb::Status read =
        db_->Get(rocksdb::ReadOptions(), handle(family::runs),
                 keys::run(run_id), &value);
    if (read.IsNotFound()) {
      return std::optional<run_record>();
    }
    auto subject = [&] { return "run " + printable(run_id); };
    if (!read.ok()) {
      return storage_failure("runs: read " + subject(), read);
    }
    auto decoded = codec::decode_run(view(value));
    if (!decoded) {
      return corrupt(family::runs, subject(), decoded.error().message);
    }
    if (decoded->id != run_id) {
      return corrupt(family::runs, subject(),
                     "value names run " + printable(decoded->id));
    }
    return std::optional<run_record>(std::move(*decoded));
  });
}

result<std::vector<event_record>> store::load_history(
    std::string_view run_id) const {
  using answer = result<std::vector<event_record>>;
  return guarded("load history", [&]() -> answer {
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    std::vector<event_record> events;
    if (!keys::fits(run_id)) {
      return events;
    }
    auto subject = [&] { return "run " + printable(run_id); };
    const std::string prefix = keys::history_prefix(run_id);
    const std::string upper = prefix_successor(prefix);
    const rocksdb::Slice upper_slice(upper);
    rocksdb::ReadOptions options;
    if (!upper.empty()) {
      options.iterate_upper_bound = &upper_slice;
    }
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(options, handle(family::history)));
    for (it->Seek(prefix); it->Valid() && starts_with(it->key(), prefix);
         it->Next()) {
      auto key = keys::decode_history(view(it->key()));
      if (!key || key->run_id != run_id) {
        return corrupt(family::history, subject(), "malformed key");
      }
      const std::uint64_t expected = events.size() + 1;
      if (key->sequence != expected) {
        return corrupt(family::history, subject(),
                       "sequence " + std::to_string(key->sequence) + " where " +
                           std::to_string(expected) +
                           " was expected (a gap in the history)");
      }
      auto event = codec::decode_event(view(it->value()));
      if (!event) {
        return corrupt(family::history,
                       subject() + " event " + std::to_string(expected),
                       event.error().message);
      }
      events.push_back(std::move(*event));
    }
    if (!it->status().ok()) {
      return storage_failure("history: read " + subject(), it->status());
    }
    return events;
  });
}

result<std::vector<std::string>> store::active_runs() const {
  using answer = result<std::vector<std::string>>;
  return guarded("active runs", [&]() -> answer {
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    std::vector<std::string> ids;
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions(), handle(family::active)));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      auto id = keys::decode_active(view(it->key()));
      if (!id) {
        return corrupt(family::active, "key " + printable(view(it->key())),
                       "malformed key");
      }
      if (auto marker = codec::decode_marker(view(it->value())); !marker) {
        return corrupt(family::active, "run " + printable(*id),
                       marker.error().message);
      }
      ids.push_back(std::move(*id));
    }
    if (!it->status().ok()) {
      return storage_failure("active: read", it->status());
    }
    return ids;
  });
}

result<std::vector<timer_record>> store::timers_until(
    std::int64_t until_ms, std::size_t max, std::string_view after_key) const {
  using answer = result<std::vector<timer_record>>;
  return guarded("timers until", [&]() -> answer {
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    std::vector<timer_record> timers;
    if (max == 0 || until_ms < 0) {
      return timers;
    }
    const std::string upper = keys::timer_upper_bound(until_ms);
    const rocksdb::Slice upper_slice(upper);
    rocksdb::ReadOptions options;
    options.iterate_upper_bound = &upper_slice;
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(options, handle(family::timers)));
    if (after_key.empty()) {
      it->SeekToFirst();
    } else {
      it->Seek(rocksdb::Slice(after_key.data(), after_key.size()));
      if (it->Valid() && view(it->key()) == after_key) {
        it->Next();
      }
    }
    for (; it->Valid() && timers.size() < max; it->Next()) {
      auto timer = keys::decode_timer(view(it->key()));
      if (!timer) {
        return corrupt(family::timers, "key " + printable(view(it->key())),
                       "malformed key");
      }
      if (auto marker = codec::decode_marker(view(it->value())); !marker) {
        return corrupt(family::timers,
                       "run " + printable(timer->run_id) + " timer due " +
                           std::to_string(timer->due_ms),
                       marker.error().message);
      }
      timers.push_back(std::move(*timer));
    }
    if (!it->status().ok()) {
      return storage_failure("timers: read", it->status());
    }
    return timers;
  });
}

result<store::run_scan> store::scan_runs(
    std::string_view before_id, std::optional<run_status> status,
    std::optional<std::string> flow, std::size_t max, std::size_t scan_max,
    std::optional<std::string> tenant, std::size_t bytes_max,
    std::optional<std::string> schedule_id, const run_query* query,
    run_list_path path) const {
  return guarded("scan runs", [&]() -> result<run_scan> {
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    if (max == 0 || scan_max == 0) {
      return make_error(errc::invalid_argument,
                        "scan_runs needs max and scan_max of at least 1");
    }
    if (!keys::fits(before_id)) {
      return make_error(errc::invalid_argument,
                        "cursor of " + std::to_string(before_id.size()) +
                            " bytes is not a run id");
    }
    const run_list_request request{
        before_id,         status,    std::move(flow),        max,  scan_max,
        std::move(tenant), bytes_max, std::move(schedule_id), query};
    if (path == run_list_path::best) {
      auto indexed = scan_by_index(request);
      if (!indexed) {
        return indexed.error();
      }
      if (indexed->has_value()) {
        return std::move(**indexed);
      }
    }
    return scan_every_run(request);
  });
}

result<store::run_scan> store::scan_every_run(
    const run_list_request& request) const {
  run_scan scan;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), handle(family::runs)));
  if (request.before_id.empty()) {
    it->SeekToLast();
  } else {
    // Strictly older: step past the cursor's own record if it exists.
    const std::string start = keys::run(request.before_id);
    it->SeekForPrev(start);
    if (it->Valid() && view(it->key()) == start) {
      it->Prev();
    }
  }
  std::size_t bytes = 0;
  std::string last_examined;
  for (; it->Valid(); it->Prev()) {
    ++scan.records_read;
    const auto id = keys::decode_run(view(it->key()));
    // A malformed key (keys::run never writes one) cannot be a cursor; if
    // it is the last examined, the listing ends there.
    last_examined = id ? *id : std::string();
    auto decoded = id ? codec::decode_run(view(it->value()))
                      : result<run_record>(
                            make_error(errc::corrupt_record, "malformed key"));
    // Skipped, not fatal: one bad record must not hide every other run.
    const bool readable = decoded.ok() && decoded->id == *id;
    if (readable && request.admits(*decoded)) {
      scan.runs.push_back(std::move(*decoded));
      scan.run_bytes.push_back(it->value().size());
      bytes += it->value().size();
    }
    if (request.ends(scan, bytes)) {
      it->Prev();
      break;
    }
  }
  if (!it->status().ok()) {
    return storage_failure("runs: scan", it->status());
  }
  // The iterator now sits on the next older record, if any: only then can
  // more remain.
  if (it->Valid()) {
    scan.next_before_id = last_examined;
  }
  return scan;
}

result<std::vector<store::search_type_entry>> store::search_attribute_types()
    const {
  using answer = result<std::vector<search_type_entry>>;
  return guarded("search attribute types", [&]() -> answer {
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    std::vector<search_type_entry> out;
    std::set<std::pair<std::string, std::string>> seen;
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions(), handle(family::runs)));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      auto decoded = codec::decode_run(view(it->value()));
      if (!decoded) {
        continue;  // get_run reports it
      }
      for (const auto& [name, value] : decoded->search) {
        if (seen.emplace(decoded->tenant, name).second) {
          out.push_back({decoded->tenant, name, value.type});
        }
      }
    }
    if (!it->status().ok()) {
      return storage_failure("runs: scan", it->status());
    }
    return out;
  });
}

result<std::optional<std::string>> store::get_value(
    family which, std::string_view key) const {
  using answer = result<std::optional<std::string>>;
  return guarded("get value", [&]() -> answer {
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    std::string value;
    const rocksdb::Status read =
        db_->Get(rocksdb::ReadOptions(), handle(which),
                 rocksdb::Slice(key.data(), key.size()), &value);
    if (read.IsNotFound()) {
      return std::optional<std::string>();
    }
    if (!read.ok()) {
      return storage_failure(std::string(name_of(which)) + ": read", read);
    }
    return std::optional<std::string>(std::move(value));
  });
}

status store::scan_values(
    family which,
    const std::function<bool(std::string_view, std::string_view)>& visit)
    const {
  return guarded("scan", [&]() -> status {
    auto pinned = hold();
    if (!pinned) {
      return unavailable();
    }
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions(), handle(which)));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      if (!visit(view(it->key()), view(it->value()))) {
        break;
      }
    }
    if (!it->status().ok()) {
      return storage_failure(std::string(name_of(which)) + ": scan",
                             it->status());
    }
    return {};
  });
}
}  // namespace durin::persistence
