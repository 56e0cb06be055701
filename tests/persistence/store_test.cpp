// Goal: the store keeps the promises of persistence/store.hpp on a real
// RocksDB: the families and schema version it creates, reads that return
// exactly what was written, history that refuses gaps, the listing scans
// (newest first, filters, cursor, limits), and corrupt bytes reported as
// corrupt-record naming family and run, never a crash. Method: each test
// opens a fresh database in a temporary directory, writes through
// write_batch (or, to plant damage, through the raw database), and checks
// the specific result or error code.
#include "persistence/store.hpp"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "persistence/codec.hpp"
#include "persistence/keys.hpp"
#include "test_support.hpp"

namespace durin::persistence {
namespace {

using namespace std::string_literals;

run_record make_run(std::string id, std::string flow = "flow-a",
                    run_status status = run_status::running) {
  run_record record;
  record.id = std::move(id);
  record.flow = std::move(flow);
  record.status = status;
  record.input = "\xc0"s;
  record.created_at_ms = 1000;
  return record;
}

event_record make_event(event_kind kind, std::uint64_t call) {
  event_record event;
  event.kind = kind;
  event.call = call;
  event.name = "call-" + std::to_string(call);
  event.at_ms = static_cast<std::int64_t>(call) * 10;
  return event;
}

// Run ids as durin makes them: fixed length, sorting by creation.
std::string run_id(int n) {
  char text[32];
  std::snprintf(text, sizeof text, "run_%08d", n);
  return text;
}

class StoreTest : public testing::reopenable_store {
 protected:
  void commit(write_batch& batch) {
    auto written = store_->write(batch);
    ASSERT_TRUE(written.ok()) << written.error().message;
  }

  void put_runs(const std::vector<run_record>& runs) {
    auto batch = store_->batch();
    for (const auto& run : runs) {
      batch.put_run(run);
    }
    commit(batch);
  }

  // Writes `value` under `key` bypassing every check, to plant damage.
  void put_raw(family which, const std::string& key, const std::string& value) {
    rocksdb::WriteOptions options;
    options.sync = true;
    ASSERT_TRUE(
        store_->raw_db().Put(options, store_->handle(which), key, value).ok());
  }

  std::vector<std::string> ids_of(const std::vector<run_record>& runs) {
    std::vector<std::string> ids;
    for (const auto& run : runs) {
      ids.push_back(run.id);
    }
    return ids;
  }
};

// ---- opening and schema ----------------------------------------------------

TEST_F(StoreTest, OpenCreatesExactlyTheDocumentedFamilies) {
  std::vector<std::string> names;
  ASSERT_TRUE(
      rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), dir_.path(), &names)
          .ok());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{
                       "active", "api_keys", "default", "history", "inbox",
                       "meta", "requests", "runs", "schedules", "search",
                       "tenants", "timers", "tokens"}));
  EXPECT_EQ(store_->handle(family::runs)->GetName(), "runs");
  EXPECT_EQ(store_->handle(family::history)->GetName(), "history");
  EXPECT_EQ(store_->handle(family::timers)->GetName(), "timers");
  EXPECT_EQ(store_->handle(family::active)->GetName(), "active");
  EXPECT_EQ(store_->handle(family::meta)->GetName(), "meta");
  EXPECT_EQ(store_->handle(family::search)->GetName(), "search");
  EXPECT_EQ(store_->dir(), dir_.path());
}

TEST_F(StoreTest, OpenCreatesMissingDirectories) {
  const std::string nested = dir_.path() + "/a/b/c";
  auto opened = store::open(nested);
  ASSERT_TRUE(opened.ok()) << opened.error().message;
}

TEST_F(StoreTest, SchemaVersionIsWrittenOnFirstOpen) {
  auto version = store_->get_meta("schema_version");
  ASSERT_TRUE(version.ok());
  ASSERT_TRUE(version->has_value());
  std::string expected;
  keys::put_u32(expected, schema_version);
  EXPECT_EQ(**version, expected);
}

