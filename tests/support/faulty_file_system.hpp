// Tests only: a RocksDB FileSystem over the operating system's that fails
// chosen operations the way a bad day does: a full disk (ENOSPC), no file
// descriptors left (EMFILE), a failing device (EIO). A store opened with it
// (persistence::store_options::file_system) sees real RocksDB behaviour on
// real files, except where a rule says an operation fails.
//
// Operations: `create` (a new or reopened writable file, a directory
// handle), `open` (a file opened for reading), `write` (an append),
// `sync` (sync, fsync, range sync) and `read`. A failing append of a full
// disk writes the first half of its bytes first, as a real ENOSPC can: the
// WAL then ends in a torn record, which the next open must drop.
//
// Thread-safety: every method may be called from any thread; RocksDB calls
// the file operations from its own threads.
#pragma once

#include <rocksdb/file_system.h>
#include <rocksdb/io_status.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>

namespace durin::testing {

class faulty_file_system : public rocksdb::FileSystemWrapper {
 public:
  enum class operation : std::uint8_t { create, open, write, sync, read };
  static constexpr std::size_t operation_count = 5;
  enum class fault : std::uint8_t { no_space, no_descriptors, io_error };

  explicit faulty_file_system(std::uint64_t seed = 1)
      : rocksdb::FileSystemWrapper(rocksdb::FileSystem::Default()),
        random_(seed) {}

  const char* Name() const override { return "durin-faulty"; }

  // From now on each `which` fails with `kind` with `probability` (1: every
  // one), at most `count` times (0: without limit).
  void fail(operation which, fault kind, double probability = 1.0,
            std::uint64_t count = 0) {
    std::lock_guard lock(mutex_);
    rules_[index(which)] = rule{true, kind, probability, count};
    armed_.store(true, std::memory_order_release);
  }

  // No more faults: the cause is gone (space freed, descriptors closed).
  void heal() {
    std::lock_guard lock(mutex_);
    rules_ = {};
    armed_.store(false, std::memory_order_release);
  }

  // Runs `action` once, on the next append to a file whose name ends with
  // `suffix` (".log": the write-ahead log), just before that append: a
  // test's way to act in the middle of a RocksDB write.
  void before_next_append(std::string suffix, std::function<void()> action) {
    std::lock_guard lock(mutex_);
    append_suffix_ = std::move(suffix);
    append_action_ = std::move(action);
    action_armed_.store(true, std::memory_order_release);
  }

  std::uint64_t injected() const {
    std::uint64_t total = 0;
    for (const auto& count : injected_) {
      total += count.load(std::memory_order_relaxed);
    }
    return total;
  }
  std::uint64_t injected(operation which) const {
    return injected_[index(which)].load(std::memory_order_relaxed);
  }

  // Runs the action of before_next_append when `file` is its file.
  void appending(const std::string& file) {
    if (!action_armed_.load(std::memory_order_acquire)) {
      return;
    }
    std::function<void()> action;
    {
      std::lock_guard lock(mutex_);
      if (!append_action_ || !file.ends_with(append_suffix_)) {
        return;
      }
      action = std::move(append_action_);
      append_action_ = nullptr;
      action_armed_.store(false, std::memory_order_release);
    }
    action();
  }

  // The status `which` fails with now, or ok. Counts what it injects.
  rocksdb::IOStatus decide(operation which, const std::string& file) {
    if (!armed_.load(std::memory_order_acquire)) {
      return rocksdb::IOStatus::OK();
    }
    fault kind;
    {
      std::lock_guard lock(mutex_);
      auto& chosen = rules_[index(which)];
      if (!chosen.active) {
        return rocksdb::IOStatus::OK();
      }
      if (chosen.probability < 1.0 &&
          std::uniform_real_distribution<double>(0.0, 1.0)(random_) >=
              chosen.probability) {
        return rocksdb::IOStatus::OK();
      }
      kind = chosen.kind;
      if (chosen.remaining > 0 && --chosen.remaining == 0) {
        chosen.active = false;
      }
    }
    injected_[index(which)].fetch_add(1, std::memory_order_relaxed);
    return status_of(which, kind, file);
  }

  // The statuses PosixFileSystem answers for these errnos.
  static rocksdb::IOStatus status_of(operation which, fault kind,
                                     const std::string& file) {
    static constexpr std::array<const char*, operation_count> doing = {
        "While open a file for appending", "While open a file for reading",
        "While appending to file", "While fsync", "While pread offset"};
    const std::string context =
        std::string(doing[index(which)]) + ": " + file + ": ";
    switch (kind) {
      case fault::no_space:
        return rocksdb::IOStatus::NoSpace(context, "No space left on device");
      case fault::no_descriptors:
        return rocksdb::IOStatus::IOError(context, "Too many open files");
      case fault::io_error:
        break;
    }
    return rocksdb::IOStatus::IOError(context, "Input/output error");
  }

