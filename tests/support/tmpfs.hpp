// A tmpfs mounted for a test, so that it can fill a real disk, and the
// ballast files that fill it. Mounting needs root: without it mounted() is
// false and why() says so, for the test to skip. Unmounted on destruction
// (lazily, so files still open do not keep it).
#pragma once

#include <sys/mount.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace durin::testing {

class tmpfs {
 public:
  tmpfs(const std::string& path, int size_mb) : path_(path) {
    std::filesystem::create_directories(path_);
    const std::string size = "size=" + std::to_string(size_mb) + "m";
    if (::mount("tmpfs", path_.c_str(), "tmpfs", 0, size.c_str()) == 0) {
      mounted_ = true;
    } else {
      why_ = "cannot mount a " + std::to_string(size_mb) + " MiB tmpfs here (" +
             std::strerror(errno) + "; needs root)";
    }
  }
  ~tmpfs() {
    if (mounted_) {
      ::umount2(path_.c_str(), MNT_DETACH);
    }
  }
  tmpfs(const tmpfs&) = delete;
  tmpfs& operator=(const tmpfs&) = delete;

  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }

  // Writes `file` (under the mount) until `leave` bytes are free, or the
  // disk refuses more.
  void fill(const std::string& file, std::uintmax_t leave) const {
    const auto free_bytes = std::filesystem::space(path_).available;
    std::ofstream out(path_ + "/" + file, std::ios::binary);
    const std::string chunk(1 << 16, '\0');
    for (std::uintmax_t written = 0; written + leave < free_bytes && out;
         written += chunk.size()) {
      out.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    }
  }

 private:
  std::string path_;
  bool mounted_ = false;
  std::string why_;
};

}  // namespace durin::testing