TEST_F(StoreTest, ReopenKeepsEverything) {
  put_runs({make_run("run_1")});
  reopen();
  auto run = store_->get_run("run_1");
  ASSERT_TRUE(run.ok());
  ASSERT_TRUE(run->has_value());
  EXPECT_EQ(**run, make_run("run_1"));
}

TEST_F(StoreTest, OtherSchemaVersionIsRefused) {
  std::string other;
  keys::put_u32(other, schema_version + 1);
  ASSERT_TRUE(store_->put_meta("schema_version", other).ok());
  store_.reset();
  auto opened = store::open(dir_.path());
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.error().code, errc::invalid_argument);
  EXPECT_NE(opened.error().message.find("schema version 2"), std::string::npos);
}

TEST_F(StoreTest, CorruptSchemaVersionIsCorruptRecord) {
  put_raw(family::meta, "schema_version", "garbage");
  store_.reset();
  auto opened = store::open(dir_.path());
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.error().code, errc::corrupt_record);
  EXPECT_NE(opened.error().message.find("meta"), std::string::npos);
}

TEST_F(StoreTest, FamilyUnknownToThisBuildDoesNotPreventOpening) {
  // A later schema may add families this build does not know.
  rocksdb::ColumnFamilyHandle* extra = nullptr;
  ASSERT_TRUE(
      store_->raw_db()
          .CreateColumnFamily(rocksdb::ColumnFamilyOptions(), "future", &extra)
          .ok());
  ASSERT_TRUE(store_->raw_db().DestroyColumnFamilyHandle(extra).ok());
  reopen();
  EXPECT_TRUE(store_->get_run("run_1").ok());
}

TEST_F(StoreTest, SecondOpenOfTheSameDirectoryIsStorageError) {
  auto second = store::open(dir_.path());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code, errc::storage_error);
}

TEST_F(StoreTest, MetaValuesRoundTrip) {
  ASSERT_TRUE(store_->put_meta("node_id", "node-7\0x"s).ok());
  auto value = store_->get_meta("node_id");
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, std::optional<std::string>("node-7\0x"s));
  auto missing = store_->get_meta("nothing");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
}

// ---- runs
// ----------------------------------------------------------------------

TEST_F(StoreTest, MissingRunIsNullopt) {
  auto run = store_->get_run("run_none");
  ASSERT_TRUE(run.ok());
  EXPECT_FALSE(run->has_value());
}

TEST_F(StoreTest, OverlongRunIdIsNulloptNotACrash) {
  auto run = store_->get_run(std::string(keys::string_bytes_max + 1, 'r'));
  ASSERT_TRUE(run.ok());
  EXPECT_FALSE(run->has_value());
}

TEST_F(StoreTest, PutRunOverwritesTheRecord) {
  put_runs({make_run("run_1")});
  run_record done = make_run("run_1", "flow-a", run_status::completed);
  done.output = "\x01"s;
  done.completed_at_ms = 2000;
  put_runs({done});
  auto run = store_->get_run("run_1");
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->value(), done);
}

TEST_F(StoreTest, CorruptRunRecordNamesFamilyAndRun) {
  put_raw(family::runs, keys::run("run_bad"), "not a frame");
  auto run = store_->get_run("run_bad");
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.error().code, errc::corrupt_record);
  EXPECT_NE(run.error().message.find("runs"), std::string::npos);
  EXPECT_NE(run.error().message.find("run_bad"), std::string::npos);
}

TEST_F(StoreTest, RunRecordFiledUnderAnotherIdIsCorruptRecord) {
  put_raw(family::runs, keys::run("run_a"), codec::encode(make_run("run_b")));
  auto run = store_->get_run("run_a");
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.error().code, errc::corrupt_record);
}

