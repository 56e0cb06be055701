// The search attribute index: the `search` family, one empty entry per
// (tenant, attribute name, type, value, run) of every stored run record
// (key layout: keys::search_entry, persistence/README.md).
//
// Why a family of its own, not a key range of `runs`: every reader of `runs`
// (scan_runs, the counts by status, the attribute types at open) walks the
// whole family and would meet the entries; read only by range, the index
// needs none of `runs`' bloom filters; and a shard move or a replica copies
// it with the rest (files and checkpoints take every family; replicated
// batches name it by id, the same on every replica: it is created last).
//
// Invariant: the index is a function of the run records. store::write adds
// the index's changes to the very WriteBatch that puts the records
// (index_search_attributes), reading the stored record under the lock that
// orders writes, so no reader ever sees a record without its entries or an
// entry of a value the record no longer has. Not in write_batch::put_run,
// which sees only the new record: its entries to delete are those of the
// record it replaces, which every writer of a run record would then have to
// know and hand down. At the write, the store reads the stored record
// itself, exactly the one replaced, since writes are ordered by that lock.
// A database written before the index existed gets it built once at open
// (ensure_search_index), recorded in `meta/search_index_version`.
#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/snapshot.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/fnv1a.hpp"
#include "persistence/codec.hpp"
#include "persistence/keys.hpp"
#include "persistence/storage_error.hpp"
#include "persistence/store.hpp"
#include "persistence/store_internal.hpp"

