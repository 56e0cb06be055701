// write_batch: the puts and deletes of one atomic write. Every put checks
// its record first and a refused one refuses the whole batch; while the
// store is not ready, operations mark the batch unavailable instead.
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <memory>

#include "persistence/codec.hpp"
#include "persistence/keys.hpp"
#include "persistence/store.hpp"
#include "persistence/store_internal.hpp"

namespace durin::persistence {

using namespace store_detail;

write_batch::write_batch(const store& owner)
    : store_(&owner), batch_(std::make_unique<rocksdb::WriteBatch>()) {}

write_batch::write_batch(write_batch&&) noexcept = default;
write_batch& write_batch::operator=(write_batch&&) noexcept = default;
write_batch::~write_batch() = default;

rocksdb::Status write_batch::put_to(family which, const rocksdb::Slice& key,
                                    const rocksdb::Slice& value) {
  auto pinned = store_->hold();
  if (!pinned) {
    unavailable_ = true;
    return rocksdb::Status::OK();
  }
  return batch_->Put(store_->handle(which), key, value);
}

rocksdb::Status write_batch::delete_from(family which,
                                         const rocksdb::Slice& key) {
  auto pinned = store_->hold();
  if (!pinned) {
    unavailable_ = true;
    return rocksdb::Status::OK();
  }
  return batch_->Delete(store_->handle(which), key);
}

rocksdb::Status write_batch::delete_range_from(family which,
                                               const rocksdb::Slice& begin,
                                               const rocksdb::Slice& end) {
  auto pinned = store_->hold();
  if (!pinned) {
    unavailable_ = true;
    return rocksdb::Status::OK();
  }
  return batch_->DeleteRange(store_->handle(which), begin, end);
}

void write_batch::put_value(family which, std::string_view key,
                            std::string_view value) {
  const auto put = put_to(which, rocksdb::Slice(key.data(), key.size()),
                          rocksdb::Slice(value.data(), value.size()));
  if (!put.ok()) {
    refuse(std::string(name_of(which)) + ": " + put.ToString());
  }
}

void write_batch::delete_key(family which, std::string_view key) {
  const auto deleted =
      delete_from(which, rocksdb::Slice(key.data(), key.size()));
  if (!deleted.ok()) {
    refuse(std::string(name_of(which)) + ": " + deleted.ToString());
  }
}

void write_batch::refuse(std::string problem) {
  if (problem_.empty()) {
    problem_ = std::move(problem);
  }
}

void write_batch::put_run(const run_record& record) {
  if (!keys::fits(record.id)) {
    refuse("run id of " + std::to_string(record.id.size()) +
           " bytes is too long for a key");
    return;
  }
  if (auto valid = codec::validate(record); !valid) {
    refuse("run " + printable(record.id) + ": " + valid.error().message);
    return;
  }
  if (!record.search.empty() && !keys::fits(record.tenant)) {
    // Its search index entries (keys::search_entry) could not name it.
    refuse("run " + printable(record.id) + ": tenant of " +
           std::to_string(record.tenant.size()) +
           " bytes is too long for a key");
    return;
  }
  const auto put =
      put_to(family::runs, keys::run(record.id), codec::encode(record));
  if (!put.ok()) {
    refuse("run " + printable(record.id) + ": " + put.ToString());
  }
}

void write_batch::put_event(std::string_view run_id, std::uint64_t sequence,
                            const event_record& event) {
  if (!keys::fits(run_id)) {
    refuse("run id of " + std::to_string(run_id.size()) +
           " bytes is too long for a key");
    return;
  }
  // Built only for a refusal: every event of every run passes here.
  auto subject = [&] {
    return "run " + printable(run_id) + " event " + std::to_string(sequence);
  };
  if (sequence == 0) {
    // History starts at 1; a 0 would read back as a gap.
    refuse(subject() + ": sequences start at 1");
    return;
  }
  if (auto valid = codec::validate(event); !valid) {
    refuse(subject() + ": " + valid.error().message);
    return;
  }
  const auto put = put_to(family::history, keys::history(run_id, sequence),
                          codec::encode(event));
  if (!put.ok()) {
    refuse(subject() + ": " + put.ToString());
  }
}

namespace {

// Why `timer` cannot be a key, or empty.
std::string timer_problem(const timer_record& timer) {
  if (!keys::fits(timer.run_id)) {
    return "timer run id of " + std::to_string(timer.run_id.size()) +
           " bytes is too long for a key";
  }
  if (timer.kind < timer_kind::sleep ||
      timer.kind > timer_kind::token_retention) {
    return "timer of run " + printable(timer.run_id) + " has invalid kind " +
           std::to_string(static_cast<int>(timer.kind));
  }
  return {};
}

}  // namespace

void write_batch::put_timer(const timer_record& timer) {
  if (auto problem = timer_problem(timer); !problem.empty()) {
    refuse(std::move(problem));
    return;
  }
  const auto put =
      put_to(family::timers, keys::timer(timer), codec::encode_marker());
  if (!put.ok()) {
    refuse("timer of run " + printable(timer.run_id) + ": " + put.ToString());
  }
}

void write_batch::delete_timer(const timer_record& timer) {
  if (auto problem = timer_problem(timer); !problem.empty()) {
    refuse(std::move(problem));
    return;
  }
  const auto deleted = delete_from(family::timers, keys::timer(timer));
  if (!deleted.ok()) {
    refuse("timer of run " + printable(timer.run_id) + ": " +
           deleted.ToString());
  }
}

void write_batch::put_position(std::uint64_t epoch, std::uint64_t position) {
  std::string value;
  keys::put_u64(value, epoch);
  auto put = put_to(family::meta, keys::meta(store_detail::epoch_name),
                    codec::encode_bytes(value));
  if (put.ok()) {
    value.clear();
    keys::put_u64(value, position);
    put = put_to(family::meta, keys::meta(store_detail::position_name),
                 codec::encode_bytes(value));
  }
  if (!put.ok()) {
    refuse("shard position: " + put.ToString());
  }
}

void write_batch::put_active(std::string_view run_id) {
  if (!keys::fits(run_id)) {
    refuse("run id of " + std::to_string(run_id.size()) +
           " bytes is too long for a key");
    return;
  }
  const auto put =
      put_to(family::active, keys::active(run_id), codec::encode_marker());
  if (!put.ok()) {
    refuse("active run " + printable(run_id) + ": " + put.ToString());
  }
}

void write_batch::delete_active(std::string_view run_id) {
  if (!keys::fits(run_id)) {
    refuse("run id of " + std::to_string(run_id.size()) +
           " bytes is too long for a key");
    return;
  }
  const auto deleted = delete_from(family::active, keys::active(run_id));
  if (!deleted.ok()) {
    refuse("active run " + printable(run_id) + ": " + deleted.ToString());
  }
}

std::size_t write_batch::count() const {
  return batch_ ? static_cast<std::size_t>(batch_->Count()) : 0;
}

std::size_t write_batch::size_bytes() const {
  return batch_ ? batch_->GetDataSize() : 0;
}

}  // namespace durin::persistence