TEST_F(StoreTest, InvalidRecordRefusesTheWholeBatch) {
  auto batch = store_->batch();
  batch.put_run(make_run("run_good"));
  batch.put_active("run_good");
  batch.put_run(make_run("run_blocked", "f", run_status::blocked));
  EXPECT_FALSE(batch.problem().empty());
  auto written = store_->write(batch);
  ASSERT_FALSE(written.ok());
  EXPECT_EQ(written.error().code, errc::invalid_argument);
  // Both or neither: the good run was not written either.
  EXPECT_FALSE(store_->get_run("run_good")->has_value());
  EXPECT_TRUE(store_->active_runs()->empty());
}

TEST_F(StoreTest, OverlongIdsAndOversizeFieldsAreRefusedNotWritten) {
  const std::string overlong(keys::string_bytes_max + 1, 'r');
  for (int which = 0; which < 5; ++which) {
    auto batch = store_->batch();
    switch (which) {
      case 0:
        batch.put_run(make_run(overlong));
        break;
      case 1:
        batch.put_event(overlong, 1, make_event(event_kind::run_started, 0));
        break;
      case 2:
        batch.put_timer({1, overlong, 0, timer_kind::sleep});
        break;
      case 3:
        batch.put_active(overlong);
        break;
      default: {
        run_record huge = make_run("run_huge");
        huge.output.assign(codec::field_bytes_max + 1, 'x');
        batch.put_run(huge);
      }
    }
    EXPECT_EQ(batch.count(), 0u) << which;
    EXPECT_EQ(store_->write(batch).error().code, errc::invalid_argument)
        << which;
  }
}

TEST_F(StoreTest, BatchOfAnotherStoreIsInternalError) {
  testing::temp_dir other_dir;
  auto other = store::open(other_dir.path());
  ASSERT_TRUE(other.ok());
  auto batch = (*other)->batch();
  batch.put_run(make_run("run_1"));
  EXPECT_EQ(store_->write(batch).error().code, errc::internal);
}

TEST_F(StoreTest, BatchCountsOperationsAndBytes) {
  auto batch = store_->batch();
  EXPECT_TRUE(batch.empty());
  batch.put_run(make_run("run_1"));
  batch.put_active("run_1");
  batch.delete_timer({5, "run_1", 1, timer_kind::sleep});
  EXPECT_EQ(batch.count(), 3u);
  EXPECT_GT(batch.size_bytes(), 0u);
  EXPECT_FALSE(batch.empty());
}

// ---- history
// -----------------------------------------------------------------

TEST_F(StoreTest, LoadHistoryReturnsEventsInSequenceOrder) {
  // Written out of order and in several batches, past byte boundaries of
  // the sequence (255, 256), to check the big-endian order.
  std::vector<std::uint64_t> order;
  for (std::uint64_t sequence = 1; sequence <= 300; ++sequence) {
    order.push_back(sequence);
  }
  std::reverse(order.begin(), order.end());
  for (std::size_t at = 0; at < order.size(); at += 50) {
    auto batch = store_->batch();
    for (std::size_t i = at; i < at + 50; ++i) {
      batch.put_event("run_1", order[i],
                      make_event(event_kind::value_recorded, order[i]));
    }
    commit(batch);
  }
  auto history = store_->load_history("run_1");
  ASSERT_TRUE(history.ok()) << history.error().message;
  ASSERT_EQ(history->size(), 300u);
  for (std::size_t i = 0; i < history->size(); ++i) {
    EXPECT_EQ((*history)[i], make_event(event_kind::value_recorded, i + 1));
  }
}

