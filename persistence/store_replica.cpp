// A backup's copy of a shard (store.hpp, follow .. checksum): the database
// open behind a closed fence, written only with the primary's group
// writes, in log order.
#include <rocksdb/db.h>
#include <rocksdb/utilities/checkpoint.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <mutex>

#include "base/fnv1a.hpp"
#include "persistence/batch_check.hpp"
#include "persistence/keys.hpp"
#include "persistence/storage_error.hpp"
#include "persistence/store.hpp"
#include "persistence/store_internal.hpp"

namespace durin::persistence {

using namespace store_detail;

namespace {

using base::fnv1a;

}  // namespace

status store::follow() {
  if (!options_.fence || options_.fence->open()) {
    return make_error(errc::internal,
                      "a store follows a primary only behind a closed fence");
  }
  std::unique_lock exclusive(db_mutex_);
  if (following() && db_) {
    return {};
  }
  close_database();
  if (const auto opened = open_database(); !opened.ok()) {
    close_database();
    return make_error(errc::storage_error,
                      "open the shard's copy: " + opened.ToString());
  }
  if (auto checked = check_schema(); !checked) {
    close_database();
    return checked;
  }
  forget_counts();  // the primary's writes bypass them
  following_.store(true, std::memory_order_release);
  return {};
}

void store::unfollow() {
  std::unique_lock exclusive(db_mutex_);
  if (!following()) {
    return;
  }
  following_.store(false, std::memory_order_release);
  if (!options_.fence || !options_.fence->open()) {
    close_database();
  }
}

status store::apply_replicated(std::uint64_t epoch, std::uint64_t position,
                               std::string_view data, bool sync) {
  return guarded("apply a replicated write", [&]() -> status {
    std::shared_lock shared(db_mutex_);
    if (!following() || !db_) {
      return make_error(errc::invalid_argument,
                        "this node does not keep a copy of the shard now");
    }
    // One writer: the replication applier of this shard.
    if (position != log_position() + 1) {
      return make_error(errc::invalid_argument,
                        "write " + std::to_string(position) +
                            " is not the next of " +
                            std::to_string(log_position()));
    }
    rocksdb::WriteBatch batch{std::string(data)};
    if (auto checked = check_families(batch, family_ids_); !checked) {
      return make_error(errc::invalid_argument, "a replicated write refused: " +
                                                    checked.error().message);
    }
    auto options = sync_write();
    options.sync = sync;
    // The watch's lock: the entry counts and index_stale_.
    std::lock_guard lock(watch_->mutex);
    entry_deltas deltas;
    auto stale = follow_index(batch, deltas);
    if (!stale) {
      return stale.error();
    }
    const rocksdb::Status written = db_->Write(options, &batch);
    if (!written.ok()) {
      return make_error(errc::storage_error,
                        "write a replicated batch: " + plain_words(written));
    }
    count_entries(deltas);
    index_stale_ = index_stale_ || *stale;
    advanced_to(position, epoch);
    return {};
  });
}

status store::sync_replicated() {
  return guarded("sync replicated writes", [&]() -> status {
    std::shared_lock shared(db_mutex_);
    if (!following() || !db_) {
      return make_error(errc::invalid_argument,
                        "this node does not keep a copy of the shard now");
    }
    if (const auto synced = db_->SyncWAL(); !synced.ok()) {
      return make_error(errc::storage_error,
                        "sync replicated writes: " + plain_words(synced));
    }
    return {};
  });
}

status store::checkpoint(const std::string& into) {
  return guarded("checkpoint", [&]() -> status {
    std::shared_lock shared(db_mutex_);
    if (!db_) {
      return make_error(errc::storage_error,
                        "the shard's database is not open");
    }
    rocksdb::Checkpoint* made = nullptr;
    if (const auto created = rocksdb::Checkpoint::Create(db_.get(), &made);
        !created.ok()) {
      return make_error(errc::storage_error,
                        "checkpoint: " + plain_words(created));
    }
    std::unique_ptr<rocksdb::Checkpoint> owned(made);
    // log_size_for_flush 0: the memtables are flushed first, so the copy
    // needs no WAL replay and is consistent as of now.
    if (const auto taken = owned->CreateCheckpoint(into, 0); !taken.ok()) {
      return make_error(errc::storage_error,
                        "checkpoint: " + plain_words(taken));
    }
    return {};
  });
}

result<std::uint64_t> store::checksum() const {
  return guarded("checksum", [&]() -> result<std::uint64_t> {
    std::shared_lock shared(db_mutex_);
    if (!db_) {
      return make_error(errc::storage_error,
                        "the shard's database is not open");
    }
    std::uint64_t hash = base::fnv1a_offset;
    const std::string probe = keys::meta(probe_name);
    for (std::size_t index = 0; index < family_count; ++index) {
      std::unique_ptr<rocksdb::Iterator> it(
          db_->NewIterator(rocksdb::ReadOptions(), handles_[index]));
      for (it->SeekToFirst(); it->Valid(); it->Next()) {
        if (static_cast<family>(index) == family::meta &&
            view(it->key()) == probe) {
          continue;
        }
        hash = fnv1a(view(it->key()), hash ^ index);
        hash = fnv1a(view(it->value()), hash);
      }
      if (!it->status().ok()) {
        return make_error(errc::storage_error,
                          "checksum: " + plain_words(it->status()));
      }
    }
    return hash;
  });
}

}  // namespace durin::persistence