namespace durin::persistence {

using namespace store_detail;

namespace {

constexpr std::string_view index_version_name = "search_index_version";
// Bumped when the entries' layout changes: a database with another version
// is indexed again from its records.
constexpr std::uint32_t index_version = 1;
// The build at open writes in batches of about this size.
constexpr std::size_t build_batch_bytes = 4u << 20;
// Index entries one list reads for one comparison, at most. A comparison
// that names more runs matches so many that the scan fills a page after
// few records; and every page reads the comparison's entries again.
constexpr std::size_t candidates_max = 20'000;

// ---- keeping the index ------------------------------------------------------

// The entry keys of one run's attributes, sorted.
std::vector<std::string> entries_of(std::string_view run_id,
                                    const codec::run_search& run) {
  if (!keys::fits(run.tenant)) {
    return {};  // never put (write_batch::put_run refuses it): no key
  }
  std::vector<std::string> out;
  out.reserve(run.search.size());
  for (const auto& [name, value] : run.search) {
    out.push_back(keys::search_entry(run.tenant, name, value, run_id));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The entries an encoded run record has. A record that does not decode has
// none: whatever entries it had stay, and a list, which checks every run it
// reads against the query, never shows a run for them.
std::vector<std::string> entries_of(std::string_view run_id,
                                    std::string_view encoded) {
  auto run = codec::decode_run_search(encoded);
  return run ? entries_of(run_id, *run) : std::vector<std::string>();
}

// The key of a run's entry count (store::entry_counts_).
std::uint64_t run_hash(std::string_view run_id) {
  return base::fnv1a(run_id);
}

// The puts and deletes of run records and of index entries in a batch, in
// order, as views into the batch (valid until it changes).
class batch_writes final : public rocksdb::WriteBatch::Handler {
 public:
  struct write {
    std::string_view key;
    std::optional<std::string_view> value;  // nullopt: deleted
  };

  batch_writes(std::uint32_t runs_family, std::uint32_t search_family)
      : runs_family_(runs_family), search_family_(search_family) {}

  rocksdb::Status PutCF(std::uint32_t family_id, const rocksdb::Slice& key,
                        const rocksdb::Slice& value) override {
    note(family_id, {view(key), view(value)});
    return rocksdb::Status::OK();
  }
  rocksdb::Status DeleteCF(std::uint32_t family_id,
                           const rocksdb::Slice& key) override {
    note(family_id, {view(key), std::nullopt});
    return rocksdb::Status::OK();
  }
  rocksdb::Status SingleDeleteCF(std::uint32_t family_id,
                                 const rocksdb::Slice& key) override {
    return DeleteCF(family_id, key);
  }
  rocksdb::Status DeleteRangeCF(std::uint32_t family_id, const rocksdb::Slice&,
                                const rocksdb::Slice&) override {
    // Runs are deleted one by one, so that their entries can go with them.
    return family_id == runs_family_ || family_id == search_family_
               ? rocksdb::Status::NotSupported(
                     "a range delete of run records or index entries: the "
                     "search index cannot follow it")
               : rocksdb::Status::OK();
  }

  const std::vector<write>& runs() const { return runs_; }
  // Their values are empty: a put's value is there only to tell it from a
  // delete.
  const std::vector<write>& entries() const { return entries_; }

 private:
  void note(std::uint32_t family_id, write found) {
    if (family_id == runs_family_) {
      runs_.push_back(found);
    } else if (family_id == search_family_) {
      entries_.push_back(found);
    }
  }
  std::uint32_t runs_family_;
  std::uint32_t search_family_;
  std::vector<write> runs_;
  std::vector<write> entries_;
};

}  // namespace

void store::count_entries(const entry_deltas& deltas) {
  for (const auto& [run, by] : deltas) {
    auto& count = entry_counts_[run];
    // Never below zero: a count only too high costs a read, never more.
    count = by < 0 && count < static_cast<std::uint64_t>(-by)
                ? 0
                : count + static_cast<std::uint64_t>(by);
    if (count == 0) {
      entry_counts_.erase(run);
    }
  }
}

rocksdb::Status store::index_changes(const rocksdb::WriteBatch& batch,
                                     index_change_list& changes,
                                     entry_deltas& deltas,
                                     index_change_list* own) const {
  batch_writes found(handle(family::runs)->GetID(),
                     handle(family::search)->GetID());
  if (auto walked = batch.Iterate(&found); !walked.ok()) {
    return walked;
  }
  if (own != nullptr) {
    for (const auto& entry : found.entries()) {
      own->emplace_back(std::string(entry.key), entry.value.has_value());
    }
  }
  // Each run's entries after the batch's writes so far: a group write may
  // hold two records of one run, and only the first replaces the stored one.
  std::unordered_map<std::string_view, std::vector<std::string>> current;
  for (const auto& write : found.runs()) {
    auto id = keys::decode_run(write.key);
    if (!id) {
      continue;  // keys::run never makes such a key; no entry can name it
    }
    auto after = write.value ? entries_of(*id, *write.value)
                             : std::vector<std::string>();
    auto before = current.find(write.key);
    const std::uint64_t run = run_hash(*id);
    if (before == current.end() && after.empty() &&
        !entry_counts_.contains(run)) {
      continue;  // no entries before or after: most runs have no attributes
    }
    if (before == current.end()) {
      rocksdb::PinnableSlice stored;
      const auto read =
          db_->Get(rocksdb::ReadOptions(), handle(family::runs),
                   rocksdb::Slice(write.key.data(), write.key.size()), &stored);
      if (!read.ok() && !read.IsNotFound()) {
        return read;
      }
      before = current
                   .emplace(write.key, read.ok() ? entries_of(*id, view(stored))
                                                 : std::vector<std::string>())
                   .first;
    }
    std::vector<std::string> gone;
    std::set_difference(before->second.begin(), before->second.end(),
                        after.begin(), after.end(), std::back_inserter(gone));
    for (auto& entry : gone) {
      changes.emplace_back(std::move(entry), false);
    }
    std::vector<std::string> added;
    std::set_difference(after.begin(), after.end(), before->second.begin(),
                        before->second.end(), std::back_inserter(added));
    if (added.size() != gone.size()) {
      deltas.emplace_back(run, static_cast<std::int64_t>(added.size()) -
                                   static_cast<std::int64_t>(gone.size()));
    }
    for (auto& entry : added) {
      changes.emplace_back(std::move(entry), true);
    }
    before->second = std::move(after);
  }
  return rocksdb::Status::OK();
}

rocksdb::Status store::index_search_attributes(rocksdb::WriteBatch& batch,
                                               entry_deltas& deltas) const {
  index_change_list changes;
  if (auto found = index_changes(batch, changes, deltas, nullptr);
      !found.ok()) {
    return found;
  }
  auto* index = handle(family::search);
  for (const auto& [entry, put] : changes) {
    const auto done = put ? batch.Put(index, entry, rocksdb::Slice())
                          : batch.Delete(index, entry);
    if (!done.ok()) {
      return done;
    }
  }
  return rocksdb::Status::OK();
}

result<bool> store::follow_index(rocksdb::WriteBatch& batch,
                                 entry_deltas& deltas) const {
  if (index_stale_) {
    return false;  // built again when this copy is opened to serve
  }
  index_change_list expected;
  index_change_list shipped;
  if (auto found = index_changes(batch, expected, deltas, &shipped);
      !found.ok()) {
    return storage_failure("search index: follow a replicated write", found);
  }
  if (shipped == expected) {
    return false;
  }
  // A primary of a build without the index (a rolling upgrade), or one
  // whose index is not this copy's: the record and the index part here.
  // The version goes in the same batch, so that the copy is indexed again
  // at its next open to serve, whenever that is, and never serves lists
  // from entries that miss runs.
  deltas.clear();
  const auto marked =
      batch.Delete(handle(family::meta), keys::meta(index_version_name));
  if (!marked.ok()) {
    return storage_failure("search index: mark the copy's index stale", marked);
  }
  return true;
}

// ---- building the index at open ---------------------------------------------

namespace {

// Writes `batch` (unsynced: the last write of the build syncs the log) and
// empties it once it has grown past build_batch_bytes.
rocksdb::Status flush_when_full(rocksdb::DB& db, rocksdb::WriteBatch& batch) {
  if (batch.GetDataSize() < build_batch_bytes) {
    return rocksdb::Status::OK();
  }
  auto written = db.Write(rocksdb::WriteOptions(), &batch);
  batch.Clear();
  return written;
}

}  // namespace

status store::ensure_search_index() {
  auto stored = read_meta(index_version_name);
  if (!stored) {
    return stored.error();
  }
  if (stored->has_value() && (*stored)->size() == 4 &&
      keys::get_u32((*stored)->data()) == index_version) {
    return count_stored_entries();
  }
  rocksdb::WriteBatch batch;
  auto* index = handle(family::search);
  // A build cut short leaves entries without the version: start afresh.
  std::unique_ptr<rocksdb::Iterator> old(
      db_->NewIterator(rocksdb::ReadOptions(), index));
  for (old->SeekToFirst(); old->Valid(); old->Next()) {
    auto done = batch.Delete(index, old->key());
    if (done.ok()) {
      done = flush_when_full(*db_, batch);
    }
    if (!done.ok()) {
      return storage_failure("search index: clear", done);
    }
  }
  std::unique_ptr<rocksdb::Iterator> runs(
      db_->NewIterator(rocksdb::ReadOptions(), handle(family::runs)));
  for (runs->SeekToFirst(); runs->Valid(); runs->Next()) {
    const auto id = keys::decode_run(view(runs->key()));
    if (!id) {
      continue;
    }
    rocksdb::Status done;
    for (const auto& entry : entries_of(*id, view(runs->value()))) {
      if (done.ok()) {
        done = batch.Put(index, entry, rocksdb::Slice());
      }
    }
    if (done.ok()) {
      done = flush_when_full(*db_, batch);
    }
    if (!done.ok()) {
      return storage_failure("search index: build", done);
    }
  }
  for (const auto* it : {old.get(), runs.get()}) {
    if (!it->status().ok()) {
      return storage_failure("search index: read", it->status());
    }
  }
  std::string version;
  keys::put_u32(version, index_version);
  auto written = batch.Put(handle(family::meta), keys::meta(index_version_name),
                           codec::encode_bytes(version));
  if (written.ok()) {
    written = db_->Write(sync_write(), &batch);
  }
  if (!written.ok()) {
    return storage_failure("search index: write", written);
  }
  return count_stored_entries();
}

status store::count_stored_entries() {
  entry_deltas deltas;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), handle(family::search)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (auto entry = keys::decode_search_entry(view(it->key()))) {
      deltas.emplace_back(run_hash(entry->run_id), 1);
    }
  }
  if (!it->status().ok()) {
    return storage_failure("search index: count", it->status());
  }
  std::lock_guard lock(watch_->mutex);
  entry_counts_.clear();
  count_entries(deltas);
  index_stale_ = false;  // counted from an index built for these records
  return {};
}

// ---- lists through the index ------------------------------------------------

namespace {

// The comparisons an `all` at the top (or the query itself) must satisfy
// that the index answers: of an attribute, with any operator but != (true
// of every value but one, so hardly ever selective: left to the scan).
void indexable(const run_query& query,
               std::vector<const query_comparison*>& out) {
  if (query.what == run_query::kind::all) {
    for (const auto& child : query.children) {
      indexable(child, out);
    }
    return;
  }
  const auto& comparison = query.comparison;
  if (query.what == run_query::kind::comparison &&
      comparison.field == query_field::attribute &&
      comparison.op != query_op::ne && !comparison.values.empty()) {
    out.push_back(&comparison);
  }
}

// [begin, end) of entry keys; an empty end: to the end of the family.
struct key_range {
  std::string begin;
  std::string end;
};

// The keys of the entries whose values satisfy `comparison`: a value's
// entries share its prefix, and values sort as the comparison orders them.
std::vector<key_range> ranges_of(std::string_view tenant,
                                 const query_comparison& comparison) {
  const auto& first = comparison.values.front();
  const std::string type_prefix =
      keys::search_type_prefix(tenant, comparison.attribute, first.type);
  std::vector<key_range> out;
  if (comparison.op == query_op::eq || comparison.op == query_op::in) {
    for (const auto& value : comparison.values) {
      auto prefix =
          keys::search_value_prefix(tenant, comparison.attribute, value);
      auto end = prefix_successor(prefix);
      out.push_back({std::move(prefix), std::move(end)});
    }
    return out;
  }
  auto prefix = keys::search_value_prefix(tenant, comparison.attribute, first);
  switch (comparison.op) {
    case query_op::lt:
      out.push_back({type_prefix, prefix});
      break;
    case query_op::le:
      out.push_back({type_prefix, prefix_successor(prefix)});
      break;
    case query_op::gt:
      out.push_back({prefix_successor(prefix), prefix_successor(type_prefix)});
      break;
    case query_op::ge:
      out.push_back({prefix, prefix_successor(type_prefix)});
      break;
    default:
      break;
  }
  return out;
}

// The run keys (keys::run) the entries in `ranges` name, those older than
// `before_key` only (all when it is empty); nullopt when the ranges hold
// more than `entries_max` entries. `entries_read` counts them.
rocksdb::Status read_candidates(rocksdb::Iterator& it,
                                const std::vector<key_range>& ranges,
                                std::string_view before_key,
                                std::size_t entries_max,
                                std::optional<std::vector<std::string>>& out,
                                std::size_t& entries_read) {
  std::vector<std::string> found;
  entries_read = 0;
  for (const auto& range : ranges) {
    for (it.Seek(range.begin);
         it.Valid() && (range.end.empty() || view(it.key()) < range.end);
         it.Next()) {
      if (++entries_read > entries_max) {
        out.reset();
        return rocksdb::Status::OK();
      }
      auto entry = keys::decode_search_entry(view(it.key()));
      if (!entry) {
        continue;  // search_entry never makes such a key
      }
      auto key = keys::run(entry->run_id);
      if (before_key.empty() || key < before_key) {
        found.push_back(std::move(key));
      }
    }
    if (!it.status().ok()) {
      return it.status();
    }
  }
  out = std::move(found);
  return rocksdb::Status::OK();
}

// The run keys an equality's (or IN's) entries name, newest first, from
// just below `before_key` (all when empty): a value's entries end in the
// run's key (keys::search_entry), so each value's are read backwards and
// the values merged, and a page reads the entries of its own runs and few
// more, however deep it is.
class newest_entries {
 public:
  newest_entries(rocksdb::DB& db, const rocksdb::ReadOptions& read,
                 rocksdb::ColumnFamilyHandle* family,
                 const std::vector<key_range>& ranges,
                 std::string_view before_key) {
    for (const auto& range : ranges) {
      cursor at{
          std::unique_ptr<rocksdb::Iterator>(db.NewIterator(read, family)),
          range.begin};
      const std::string below = before_key.empty()
                                    ? range.end
                                    : range.begin + std::string(before_key);
      if (below.empty()) {
        at.it->SeekToLast();
      } else {
        at.it->SeekForPrev(below);
        if (at.it->Valid() && view(at.it->key()) >= below) {
          at.it->Prev();
        }
      }
      cursors_.push_back(std::move(at));
    }
  }

