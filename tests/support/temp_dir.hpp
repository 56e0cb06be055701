// A directory under /tmp that lives as long as the object, for tests that use
// a real RocksDB.
#pragma once

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

namespace durin::testing {

class temp_dir {
 public:
  temp_dir() : temp_dir(std::filesystem::temp_directory_path()) {}
  // Under `base`, e.g. /dev/shm for a test whose every step fsyncs.
  explicit temp_dir(const std::filesystem::path& base) {
    std::string pattern = (base / "durin-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Polls `condition` until it holds or `timeout` passes; true when it held.
inline bool eventually(
    const std::function<bool()>& condition,
    std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return condition();
}

}  // namespace durin::testing
