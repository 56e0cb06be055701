// Lists by query through the search index against the scan of every run
// (persistence/search_index.cpp), in the same process on the same store:
// DURIN_BENCH_SEARCH_RUNS runs (default 20,000) of one tenant, each with a
// keyword `customer` (one of 1,000 values) and an int `priority`, of which
// DURIN_BENCH_SEARCH_MATCHES (default 20) have customer 'acme'. Each query
// is listed DURIN_BENCH_SEARCH_LISTS times (default 200) through the index
// and through the scan (run_list_path::scan_only), one page of 100 each;
// reported: ms per list, runs read per list, and scan time / index time.
// Also the time to write the runs (the index kept in every write) and to
// build the index at open for a database written before it. Figures:
// benchmarks/README.md, "Search index".
#include <benchmark/benchmark.h>
#include <rocksdb/db.h>

#include <cstdio>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "persistence/codec.hpp"
#include "persistence/keys.hpp"
#include "persistence/run_query.hpp"
#include "persistence/store.hpp"

namespace {

using namespace durin;
namespace bench = durin::bench;

constexpr std::size_t write_batch_runs = 500;

persistence::run_record search_run(std::uint64_t number, bool match) {
  persistence::run_record record;
  char id[32];
  std::snprintf(id, sizeof id, "run_%026llu",
                static_cast<unsigned long long>(number));
  record.id = id;
  record.flow = "bench.order";
  record.status = number % 2 == 0 ? run_status::completed : run_status::waiting;
  record.input = std::string(200, '\x80');  // an order's worth of input
  record.created_at_ms = 1'700'000'000'000 + static_cast<std::int64_t>(number);
  record.tenant = "bench";
  record.search["customer"] = search_value::keyword(
      match ? "acme" : "customer-" + std::to_string(number % 1000));
  record.search["priority"] =
      search_value::of_int(static_cast<std::int64_t>(number % 10));
  return record;
}

// Writes `runs` runs, `matches` of them spread evenly with customer 'acme';
// seconds taken.
double write_runs(persistence::store& store, std::uint64_t runs,
                  std::uint64_t matches) {
  const auto start = bench::steady::now();
  const std::uint64_t every = runs / matches;
  for (std::uint64_t first = 0; first < runs; first += write_batch_runs) {
    auto batch = store.batch();
    for (std::uint64_t n = first; n < runs && n < first + write_batch_runs;
         ++n) {
      batch.put_run(search_run(n, n % every == every / 2));
    }
    if (auto written = store.write(batch); !written) {
      bench::fail("write runs: " + written.error().to_string());
    }
  }
  return bench::seconds_since(start);
}

// What the index's upkeep adds to each write of a run, beside its entries:
// the read of the record the write replaces and of its attributes
// (store::write, persistence/search_index.cpp). Microseconds per record.
double replaced_record_read_us(persistence::store& store, std::uint64_t runs) {
  const auto start = bench::steady::now();
  std::size_t attributes = 0;
  for (std::uint64_t n = 0; n < runs; ++n) {
    const auto key = persistence::keys::run(search_run(n, false).id);
    rocksdb::PinnableSlice value;
    if (!store.raw_db()
             .Get(rocksdb::ReadOptions(),
                  store.handle(persistence::family::runs), key, &value)
             .ok()) {
      bench::fail("read a run record back");
    }
    auto run = persistence::codec::decode_run_search(value.ToStringView());
    attributes += run ? run->search.size() : 0;
  }
  if (attributes != 2 * runs) {
    bench::fail("the records read back have other attributes");
  }
  return bench::seconds_since(start) * 1e6 / static_cast<double>(runs);
}

struct list_figures {
  double ms_per_list = 0;
  std::size_t runs_read = 0;
  std::size_t listed = 0;
};

list_figures time_lists(const persistence::store& store,
                        const persistence::run_query& query,
                        persistence::run_list_path path, std::uint64_t lists) {
  list_figures out;
  const auto start = bench::steady::now();
  for (std::uint64_t i = 0; i < lists; ++i) {
    auto page = store.scan_runs("", std::nullopt, std::nullopt, 100, 100'000,
                                std::string("bench"), SIZE_MAX, std::nullopt,
                                &query, path);
    if (!page) {
      bench::fail("list: " + page.error().to_string());
    }
    out.runs_read = page->records_read;
    out.listed = page->runs.size();
  }
  out.ms_per_list =
      bench::seconds_since(start) * 1000.0 / static_cast<double>(lists);
  return out;
}

void compare(benchmark::State& state, const persistence::store& store,
             const std::string& text, std::uint64_t lists) {
  auto query = persistence::parse_run_query(text, nullptr);
  if (!query) {
    bench::fail("query: " + query.error().to_string());
  }
  // The scan first, so that both find the records in the block cache.
  const auto scan =
      time_lists(store, *query, persistence::run_list_path::scan_only, lists);
  const auto index =
      time_lists(store, *query, persistence::run_list_path::best, lists);
  if (scan.listed != index.listed) {
    bench::fail("the index listed " + std::to_string(index.listed) +
                " runs, the scan " + std::to_string(scan.listed));
  }
  const double ratio = scan.ms_per_list / index.ms_per_list;
  state.counters["index_ms"] = index.ms_per_list;
  state.counters["scan_ms"] = scan.ms_per_list;
  state.counters["index_runs_read"] = static_cast<double>(index.runs_read);
  state.counters["scan_runs_read"] = static_cast<double>(scan.runs_read);
  bench::report(
      {"list " + text + " (" + std::to_string(index.listed) + " runs listed)",
       "index faster than the scan",
       bench::format("%.3f ms/list", index.ms_per_list) + ", " +
           std::to_string(index.runs_read) + " runs read",
       bench::format("scan %.3f ms/list", scan.ms_per_list) + ", " +
           std::to_string(scan.runs_read) + " runs read",
       bench::format("%.1fx", ratio), ratio > 1 ? "met" : "MISSED"});
}

void BM_list_by_query(benchmark::State& state) {
  const auto runs = bench::env_count("DURIN_BENCH_SEARCH_RUNS", 20'000);
  const auto matches = bench::env_count("DURIN_BENCH_SEARCH_MATCHES", 20);
  const auto lists = bench::env_count("DURIN_BENCH_SEARCH_LISTS", 200);
  if (matches > runs) {
    bench::fail("DURIN_BENCH_SEARCH_MATCHES is above DURIN_BENCH_SEARCH_RUNS");
  }
  for (auto _ : state) {
    bench::temp_dir dir("search");
    auto store = bench::open_store(dir.path());
    const double written = write_runs(*store, runs, matches);
    const double read_us = replaced_record_read_us(*store, runs);
    compare(state, *store, "customer = 'acme'", lists);
    compare(state, *store, "customer = 'acme' AND priority < 5", lists);
    compare(state, *store, "customer IN ('acme', 'nobody')", lists);

    // A database written before the index: its version removed, then the
    // reopen builds the index from the records.
    (void)store->raw_db().Delete(
        rocksdb::WriteOptions(), store->handle(persistence::family::meta),
        persistence::keys::meta("search_index_version"));
    store.reset();
    const auto start = bench::steady::now();
    store = bench::open_store(dir.path());
    const double build = bench::seconds_since(start);
    state.SetIterationTime(written + build);
    state.counters["write_runs_per_s"] = static_cast<double>(runs) / written;
    state.counters["build_at_open_ms"] = build * 1000.0;
    state.counters["replaced_read_us"] = read_us;
    bench::report({"write " + std::to_string(runs) +
                       " runs with 2 attributes, batches of 500",
                   "-", bench::format("%.0f runs/s", runs / written), "-", "-",
                   "info"});
    bench::report({"the read of the replaced record, per write of a run", "-",
                   bench::format("%.2f us", read_us), "-", "-", "info"});
    bench::report(
        {"open building the index of " + std::to_string(runs) + " runs", "-",
         bench::format("%.1f ms", build * 1000.0), "-", "-", "info"});
  }
}

BENCHMARK(BM_list_by_query)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  return durin::bench::run_benchmarks(argc, argv);
}