  rocksdb::IOStatus NewWritableFile(
      const std::string& file, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* debug) override {
    if (auto failed = decide(operation::create, file); !failed.ok()) {
      return failed;
    }
    auto opened = target()->NewWritableFile(file, options, result, debug);
    wrap(file, opened, result);
    return opened;
  }

  rocksdb::IOStatus ReopenWritableFile(
      const std::string& file, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* debug) override {
    if (auto failed = decide(operation::create, file); !failed.ok()) {
      return failed;
    }
    auto opened = target()->ReopenWritableFile(file, options, result, debug);
    wrap(file, opened, result);
    return opened;
  }

  rocksdb::IOStatus ReuseWritableFile(
      const std::string& file, const std::string& old_file,
      const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* debug) override {
    if (auto failed = decide(operation::create, file); !failed.ok()) {
      return failed;
    }
    auto opened =
        target()->ReuseWritableFile(file, old_file, options, result, debug);
    wrap(file, opened, result);
    return opened;
  }

  rocksdb::IOStatus NewDirectory(const std::string& name,
                                 const rocksdb::IOOptions& options,
                                 std::unique_ptr<rocksdb::FSDirectory>* result,
                                 rocksdb::IODebugContext* debug) override {
    if (auto failed = decide(operation::create, name); !failed.ok()) {
      return failed;
    }
    return target()->NewDirectory(name, options, result, debug);
  }

  rocksdb::IOStatus NewSequentialFile(
      const std::string& file, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSSequentialFile>* result,
      rocksdb::IODebugContext* debug) override {
    if (auto failed = decide(operation::open, file); !failed.ok()) {
      return failed;
    }
    auto opened = target()->NewSequentialFile(file, options, result, debug);
    if (opened.ok()) {
      *result =
          std::make_unique<sequential_file>(std::move(*result), *this, file);
    }
    return opened;
  }

  rocksdb::IOStatus NewRandomAccessFile(
      const std::string& file, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSRandomAccessFile>* result,
      rocksdb::IODebugContext* debug) override {
    if (auto failed = decide(operation::open, file); !failed.ok()) {
      return failed;
    }
    auto opened = target()->NewRandomAccessFile(file, options, result, debug);
    if (opened.ok()) {
      *result =
          std::make_unique<random_access_file>(std::move(*result), *this, file);
    }
    return opened;
  }

 private:
  struct rule {
    bool active = false;
    fault kind = fault::io_error;
    double probability = 1.0;
    std::uint64_t remaining = 0;  // 0: without limit
  };

  static constexpr std::size_t index(operation which) {
    return static_cast<std::size_t>(which);
  }

  class writable_file : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    writable_file(std::unique_ptr<rocksdb::FSWritableFile> file,
                  faulty_file_system& owner, std::string name)
        : rocksdb::FSWritableFileOwnerWrapper(std::move(file)),
          owner_(owner),
          name_(std::move(name)) {}

    rocksdb::IOStatus Append(const rocksdb::Slice& data,
                             const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* debug) override {
      if (auto failed = torn(data, options, debug); !failed.ok()) {
        return failed;
      }
      return target()->Append(data, options, debug);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data,
                             const rocksdb::IOOptions& options,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* debug) override {
      if (auto failed = torn(data, options, debug); !failed.ok()) {
        return failed;
      }
      return target()->Append(data, options, info, debug);
    }
    rocksdb::IOStatus PositionedAppend(
        const rocksdb::Slice& data, std::uint64_t offset,
        const rocksdb::IOOptions& options,
        rocksdb::IODebugContext* debug) override {
      if (auto failed = owner_.decide(operation::write, name_); !failed.ok()) {
        return failed;
      }
      return target()->PositionedAppend(data, offset, options, debug);
    }
    rocksdb::IOStatus PositionedAppend(
        const rocksdb::Slice& data, std::uint64_t offset,
        const rocksdb::IOOptions& options,
        const rocksdb::DataVerificationInfo& info,
        rocksdb::IODebugContext* debug) override {
      if (auto failed = owner_.decide(operation::write, name_); !failed.ok()) {
        return failed;
      }
      return target()->PositionedAppend(data, offset, options, info, debug);
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* debug) override {
      if (auto failed = owner_.decide(operation::sync, name_); !failed.ok()) {
        return failed;
      }
      return target()->Sync(options, debug);
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* debug) override {
      if (auto failed = owner_.decide(operation::sync, name_); !failed.ok()) {
        return failed;
      }
      return target()->Fsync(options, debug);
    }
    rocksdb::IOStatus RangeSync(std::uint64_t offset, std::uint64_t bytes,
                                const rocksdb::IOOptions& options,
                                rocksdb::IODebugContext* debug) override {
      if (auto failed = owner_.decide(operation::sync, name_); !failed.ok()) {
        return failed;
      }
      return target()->RangeSync(offset, bytes, options, debug);
    }