TEST_F(StoreTest, LoadHistoryKeepsRunsApart) {
  // "a" and "ab" share leading bytes; the length prefix keeps them apart.
  const std::vector<std::string> ids = {"a", "ab", "a\0"s, "b", "aa"};
  auto batch = store_->batch();
  for (std::size_t run = 0; run < ids.size(); ++run) {
    for (std::uint64_t sequence = 1; sequence <= run + 1; ++sequence) {
      batch.put_event(
          ids[run], sequence,
          make_event(event_kind::timer_fired, run * 100 + sequence));
    }
  }
  commit(batch);
  for (std::size_t run = 0; run < ids.size(); ++run) {
    auto history = store_->load_history(ids[run]);
    ASSERT_TRUE(history.ok()) << history.error().message;
    ASSERT_EQ(history->size(), run + 1) << run;
    EXPECT_EQ(history->back().call, run * 100 + run + 1);
  }
  auto none = store_->load_history("c");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_F(StoreTest, LoadHistoryOfAnIdOfAll0xffBytesWorks) {
  // Its prefix has no successor, so the scan runs without an upper bound.
  const std::string id(keys::string_bytes_max, '\xff');
  auto batch = store_->batch();
  batch.put_event(id, 1, make_event(event_kind::run_started, 0));
  batch.put_event(id, 2, make_event(event_kind::run_completed, 0));
  commit(batch);
  auto history = store_->load_history(id);
  ASSERT_TRUE(history.ok()) << history.error().message;
  EXPECT_EQ(history->size(), 2u);
}

TEST_F(StoreTest, HistoryGapIsCorruptRecord) {
  auto batch = store_->batch();
  batch.put_event("run_1", 1, make_event(event_kind::run_started, 0));
  batch.put_event("run_1", 2, make_event(event_kind::step_completed, 1));
  batch.put_event("run_1", 4, make_event(event_kind::step_completed, 2));
  commit(batch);
  auto history = store_->load_history("run_1");
  ASSERT_FALSE(history.ok());
  EXPECT_EQ(history.error().code, errc::corrupt_record);
  EXPECT_NE(history.error().message.find("history"), std::string::npos);
  EXPECT_NE(history.error().message.find("run_1"), std::string::npos);
  EXPECT_NE(history.error().message.find("gap"), std::string::npos);
}

TEST_F(StoreTest, HistoryNotStartingAtOneIsCorruptRecord) {
  auto batch = store_->batch();
  batch.put_event("run_1", 2, make_event(event_kind::run_started, 0));
  commit(batch);
  EXPECT_EQ(store_->load_history("run_1").error().code, errc::corrupt_record);
}

TEST_F(StoreTest, SequenceZeroIsRefusedBeforeItReachesTheDisk) {
  auto batch = store_->batch();
  batch.put_event("run_1", 0, make_event(event_kind::run_started, 0));
  EXPECT_EQ(store_->write(batch).error().code, errc::invalid_argument);
  EXPECT_TRUE(store_->load_history("run_1")->empty());
}

TEST_F(StoreTest, CorruptEventNamesRunAndSequence) {
  auto batch = store_->batch();
  batch.put_event("run_1", 1, make_event(event_kind::run_started, 0));
  commit(batch);
  std::string damaged = codec::encode(make_event(event_kind::step_failed, 1));
  damaged[3] ^= 0x10;
  put_raw(family::history, keys::history("run_1", 2), damaged);
  auto history = store_->load_history("run_1");
  ASSERT_FALSE(history.ok());
  EXPECT_EQ(history.error().code, errc::corrupt_record);
  EXPECT_NE(history.error().message.find("history: run 'run_1' event 2"),
            std::string::npos)
      << history.error().message;
}

TEST_F(StoreTest, MalformedHistoryKeyIsCorruptRecord) {
  put_raw(family::history, keys::history_prefix("run_1") + "xyz",
          codec::encode(make_event(event_kind::run_started, 0)));
  EXPECT_EQ(store_->load_history("run_1").error().code, errc::corrupt_record);
}

// ---- active runs and timers
// --------------------------------------------------

TEST_F(StoreTest, ActiveRunsListsIdsInOrderAndForgetsDeleted) {
  auto batch = store_->batch();
  for (const int n : {3, 1, 2, 4}) {
    batch.put_run(make_run(run_id(n)));
    batch.put_active(run_id(n));
  }
  commit(batch);
  auto ended = store_->batch();
  ended.put_run(make_run(run_id(2), "flow-a", run_status::completed));
  ended.delete_active(run_id(2));
  commit(ended);
  auto active = store_->active_runs();
  ASSERT_TRUE(active.ok());
  EXPECT_EQ(*active,
            (std::vector<std::string>{run_id(1), run_id(3), run_id(4)}));
}

TEST_F(StoreTest, CorruptActiveEntryIsCorruptRecord) {
  put_raw(family::active, keys::active("run_1"), "bad");
  auto active = store_->active_runs();
  ASSERT_FALSE(active.ok());
  EXPECT_EQ(active.error().code, errc::corrupt_record);
  EXPECT_NE(active.error().message.find("active"), std::string::npos);
  EXPECT_NE(active.error().message.find("run_1"), std::string::npos);
}

TEST_F(StoreTest, TimersUntilReturnsDueTimersInDueOrder) {
  const std::vector<timer_record> timers = {
      {300, "run_b", 1, timer_kind::sleep},
      {100, "run_a", 2, timer_kind::step_retry},
      {256, "run_a", 1, timer_kind::sleep},
      {100, "run_a", 1, timer_kind::sleep},
      {301, "run_c", 1, timer_kind::sleep},
      {5000, "run_d", 1, timer_kind::sleep},
  };
  auto batch = store_->batch();
  for (const auto& timer : timers) {
    batch.put_timer(timer);
  }
  commit(batch);
  auto due = store_->timers_until(300, 100);
  ASSERT_TRUE(due.ok()) << due.error().message;
  EXPECT_EQ(*due, (std::vector<timer_record>{
                      {100, "run_a", 1, timer_kind::sleep},
                      {100, "run_a", 2, timer_kind::step_retry},
                      {256, "run_a", 1, timer_kind::sleep},
                      {300, "run_b", 1, timer_kind::sleep},
                  }));
  auto first_two = store_->timers_until(300, 2);
  ASSERT_TRUE(first_two.ok());
  EXPECT_EQ(first_two->size(), 2u);
  EXPECT_EQ(first_two->back().kind, timer_kind::step_retry);
  EXPECT_TRUE(store_->timers_until(99, 100)->empty());
  EXPECT_TRUE(store_->timers_until(-1, 100)->empty());
  EXPECT_TRUE(store_->timers_until(300, 0)->empty());
  EXPECT_EQ(store_->timers_until(std::numeric_limits<std::int64_t>::max(), 100)
                ->size(),
            timers.size());
}

TEST_F(StoreTest, DeletedTimerIsNoLongerDue) {
  const timer_record timer{100, "run_a", 1, timer_kind::sleep};
  auto batch = store_->batch();
  batch.put_timer(timer);
  commit(batch);
  auto remove = store_->batch();
  remove.delete_timer(timer);
  commit(remove);
  EXPECT_TRUE(store_->timers_until(1000, 10)->empty());
}

TEST_F(StoreTest, CorruptTimerIsCorruptRecord) {
  put_raw(family::timers, keys::timer({5, "run_t", 1, timer_kind::sleep}), "x");
  auto due = store_->timers_until(10, 10);
  ASSERT_FALSE(due.ok());
  EXPECT_EQ(due.error().code, errc::corrupt_record);
  EXPECT_NE(due.error().message.find("run_t"), std::string::npos);
  put_raw(family::timers, keys::timer({5, "run_t", 1, timer_kind::sleep}),
          codec::encode_marker());
  put_raw(family::timers, "\x00\x00\x00\x00\x00\x00\x00\x01zz"s,
          codec::encode_marker());
  EXPECT_EQ(store_->timers_until(10, 10).error().code, errc::corrupt_record);
}

// ---- scan_runs -------------------------------------------------------------

class StoreScanTest : public StoreTest {
 protected:
  // run_1 .. run_20; odd ones completed, every third in flow-b.
  void SetUp() override {
    StoreTest::SetUp();
    std::vector<run_record> runs;
    for (int n = 1; n <= 20; ++n) {
      runs.push_back(
          make_run(run_id(n), n % 3 == 0 ? "flow-b" : "flow-a",
                   n % 2 == 1 ? run_status::completed : run_status::running));
    }
    put_runs(runs);
  }

  std::vector<std::string> expected(int from, int down_to, bool (*keep)(int)) {
    std::vector<std::string> ids;
    for (int n = from; n >= down_to; --n) {
      if (keep(n)) {
        ids.push_back(run_id(n));
      }
    }
    return ids;
  }
};

TEST_F(StoreScanTest, ListsNewestFirst) {
  auto scan = store_->scan_runs("", std::nullopt, std::nullopt, 100);
  ASSERT_TRUE(scan.ok());
  EXPECT_EQ(ids_of(scan->runs), expected(20, 1, [](int) { return true; }));
  EXPECT_EQ(scan->next_before_id, "");
}

TEST_F(StoreScanTest, FiltersByStatusAndFlow) {
  auto completed =
      store_->scan_runs("", run_status::completed, std::nullopt, 100);
  ASSERT_TRUE(completed.ok());
  EXPECT_EQ(ids_of(completed->runs),
            expected(20, 1, [](int n) { return n % 2 == 1; }));
  auto flow_b = store_->scan_runs("", std::nullopt, "flow-b", 100);
  ASSERT_TRUE(flow_b.ok());
  EXPECT_EQ(ids_of(flow_b->runs),
            expected(20, 1, [](int n) { return n % 3 == 0; }));
  auto both = store_->scan_runs("", run_status::running, "flow-b", 100);
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(ids_of(both->runs),
            expected(20, 1, [](int n) { return n % 6 == 0; }));
  auto none = store_->scan_runs("", run_status::cancelled, std::nullopt, 100);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->runs.empty());
  EXPECT_EQ(none->next_before_id, "");
}

