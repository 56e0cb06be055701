// What the kernel says about a process a test started: /proc/PID/stat and
// /proc/PID/status, read as the test needs them (CPU used, memory held,
// whether every thread is stopped). Linux only, like the tests.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace durin::testing {

// The fields of a stat file (/proc/PID/stat or /proc/PID/task/TID/stat)
// after the command: [0] is field 3 (the state), [11] and [12] are fields
// 14 and 15 (utime, stime). Empty when the file is gone. The command may
// hold spaces and parentheses, so it ends at the last ')'.
inline std::vector<std::string> proc_stat_fields(
    const std::filesystem::path& stat_file) {
  std::ifstream stat(stat_file);
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  if (close == std::string::npos) {
    return {};
  }
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> fields;
  for (std::string field; rest >> field;) {
    fields.push_back(field);
  }
  return fields;
}

inline std::filesystem::path proc_dir(pid_t pid) {
  return std::filesystem::path("/proc") / std::to_string(pid);
}

// User plus system CPU time of a process so far; -1 ms when it is gone.
inline std::chrono::milliseconds proc_cpu_time(pid_t pid) {
  const auto fields = proc_stat_fields(proc_dir(pid) / "stat");
  if (fields.size() < 13) {
    return std::chrono::milliseconds(-1);
  }
  const long long ticks = std::strtoll(fields[11].c_str(), nullptr, 10) +
                          std::strtoll(fields[12].c_str(), nullptr, 10);
  return std::chrono::milliseconds(ticks * 1000 / ::sysconf(_SC_CLK_TCK));
}

// True once every thread of the process is stopped (state T or t), as
// after SIGSTOP: the signal is delivered after kill() returns.
inline bool proc_all_threads_stopped(pid_t pid) {
  std::error_code failed;
  for (const auto& task :
       std::filesystem::directory_iterator(proc_dir(pid) / "task", failed)) {
    const auto fields = proc_stat_fields(task.path() / "stat");
    if (!fields.empty() && fields[0] != "T" && fields[0] != "t") {
      return false;
    }
  }
  return !failed;
}

// A field of /proc/PID/status in kB ("VmRSS", "VmHWM"); -1 when absent.
inline long proc_status_kb(pid_t pid, const std::string& field) {
  std::ifstream status(proc_dir(pid) / "status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::strtol(line.c_str() + field.size() + 1, nullptr, 10);
    }
  }
  return -1;
}

}  // namespace durin::testing