   private:
    // A full disk takes the first half of the bytes, then fails.
    rocksdb::IOStatus torn(const rocksdb::Slice& data,
                           const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* debug) {
      owner_.appending(name_);
      auto failed = owner_.decide(operation::write, name_);
      if (!failed.ok() && failed.IsNoSpace() && data.size() > 1) {
        (void)target()->Append(rocksdb::Slice(data.data(), data.size() / 2),
                               options, debug);
      }
      return failed;
    }

    faulty_file_system& owner_;
    std::string name_;
  };

  class sequential_file : public rocksdb::FSSequentialFileOwnerWrapper {
   public:
    sequential_file(std::unique_ptr<rocksdb::FSSequentialFile> file,
                    faulty_file_system& owner, std::string name)
        : rocksdb::FSSequentialFileOwnerWrapper(std::move(file)),
          owner_(owner),
          name_(std::move(name)) {}

    rocksdb::IOStatus Read(std::size_t n, const rocksdb::IOOptions& options,
                           rocksdb::Slice* result, char* scratch,
                           rocksdb::IODebugContext* debug) override {
      if (auto failed = owner_.decide(operation::read, name_); !failed.ok()) {
        return failed;
      }
      return target()->Read(n, options, result, scratch, debug);
    }
    rocksdb::IOStatus PositionedRead(std::uint64_t offset, std::size_t n,
                                     const rocksdb::IOOptions& options,
                                     rocksdb::Slice* result, char* scratch,
                                     rocksdb::IODebugContext* debug) override {
      if (auto failed = owner_.decide(operation::read, name_); !failed.ok()) {
        return failed;
      }
      return target()->PositionedRead(offset, n, options, result, scratch,
                                      debug);
    }

   private:
    faulty_file_system& owner_;
    std::string name_;
  };

  class random_access_file : public rocksdb::FSRandomAccessFileOwnerWrapper {
   public:
    random_access_file(std::unique_ptr<rocksdb::FSRandomAccessFile> file,
                       faulty_file_system& owner, std::string name)
        : rocksdb::FSRandomAccessFileOwnerWrapper(std::move(file)),
          owner_(owner),
          name_(std::move(name)) {}

    rocksdb::IOStatus Read(std::uint64_t offset, std::size_t n,
                           const rocksdb::IOOptions& options,
                           rocksdb::Slice* result, char* scratch,
                           rocksdb::IODebugContext* debug) const override {
      if (auto failed = owner_.decide(operation::read, name_); !failed.ok()) {
        return failed;
      }
      return target()->Read(offset, n, options, result, scratch, debug);
    }
    rocksdb::IOStatus MultiRead(rocksdb::FSReadRequest* requests,
                                std::size_t count,
                                const rocksdb::IOOptions& options,
                                rocksdb::IODebugContext* debug) override {
      if (auto failed = owner_.decide(operation::read, name_); !failed.ok()) {
        for (std::size_t i = 0; i < count; ++i) {
          requests[i].status = failed;
        }
        return failed;
      }
      return target()->MultiRead(requests, count, options, debug);
    }

   private:
    faulty_file_system& owner_;
    std::string name_;
  };

  void wrap(const std::string& file, const rocksdb::IOStatus& opened,
            std::unique_ptr<rocksdb::FSWritableFile>* result) {
    if (opened.ok()) {
      *result =
          std::make_unique<writable_file>(std::move(*result), *this, file);
    }
  }

  std::mutex mutex_;
  std::array<rule, operation_count> rules_{};
  std::atomic<bool> armed_{false};
  std::string append_suffix_;
  std::function<void()> append_action_;
  std::atomic<bool> action_armed_{false};
  std::mt19937_64 random_;
  std::array<std::atomic<std::uint64_t>, operation_count> injected_{};
};

}  // namespace durin::testing
