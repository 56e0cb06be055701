// Goal: the search index (persistence/search_index.cpp) answers a list by
// query with exactly the page the scan of every record gives, while it
// reads only the runs the index names; it follows every write of a run's
// attributes in the same batch, keeps tenants apart, and is built at open
// for a database written before it existed. Method: a real RocksDB in a
// temporary directory, runs written through write_batch, every list made
// twice (run_list_path::best and ::scan_only) and compared page by page;
// the randomised test prints its seed (DURIN_TEST_SEED replays it).
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/iterator.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "base/time_text.hpp"
#include "persistence/codec.hpp"
#include "persistence/committer.hpp"
#include "persistence/fence.hpp"
#include "persistence/keys.hpp"
#include "persistence/replication.hpp"
#include "persistence/run_query.hpp"
#include "persistence/store.hpp"
#include "tests/persistence/test_support.hpp"
#include "tests/support/faulty_file_system.hpp"

namespace durin::persistence {
namespace {

std::string run_id(int n) {
  char text[32];
  std::snprintf(text, sizeof text, "run_%08d", n);
  return text;
}

run_record make_run(int n, std::string tenant, search_attributes search = {}) {
  run_record record;
  record.id = run_id(n);
  record.flow = n % 3 == 0 ? "flow-b" : "flow-a";
  record.status = n % 2 == 0 ? run_status::running : run_status::completed;
  record.created_at_ms = 1000 + n;
  record.tenant = std::move(tenant);
  record.search = std::move(search);
  return record;
}

std::vector<std::string> ids_of(const std::vector<run_record>& runs) {
  std::vector<std::string> ids;
  for (const auto& run : runs) {
    ids.push_back(run.id);
  }
  return ids;
}

// The types the tests' attributes have, as a node would know them.
std::optional<search_attribute_type> type_of(std::string_view name) {
  static const std::map<std::string, search_attribute_type, std::less<>> known =
      {{"customer", search_attribute_type::keyword},
       {"rare", search_attribute_type::keyword},
       {"kw", search_attribute_type::keyword},
       {"priority", search_attribute_type::integer},
       {"n", search_attribute_type::integer},
       {"d", search_attribute_type::number},
       {"b", search_attribute_type::boolean},
       {"t", search_attribute_type::time}};
  auto found = known.find(name);
  if (found == known.end()) {
    return std::nullopt;
  }
  return found->second;
}

run_query parsed(const std::string& text) {
  auto query = parse_run_query(text, type_of);
  EXPECT_TRUE(query.ok()) << text << ": " << query.error().message;
  return query.ok() ? std::move(*query) : run_query{};
}

class SearchIndexTest : public testing::reopenable_store {
 protected:
  void put(const std::vector<run_record>& runs) {
    auto batch = store_->batch();
    for (const auto& run : runs) {
      batch.put_run(run);
    }
    auto written = store_->write(batch);
    ASSERT_TRUE(written.ok()) << written.error().message;
  }

  store::run_scan list(const std::string& text, const std::string& tenant,
                       run_list_path path, std::string_view before = "",
                       std::size_t max = 1000) {
    const auto query = parsed(text);
    auto scan =
        store_->scan_runs(before, std::nullopt, std::nullopt, max, 100'000,
                          tenant, SIZE_MAX, std::nullopt, &query, path);
    EXPECT_TRUE(scan.ok()) << scan.error().message;
    return scan.ok() ? std::move(*scan) : store::run_scan{};
  }