  rocksdb::Status next(std::optional<std::string>& key) {
    for (;;) {
      cursor* newest = nullptr;
      for (auto& at : cursors_) {
        if (!at.it->Valid()) {
          if (!at.it->status().ok()) {
            return at.it->status();
          }
          continue;
        }
        if (!view(at.it->key()).starts_with(at.prefix)) {
          continue;  // before this value's first entry
        }
        if (newest == nullptr || run_key(at) > run_key(*newest)) {
          newest = &at;
        }
      }
      if (newest == nullptr) {
        key.reset();
        return rocksdb::Status::OK();
      }
      std::string found(run_key(*newest));
      newest->it->Prev();
      ++entries_read_;
      // IN may name a value twice: its runs come twice, one after another.
      if (found != last_ && keys::decode_run(found)) {
        last_ = found;
        key = std::move(found);
        return rocksdb::Status::OK();
      }
    }
  }

  std::size_t entries_read() const { return entries_read_; }

 private:
  struct cursor {
    std::unique_ptr<rocksdb::Iterator> it;
    std::string prefix;
  };
  static std::string_view run_key(const cursor& at) {
    return view(at.it->key()).substr(at.prefix.size());
  }
  std::vector<cursor> cursors_;
  std::string last_;
  std::size_t entries_read_ = 0;
};

}  // namespace

result<std::optional<store::run_scan>> store::scan_by_index(
    const run_list_request& request) const {
  std::vector<const query_comparison*> comparisons;
  if (request.query != nullptr && request.tenant) {
    indexable(*request.query, comparisons);
  }
  if (comparisons.empty()) {
    return std::optional<run_scan>();
  }
  // One view for the index and the records, so that no write falls between.
  rocksdb::ManagedSnapshot snapshot(db_.get());
  rocksdb::ReadOptions read;
  read.snapshot = snapshot.snapshot();
  const std::string before_key =
      request.before_id.empty() ? std::string() : keys::run(request.before_id);
  const auto op = comparisons.front()->op;
  if (comparisons.size() == 1 && (op == query_op::eq || op == query_op::in)) {
    // Nothing to choose between: its entries are read in the page's order.
    newest_entries entries(*db_, read, handle(family::search),
                           ranges_of(*request.tenant, *comparisons.front()),
                           before_key);
    auto page = read_candidate_runs(
        request, read,
        [&](std::optional<std::string>& key) { return entries.next(key); });
    if (!page) {
      return page.error();
    }
    page->entries_read = entries.entries_read();
    return std::optional<run_scan>(std::move(*page));
  }
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(read, handle(family::search)));
  // The comparison with the fewest entries: each after the first is read
  // only until it has as many as the best so far.
  std::optional<std::vector<std::string>> best;
  std::size_t best_entries = 0;
  std::size_t entries_read = 0;
  for (const auto* comparison : comparisons) {
    if (best && best_entries == 0) {
      break;
    }
    std::optional<std::vector<std::string>> found;
    std::size_t entries = 0;
    const auto ranges = ranges_of(*request.tenant, *comparison);
    const auto done = read_candidates(*it, ranges, before_key,
                                      best ? best_entries - 1 : candidates_max,
                                      found, entries);
    if (!done.ok()) {
      return storage_failure("search index: read", done);
    }
    entries_read += entries;
    if (found) {
      best = std::move(found);
      best_entries = entries;
    }
  }
  if (!best) {
    return std::optional<run_scan>();  // no comparison is selective: scan
  }
  // The scan's order: newest (greatest key) first, each run once.
  std::sort(best->begin(), best->end(), std::greater<>());
  best->erase(std::unique(best->begin(), best->end()), best->end());
  std::size_t taken = 0;
  auto page =
      read_candidate_runs(request, read, [&](std::optional<std::string>& key) {
        if (taken < best->size()) {
          key = std::move((*best)[taken++]);
        } else {
          key.reset();
        }
        return rocksdb::Status::OK();
      });
  if (!page) {
    return page.error();
  }
  page->entries_read = entries_read;
  return std::optional<run_scan>(std::move(*page));
}