TEST_F(StoreScanTest, CursorPagesThroughEveryRunOnce) {
  std::vector<std::string> seen;
  std::string cursor;
  int pages = 0;
  do {
    auto page = store_->scan_runs(cursor, std::nullopt, std::nullopt, 6);
    ASSERT_TRUE(page.ok());
    EXPECT_LE(page->runs.size(), 6u);
    for (const auto& run : page->runs) {
      seen.push_back(run.id);
    }
    cursor = page->next_before_id;
    ASSERT_LT(++pages, 10);
  } while (!cursor.empty());
  EXPECT_EQ(pages, 4);  // 6 + 6 + 6 + 2
  EXPECT_EQ(seen, expected(20, 1, [](int) { return true; }));
}

TEST_F(StoreScanTest, FilteredPagesContinueFromTheLastExaminedRun) {
  auto first = store_->scan_runs("", std::nullopt, "flow-b", 2);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(ids_of(first->runs),
            (std::vector<std::string>{run_id(18), run_id(15)}));
  EXPECT_EQ(first->next_before_id, run_id(15));
  auto second =
      store_->scan_runs(first->next_before_id, std::nullopt, "flow-b", 100);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(ids_of(second->runs),
            expected(14, 1, [](int n) { return n % 3 == 0; }));
  EXPECT_EQ(second->next_before_id, "");
}