  // Every entry of the `search` family, decoded.
  std::vector<keys::search_key> entries() {
    std::vector<keys::search_key> out;
    std::unique_ptr<rocksdb::Iterator> it(store_->raw_db().NewIterator(
        rocksdb::ReadOptions(), store_->handle(family::search)));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      auto entry = keys::decode_search_entry(it->key().ToStringView());
      EXPECT_TRUE(entry.has_value());
      if (entry) {
        out.push_back(std::move(*entry));
      }
    }
    return out;
  }
};

TEST_F(SearchIndexTest, AListByAnIndexedAttributeReadsOnlyTheRunsThatHaveIt) {
  std::vector<run_record> runs;
  for (int n = 1; n <= 2000; ++n) {
    search_attributes search;
    if (n % 200 == 7) {
      search["customer"] = search_value::keyword("acme");
    } else if (n % 4 != 0) {
      search["customer"] =
          search_value::keyword("other-" + std::to_string(n % 50));
    }
    runs.push_back(make_run(n, "t", search));
  }
  put(runs);
  const auto indexed = list("customer = 'acme'", "t", run_list_path::best);
  const auto scanned = list("customer = 'acme'", "t", run_list_path::scan_only);
  EXPECT_EQ(indexed.runs.size(), 10u);
  EXPECT_EQ(ids_of(indexed.runs), ids_of(scanned.runs));
  EXPECT_EQ(indexed.records_read, 10u);
  EXPECT_EQ(scanned.records_read, 2000u);
}

TEST_F(SearchIndexTest, AnAndReadsThroughItsMostSelectiveComparison) {
  std::vector<run_record> runs;
  for (int n = 1; n <= 500; ++n) {
    search_attributes search{{"customer", search_value::keyword("acme")}};
    if (n % 100 == 0) {
      search["rare"] = search_value::keyword("yes");
    }
    runs.push_back(make_run(n, "t", search));
  }
  put(runs);
  const auto indexed =
      list("customer = 'acme' AND rare = 'yes'", "t", run_list_path::best);
  EXPECT_EQ(ids_of(indexed.runs),
            (std::vector<std::string>{run_id(500), run_id(400), run_id(300),
                                      run_id(200), run_id(100)}));
  EXPECT_EQ(indexed.records_read, 5u);
}

TEST_F(SearchIndexTest, AnOrOrOnlyNotEqualsOrBuiltInsScansEveryRun) {
  std::vector<run_record> runs;
  for (int n = 1; n <= 50; ++n) {
    runs.push_back(
        make_run(n, "t", {{"priority", search_value::of_int(n % 5)}}));
  }
  put(runs);
  for (const std::string text :
       {"priority = 1 OR priority = 2", "priority != 1",
        "status = 'running' AND flow = 'flow-b'"}) {
    const auto indexed = list(text, "t", run_list_path::best);
    const auto scanned = list(text, "t", run_list_path::scan_only);
    EXPECT_EQ(indexed.records_read, 50u) << text;
    EXPECT_EQ(ids_of(indexed.runs), ids_of(scanned.runs)) << text;
  }
}

TEST_F(SearchIndexTest, TheIndexFollowsUpsertsAndRemovals) {
  auto run = make_run(1, "t",
                      {{"customer", search_value::keyword("acme")},
                       {"priority", search_value::of_int(3)}});
  put({run});
  EXPECT_EQ(list("priority > 2", "t", run_list_path::best).runs.size(), 1u);
  EXPECT_EQ(entries().size(), 2u);

  run.search["priority"] = search_value::of_int(1);  // an upsert
  put({run});
  EXPECT_TRUE(list("priority > 2", "t", run_list_path::best).runs.empty());
  EXPECT_EQ(list("priority < 2", "t", run_list_path::best).runs.size(), 1u);

  run.search.erase("customer");  // a removal
  put({run});
  EXPECT_TRUE(list("customer = 'acme'", "t", run_list_path::best).runs.empty());
  auto left = entries();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].name, "priority");
  EXPECT_EQ(left[0].value, search_value::of_int(1));
  EXPECT_EQ(left[0].run_id, run_id(1));

  // Two records of one run in one write (a group write merges batches):
  // only the last one's entries stay.
  auto first = run;
  first.search = {{"customer", search_value::keyword("first")}};
  auto last = run;
  last.search = {{"customer", search_value::keyword("last")}};
  put({first, last});
  left = entries();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].value, search_value::keyword("last"));

  run.search.clear();  // every attribute removed
  put({run});
  EXPECT_TRUE(entries().empty());
}