result<store::run_scan> store::read_candidate_runs(
    const run_list_request& request, const rocksdb::ReadOptions& read,
    const next_run_key& next_key) const {
  run_scan scan;
  std::size_t bytes = 0;
  std::optional<std::string> key;
  bool ended = false;
  for (;;) {
    if (const auto next = next_key(key); !next.ok()) {
      return storage_failure("search index: read", next);
    }
    if (!key) {
      break;
    }
    ++scan.records_read;
    rocksdb::PinnableSlice value;
    const auto got = db_->Get(read, handle(family::runs), *key, &value);
    if (!got.ok() && !got.IsNotFound()) {
      return storage_failure("runs: read", got);
    }
    // As the scan: a record that does not decode is passed over.
    const auto id = keys::decode_run(*key);
    auto decoded =
        got.ok() && id
            ? codec::decode_run(view(value))
            : result<run_record>(make_error(errc::corrupt_record, "no record"));
    if (decoded && decoded->id == *id && request.admits(*decoded)) {
      scan.runs.push_back(std::move(*decoded));
      scan.run_bytes.push_back(value.size());
      bytes += value.size();
    }
    if (request.ends(scan, bytes)) {
      ended = true;
      break;
    }
  }
  if (!ended) {
    return scan;  // every run the index names is read: nothing older matches
  }
  // The scan gives a cursor when any record is older than its last one,
  // whether or not it matches: so does this.
  std::unique_ptr<rocksdb::Iterator> runs(
      db_->NewIterator(read, handle(family::runs)));
  runs->SeekForPrev(*key);  // the last run read
  if (runs->Valid() && view(runs->key()) == *key) {
    runs->Prev();
  }
  if (!runs->status().ok()) {
    return storage_failure("runs: scan", runs->status());
  }
  if (runs->Valid()) {
    scan.next_before_id = keys::decode_run(*key).value_or(std::string());
  }
  return scan;
}

}  // namespace durin::persistence