TEST_F(StoreScanTest, NoCursorWhenTheLastPageEndsAtTheOldestRun) {
  auto page = store_->scan_runs(run_id(5), std::nullopt, std::nullopt, 4);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(ids_of(page->runs), expected(4, 1, [](int) { return true; }));
  EXPECT_EQ(page->next_before_id, "");
}

TEST_F(StoreScanTest, ScanMaxBoundsTheRecordsExamined) {
  // Only run_18 and run_12 match among the 10 newest examined.
  auto scan = store_->scan_runs("", run_status::running, "flow-b", 100, 10);
  ASSERT_TRUE(scan.ok());
  EXPECT_EQ(ids_of(scan->runs),
            (std::vector<std::string>{run_id(18), run_id(12)}));
  EXPECT_EQ(scan->next_before_id, run_id(11));
}

TEST_F(StoreScanTest, CursorThatIsNotARunStartsJustBeforeIt) {
  auto scan =
      store_->scan_runs(run_id(10) + "5", std::nullopt, std::nullopt, 100);
  ASSERT_TRUE(scan.ok());
  // Longer ids sort after all run_%08d ids (length first), so every run
  // is older than this cursor.
  EXPECT_EQ(scan->runs.size(), 20u);
  // Same length, between run_00000019 and run_00000020 (':' follows '9').
  auto between =
      store_->scan_runs("run_0000001:", std::nullopt, std::nullopt, 100);
  ASSERT_TRUE(between.ok());
  EXPECT_EQ(ids_of(between->runs), expected(19, 1, [](int) { return true; }));
}