// A write of a run with no attributes reads no stored record unless the
// store counts entries of that run: the counts are made again at open, so
// a run indexed before a restart loses its entries with its attributes.
TEST_F(SearchIndexTest,
       ARunIndexedBeforeAReopenLosesItsEntriesWithItsAttributes) {
  auto kept = make_run(1, "t", {{"priority", search_value::of_int(3)}});
  auto cleared = make_run(2, "t",
                          {{"priority", search_value::of_int(4)},
                           {"customer", search_value::keyword("acme")}});
  auto plain = make_run(3, "t");
  put({kept, cleared, plain});
  ASSERT_EQ(entries().size(), 3u);
  reopen();
  cleared.search.clear();
  plain.status = run_status::completed;
  put({cleared, plain});
  auto left = entries();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].run_id, run_id(1));
  // A run that never had attributes gets entries when it gains some.
  plain.search = {{"customer", search_value::keyword("late")}};
  put({plain});
  EXPECT_EQ(ids_of(list("customer = 'late'", "t", run_list_path::best).runs),
            std::vector<std::string>{run_id(3)});
  kept.search.clear();
  plain.search.clear();
  put({kept, plain});
  EXPECT_TRUE(entries().empty());
}

// One equality (or IN) is read in the page's order, from the cursor on:
// a page reads its own runs' entries and one more, however deep it is, and
// a match set larger than the candidates a list may collect still pages
// through the index.
TEST_F(SearchIndexTest, APageOfOneEqualityReadsOnlyItsOwnEntriesHoweverDeep) {
  std::vector<run_record> runs;
  for (int n = 1; n <= 31'500; ++n) {
    runs.push_back(make_run(
        n, "t", {{"kw", search_value::keyword(n % 3 == 0 ? "x" : "y")}}));
  }
  put(runs);
  for (const std::string text : {"kw = 'y'", "kw IN ('y', 'y')"}) {
    std::string cursor;
    std::size_t seen = 0;
    int pages = 0;
    do {
      const auto page = list(text, "t", run_list_path::best, cursor, 500);
      ASSERT_EQ(page.runs.size(), 500u) << text;
      // The page's 500, and the one after its last read to know it is not
      // the end (twice with the value named twice).
      EXPECT_LE(page.entries_read, 1002u) << text << " page " << pages;
      EXPECT_EQ(page.records_read, 500u) << text;
      if (pages == 30) {  // deep in: the scan's page is the same
        const auto scanned =
            list(text, "t", run_list_path::scan_only, cursor, 500);
        EXPECT_EQ(ids_of(page.runs), ids_of(scanned.runs));
        EXPECT_EQ(page.next_before_id, scanned.next_before_id);
      }
      seen += page.runs.size();
      cursor = page.next_before_id;
      ++pages;
    } while (!cursor.empty());
    EXPECT_EQ(seen, 21'000u) << text;  // more than candidates_max
  }
}

TEST_F(SearchIndexTest, ATenantNeverSeesAnotherTenantsRuns) {
  std::vector<run_record> runs;
  for (int n = 1; n <= 40; ++n) {
    runs.push_back(make_run(n, n % 2 == 0 ? "t1" : "t2",
                            {{"customer", search_value::keyword("acme")},
                             {"priority", search_value::of_int(n)}}));
  }
  put(runs);
  for (const std::string text :
       {"customer = 'acme'", "priority >= 10", "customer IN ('acme', 'x')"}) {
    for (const std::string tenant : {"t1", "t2"}) {
      const auto indexed = list(text, tenant, run_list_path::best);
      ASSERT_FALSE(indexed.runs.empty()) << text;
      for (const auto& run : indexed.runs) {
        EXPECT_EQ(run.tenant, tenant) << text;
      }
      EXPECT_LE(indexed.records_read, 20u) << text;
      EXPECT_EQ(ids_of(indexed.runs),
                ids_of(list(text, tenant, run_list_path::scan_only).runs));
    }
  }
  EXPECT_TRUE(
      list("customer = 'acme'", "t3", run_list_path::best).runs.empty());
}

TEST_F(SearchIndexTest, ARunWithAttributesAndATenantNoKeyHoldsIsRefused) {
  auto batch = store_->batch();
  batch.put_run(make_run(1, std::string(70'000, 't'),
                         {{"priority", search_value::of_int(1)}}));
  const auto written = store_->write(batch);
  ASSERT_FALSE(written.ok());
  EXPECT_EQ(written.error().code, errc::invalid_argument);
  EXPECT_TRUE(entries().empty());
}

TEST_F(SearchIndexTest, AStoreWrittenBeforeTheIndexGetsItAtOpen) {
  std::vector<run_record> runs;
  for (int n = 1; n <= 300; ++n) {
    runs.push_back(
        make_run(n, "t", {{"priority", search_value::of_int(n % 7)}}));
  }
  put(runs);
  // What a database of an earlier build holds: no `search` family and no
  // version; and a stray entry, as a build cut short might leave.
  auto& db = store_->raw_db();
  ASSERT_TRUE(db.DropColumnFamily(store_->handle(family::search)).ok());
  ASSERT_TRUE(db.Delete(rocksdb::WriteOptions(), store_->handle(family::meta),
                        keys::meta("search_index_version"))
                  .ok());
  reopen();
  EXPECT_EQ(entries().size(), 300u);
  ASSERT_TRUE(store_->raw_db()
                  .Put(rocksdb::WriteOptions(), store_->handle(family::search),
                       keys::search_entry("t", "priority",
                                          search_value::of_int(3), run_id(1)),
                       "")
                  .ok());
  ASSERT_TRUE(store_->raw_db()
                  .Delete(rocksdb::WriteOptions(), store_->handle(family::meta),
                          keys::meta("search_index_version"))
                  .ok());
  reopen();

  EXPECT_EQ(entries().size(), 300u);  // the stray entry is gone
  auto version = store_->get_meta("search_index_version");
  ASSERT_TRUE(version.ok());
  EXPECT_TRUE(version->has_value());
  const auto indexed = list("priority = 3", "t", run_list_path::best);
  EXPECT_EQ(ids_of(indexed.runs),
            ids_of(list("priority = 3", "t", run_list_path::scan_only).runs));
  EXPECT_EQ(indexed.runs.size(), 43u);
  EXPECT_EQ(indexed.records_read, 43u);
}

// Keeps every write the committer ships, and answers it at once.
class recorded_replication final : public replication {
 public:
  struct write {
    std::uint64_t epoch = 0;
    std::uint64_t position = 0;
    std::string data;
  };
  void ship(std::uint64_t epoch, std::uint64_t position, std::string data,
            done_fn done) override {
    {
      std::lock_guard lock(mutex_);
      writes_.push_back({epoch, position, std::move(data)});
    }
    done({});
  }
  void lost(std::uint64_t, std::uint64_t) override {}
  std::vector<write> writes() {
    std::lock_guard lock(mutex_);
    return writes_;
  }

 private:
  std::mutex mutex_;
  std::vector<write> writes_;
};

// A primary and a backup's copy of one shard: the primary's committer ships
// through a recorded_replication, and the test applies what it shipped.
class replica_pair {
 public:
  using as_shipped = std::function<std::string(std::string)>;

  void start() {
    using namespace std::chrono_literals;
    primary_fence_->set_replication(shipped_);
    auto primary = store::open(primary_dir_.path(), {.fence = primary_fence_});
    ASSERT_TRUE(primary.ok()) << primary.error().message;
    primary_ = std::move(*primary);
    primary_fence_->grant(1, std::chrono::steady_clock::now() + 60s);
    ASSERT_TRUE(durin::testing::eventually([&] { return primary_->ready(); }));
    auto backup = store::open(backup_dir_.path(), {.fence = backup_fence_});
    ASSERT_TRUE(backup.ok()) << backup.error().message;
    backup_ = std::move(*backup);
    ASSERT_TRUE(backup_->follow().ok());
    writer_ = std::make_unique<committer>(*primary_);
  }

  void write(const run_record& run) {
    auto batch = primary_->batch();
    batch.put_run(run);
    std::promise<status> answered;
    writer_->submit(std::move(batch), [&](const status& outcome) {
      answered.set_value(outcome);
    });
    ASSERT_TRUE(answered.get_future().get().ok());
  }

  // Applies the writes shipped since the last call, each as `change` makes
  // it.
  void apply(const as_shipped& change = {}) {
    const auto writes = shipped_->writes();
    for (; applied_ < writes.size(); ++applied_) {
      const auto& write = writes[applied_];
      ASSERT_TRUE(
          backup_
              ->apply_replicated(write.epoch, write.position,
                                 change ? change(write.data) : write.data)
              .ok());
    }
  }

  // The backup takes the shard over, as a grant after a failover does.
  void promote() {
    using namespace std::chrono_literals;
    writer_.reset();
    primary_fence_->close();
    backup_fence_->grant(2, std::chrono::steady_clock::now() + 60s);
    backup_->unfollow();
    ASSERT_TRUE(durin::testing::eventually([&] { return backup_->ready(); }));
  }

  store& primary() { return *primary_; }
  store& backup() { return *backup_; }

 private:
  testing::temp_dir primary_dir_;
  testing::temp_dir backup_dir_;
  std::shared_ptr<recorded_replication> shipped_ =
      std::make_shared<recorded_replication>();
  std::shared_ptr<fence> primary_fence_ = std::make_shared<fence>();
  std::shared_ptr<fence> backup_fence_ = std::make_shared<fence>();
  std::unique_ptr<store> primary_;
  std::unique_ptr<store> backup_;
  std::unique_ptr<committer> writer_;
  std::size_t applied_ = 0;
};

std::vector<std::string> index_entries(store& copy) {
  std::vector<std::string> out;
  std::unique_ptr<rocksdb::Iterator> it(copy.raw_db().NewIterator(
      rocksdb::ReadOptions(), copy.handle(family::search)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    out.push_back(it->key().ToString());
  }
  return out;
}

// Read raw: a backup's store is not ready, so get_meta refuses.
bool index_version_stored(store& copy) {
  std::string value;
  return copy.raw_db()
      .Get(rocksdb::ReadOptions(), copy.handle(family::meta),
           keys::meta("search_index_version"), &value)
      .ok();
}

// What a primary of a build without the index ships: `data` without the
// `search` family's writes (families have the same ids on every replica).
std::string without_index(store& copy, const std::string& data) {
  class copier final : public rocksdb::WriteBatch::Handler {
   public:
    explicit copier(store& copy) : copy_(copy) {}
    rocksdb::Status PutCF(std::uint32_t id, const rocksdb::Slice& key,
                          const rocksdb::Slice& value) override {
      auto* into = kept(id);
      return into ? out.Put(into, key, value) : rocksdb::Status::OK();
    }
    rocksdb::Status DeleteCF(std::uint32_t id,
                             const rocksdb::Slice& key) override {
      auto* into = kept(id);
      return into ? out.Delete(into, key) : rocksdb::Status::OK();
    }
    rocksdb::WriteBatch out;

   private:
    rocksdb::ColumnFamilyHandle* kept(std::uint32_t id) const {
      for (std::size_t n = 0; n < family_count; ++n) {
        auto* handle = copy_.handle(static_cast<family>(n));
        if (handle->GetID() == id) {
          return static_cast<family>(n) == family::search ? nullptr : handle;
        }
      }
      ADD_FAILURE() << "a write to family id " << id;
      return nullptr;
    }
    store& copy_;
  };
  copier copied(copy);
  rocksdb::WriteBatch batch{data};
  EXPECT_TRUE(batch.Iterate(&copied).ok());
  return copied.out.Data();
}

TEST(SearchIndexReplicaTest, ABackupGetsTheIndexInThePrimarysShippedWrites) {
  replica_pair pair;
  ASSERT_NO_FATAL_FAILURE(pair.start());
  for (int n = 1; n <= 20; ++n) {
    auto run =
        make_run(n % 5 + 1, "t", {{"priority", search_value::of_int(n)}});
    if (n % 4 == 0) {
      run.search.clear();
    }
    ASSERT_NO_FATAL_FAILURE(pair.write(run));
  }
  ASSERT_NO_FATAL_FAILURE(pair.apply());
  // The last writes of runs 1 and 2 (n = 20, 16) cleared them.
  EXPECT_EQ(index_entries(pair.primary()).size(), 3u);
  EXPECT_EQ(index_entries(pair.backup()), index_entries(pair.primary()));
  EXPECT_TRUE(index_version_stored(pair.backup()));
  auto primary_sum = pair.primary().checksum();
  auto backup_sum = pair.backup().checksum();
  ASSERT_TRUE(primary_sum.ok() && backup_sum.ok());
  EXPECT_EQ(*primary_sum, *backup_sum);

  // The backup takes over: runs that got their entries through shipped
  // writes lose them when their attributes go.
  ASSERT_NO_FATAL_FAILURE(pair.promote());
  auto batch = pair.backup().batch();
  for (int n = 1; n <= 5; ++n) {
    batch.put_run(make_run(n, "t"));
  }
  ASSERT_TRUE(pair.backup().write(batch).ok());
  EXPECT_TRUE(index_entries(pair.backup()).empty());
}

// A rolling upgrade: a primary of an earlier build ships run records with
// no index entries. The backup's index would miss those runs; it notices the
// first such write, and its copy is indexed afresh before it serves.
TEST(SearchIndexReplicaTest,
     ABackupOfAPrimaryWithoutTheIndexBuildsItBeforeItServes) {
  replica_pair pair;
  ASSERT_NO_FATAL_FAILURE(pair.start());
  auto strip = [&](std::string data) {
    return without_index(pair.primary(), data);
  };
  for (int n = 1; n <= 5; ++n) {
    ASSERT_NO_FATAL_FAILURE(
        pair.write(make_run(n, "t", {{"priority", search_value::of_int(1)}})));
  }
  ASSERT_NO_FATAL_FAILURE(pair.apply());
  ASSERT_TRUE(index_version_stored(pair.backup()));
  // An earlier build changes a run the backup has entries of: the entries
  // it ships (none) are not the ones the change makes here.
  ASSERT_NO_FATAL_FAILURE(
      pair.write(make_run(1, "t", {{"priority", search_value::of_int(2)}})));
  ASSERT_NO_FATAL_FAILURE(pair.apply(strip));
  EXPECT_FALSE(index_version_stored(pair.backup()));
  // New runs with attributes, and a run whose attributes go.
  for (int n = 6; n <= 9; ++n) {
    ASSERT_NO_FATAL_FAILURE(
        pair.write(make_run(n, "t", {{"priority", search_value::of_int(3)}})));
  }
  ASSERT_NO_FATAL_FAILURE(pair.write(make_run(2, "t")));
  ASSERT_NO_FATAL_FAILURE(pair.apply(strip));
  EXPECT_FALSE(index_version_stored(pair.backup()));
  const auto shipped_records = pair.primary().checksum();

  ASSERT_NO_FATAL_FAILURE(pair.promote());
  EXPECT_TRUE(index_version_stored(pair.backup()));
  EXPECT_EQ(index_entries(pair.backup()), index_entries(pair.primary()));
  const auto query = parsed("priority = 3");
  auto listed = pair.backup().scan_runs("", std::nullopt, std::nullopt, 100,
                                        100'000, "t", SIZE_MAX, std::nullopt,
                                        &query, run_list_path::best);
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  EXPECT_EQ(listed->runs.size(), 4u);
  EXPECT_EQ(listed->records_read, 4u);  // through the index
  // The index is a function of the records: rebuilt, the copy equals the
  // primary's, whose index was kept write by write.
  auto backup_sum = pair.backup().checksum();
  ASSERT_TRUE(shipped_records.ok() && backup_sum.ok());
  EXPECT_EQ(*backup_sum, *shipped_records);
}

// A write that fails takes the index's changes back out of its batch, so
// that the batch written again is indexed against the records stored then.
TEST(SearchIndexFaultTest, AFailedWriteTakesItsIndexChangesBackOut) {
  using namespace std::chrono_literals;
  using disk = durin::testing::faulty_file_system;
  testing::temp_dir dir;
  auto faulty = std::make_shared<disk>();
  auto opened = store::open(dir.path(), {.file_system = faulty,
                                         .reopen_backoff_ms_min = 5,
                                         .reopen_backoff_ms_max = 50});
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  auto& shard = **opened;
  auto run = make_run(1, "t", {{"priority", search_value::of_int(1)}});
  auto first = shard.batch();
  first.put_run(run);
  ASSERT_TRUE(shard.write(first).ok());

  run.search["priority"] = search_value::of_int(2);
  auto second = shard.batch();
  second.put_run(run);
  faulty->fail(disk::operation::write, disk::fault::io_error, 1.0, 1);
  const auto failed = shard.write(second);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().code, errc::storage_error);
  EXPECT_EQ(second.count(), 1u);  // the run record alone again
  ASSERT_TRUE(durin::testing::eventually([&] { return shard.ready(); }, 5s));

  ASSERT_TRUE(shard.write(second).ok());
  const auto query = parsed("priority = 2");
  auto listed =
      shard.scan_runs("", std::nullopt, std::nullopt, 10, 100'000,
                      std::string("t"), SIZE_MAX, std::nullopt, &query);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(ids_of(listed->runs), std::vector<std::string>{run_id(1)});
  std::vector<keys::search_key> entries;
  std::unique_ptr<rocksdb::Iterator> it(shard.raw_db().NewIterator(
      rocksdb::ReadOptions(), shard.handle(family::search)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    entries.push_back(*keys::decode_search_entry(it->key().ToStringView()));
  }
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].value, search_value::of_int(2));
}

// ---- randomised agreement
// ------------------------------------------------------

struct time_literal {
  std::string text;
  std::int64_t ms = 0;
};

class random_runs {
 public:
  explicit random_runs(std::uint64_t seed) : random_(seed) {
    for (const char* text : {"2026-01-01T00:00:00Z", "2026-06-01T12:00:00Z",
                             "2026-12-02T10:00:00Z", "1999-12-31T23:59:59Z"}) {
      times_.push_back({text, *time_text::parse_rfc3339_ms(text)});
    }
  }

  int below(int bound) {
    return std::uniform_int_distribution<int>(0, bound - 1)(random_);
  }

  search_value value_of(const std::string& name) {
    static const std::vector<std::string> keywords = {"",  "a",    "ab", "abc",
                                                      "b", "acme", "z"};
    static const std::vector<std::int64_t> ints = {
        INT64_MIN, -3, -1, 0, 1, 2, 3, 100, INT64_MAX};
    static const std::vector<double> doubles = {-2.5, -0.0, 0.0, 0.5, 1e3};
    if (name == "kw") {
      return search_value::keyword(keywords[below(7)]);
    }
    if (name == "n") {
      return search_value::of_int(ints[below(9)]);
    }
    if (name == "d") {
      return search_value::of_double(doubles[below(5)]);
    }
    if (name == "b") {
      return search_value::of_bool(below(2) == 1);
    }
    return search_value::time_ms(times_[below(4)].ms);
  }

  // Some of the five attributes, each with a random value.
  search_attributes attributes() {
    search_attributes out;
    for (const std::string name : {"kw", "n", "d", "b", "t"}) {
      if (below(3) != 0) {
        out[name] = value_of(name);
      }
    }
    return out;
  }

  std::string literal(const std::string& name) {
    static const std::vector<std::string> keywords = {"''",   "'a'", "'ab'",
                                                      "'aa'", "'b'", "'zz'"};
    static const std::vector<std::string> ints = {
        "-9223372036854775808", "-2", "0", "1", "3", "9223372036854775807"};
    static const std::vector<std::string> doubles = {"-2.5", "-0.0", "0",
                                                     "0.25", "1000", "-7"};
    if (name == "kw") {
      return keywords[below(6)];
    }
    if (name == "n") {
      return ints[below(6)];
    }
    if (name == "d") {
      return doubles[below(6)];
    }
    if (name == "b") {
      return below(2) == 1 ? "true" : "false";
    }
    return "'" + times_[below(4)].text + "'";
  }

  std::string comparison() {
    static const std::vector<std::string> names = {"kw", "n", "d", "b", "t"};
    static const std::vector<std::string> ops = {"=",  "<",  ">",
                                                 "<=", ">=", "!="};
    const std::string& name = names[below(5)];
    if (below(5) == 0) {
      std::string list = name + " IN (" + literal(name);
      for (int more = below(3); more > 0; --more) {
        list += ", " + literal(name);
      }
      return list + ")";
    }
    const std::string& op =
        name == "b" ? (below(2) == 0 ? ops[0] : ops[5]) : ops[below(6)];
    return name + " " + op + " " + literal(name);
  }

  std::string query() {
    switch (below(6)) {
      case 0:
        return comparison() + " AND status = 'running'";
      case 1:
        return comparison() + " AND " + comparison();
      case 2:
        return comparison() + " OR " + comparison();
      case 3:
        return "flow = 'flow-b' AND (" + comparison() + ")";
      default:
        return comparison();
    }
  }

 private:
  std::mt19937_64 random_;
  std::vector<time_literal> times_;
};

TEST_F(SearchIndexTest, IndexedAndScannedListsAgree) {
  random_runs random(testing::test_seed());
  std::vector<run_record> runs;
  for (int n = 1; n <= 600; ++n) {
    runs.push_back(
        make_run(n, n % 5 == 0 ? "other" : "t", random.attributes()));
  }
  put(runs);
  // Upserts and removals: whole records written again, sometimes two of
  // one run in one write.
  for (int round = 0; round < 200; ++round) {
    std::vector<run_record> batch;
    for (int k = random.below(4) + 1; k > 0; --k) {
      auto& run = runs[random.below(static_cast<int>(runs.size()))];
      if (random.below(2) == 0) {
        run.search.erase(run.search.empty() ? std::string()
                                            : run.search.begin()->first);
      } else {
        for (auto& [name, value] : random.attributes()) {
          run.search[name] = value;
        }
      }
      batch.push_back(run);
    }
    put(batch);
  }
  int fewer_read = 0;  // pages the index answered reading fewer records
  for (int round = 0; round < 300; ++round) {
    const std::string text = random.query();
    const auto max = static_cast<std::size_t>(random.below(40) + 1);
    std::string cursor;
    int pages = 0;
    do {
      const auto indexed = list(text, "t", run_list_path::best, cursor, max);
      const auto scanned =
          list(text, "t", run_list_path::scan_only, cursor, max);
      ASSERT_EQ(ids_of(indexed.runs), ids_of(scanned.runs))
          << text << " after '" << cursor << "'";
      ASSERT_EQ(indexed.run_bytes, scanned.run_bytes) << text;
      ASSERT_EQ(indexed.next_before_id, scanned.next_before_id) << text;
      ASSERT_LE(indexed.records_read, scanned.records_read) << text;
      fewer_read += indexed.records_read < scanned.records_read ? 1 : 0;
      cursor = scanned.next_before_id;
      ASSERT_LT(++pages, 1000) << text;
    } while (!cursor.empty());
  }
  EXPECT_GT(fewer_read, 100);
}

}  // namespace
}  // namespace durin::persistence