TEST_F(StoreScanTest, CorruptRecordIsSkippedNotFatal) {
  put_raw(family::runs, keys::run(run_id(19)), "garbage");
  auto scan = store_->scan_runs("", std::nullopt, std::nullopt, 3);
  ASSERT_TRUE(scan.ok());
  EXPECT_EQ(ids_of(scan->runs),
            (std::vector<std::string>{run_id(20), run_id(18), run_id(17)}));
  // get_run still reports it.
  EXPECT_EQ(store_->get_run(run_id(19)).error().code, errc::corrupt_record);
}

TEST_F(StoreScanTest, ZeroLimitsAreInvalidArgument) {
  EXPECT_EQ(store_->scan_runs("", std::nullopt, std::nullopt, 0).error().code,
            errc::invalid_argument);
  EXPECT_EQ(
      store_->scan_runs("", std::nullopt, std::nullopt, 5, 0).error().code,
      errc::invalid_argument);
}

TEST_F(StoreScanTest, EmptyDatabaseScansToNothing) {
  testing::temp_dir empty_dir;
  auto empty = store::open(empty_dir.path());
  ASSERT_TRUE(empty.ok());
  auto scan = (*empty)->scan_runs("", std::nullopt, std::nullopt, 10);
  ASSERT_TRUE(scan.ok());
  EXPECT_TRUE(scan->runs.empty());
  EXPECT_EQ(scan->next_before_id, "");
}

// ---- concurrency
// -------------------------------------------------------------

TEST_F(StoreTest, ConcurrentReadersSeeWholeBatches) {
  // A batch writes a run record and its history together; a reader never
  // sees the record's event count ahead of the history.
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (std::uint64_t sequence = 1; sequence <= 200; ++sequence) {
      auto batch = store_->batch();
      run_record run = make_run("run_1");
      run.created_at_ms = static_cast<std::int64_t>(sequence);
      batch.put_event("run_1", sequence,
                      make_event(event_kind::value_recorded, sequence));
      batch.put_run(run);
      EXPECT_TRUE(store_->write(batch).ok());
    }
    done = true;
  });
  std::size_t reads = 0;
  while (!done) {
    auto run = store_->get_run("run_1");
    auto history = store_->load_history("run_1");
    ASSERT_TRUE(run.ok());
    ASSERT_TRUE(history.ok()) << history.error().message;
    if (run->has_value()) {
      EXPECT_GE(history->size(),
                static_cast<std::size_t>((*run)->created_at_ms));
    }
    ++reads;
  }
  writer.join();
  EXPECT_GT(reads, 0u);
  EXPECT_EQ(store_->load_history("run_1")->size(), 200u);
}

}  // namespace
}  // namespace durin::persistence
