// A child process of a test: the `durin` executable (or any program) run
// with arguments and extra environment, killed with the test process
// (PR_SET_PDEATHSIG) and reaped by whoever ends it. Its stdout goes to a
// pipe the test reads, or to /dev/null.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace durin::testing {

class child_process {
 public:
  // `env` holds extra "NAME=value" entries; `descriptors_max` > 0 sets the
  // child's RLIMIT_NOFILE (soft and hard), like `prlimit --nofile`. A
  // non-empty `stderr_path` gets the child's stderr appended (else it is
  // the test's).
  child_process(const char* program, std::vector<std::string> args,
                std::vector<std::string> env, bool capture_stdout,
                rlim_t descriptors_max = 0,
                const std::string& stderr_path = "") {
    int out[2] = {-1, -1};
    if (capture_stdout && ::pipe(out) != 0) {
      throw std::runtime_error("pipe");
    }
    // Built before fork: the child only calls async-signal-safe functions.
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(program));
    for (auto& arg : args) {
      argv.push_back(arg.data());
    }
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) {
      throw std::runtime_error("fork");
    }
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (capture_stdout) {
        ::dup2(out[1], 1);
        ::close(out[0]);
        ::close(out[1]);
      } else {
        int null = ::open("/dev/null", O_WRONLY);
        ::dup2(null, 1);
      }
      if (!stderr_path.empty()) {
        int log =
            ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        ::dup2(log, 2);
      }
      for (auto& entry : env) {
        ::putenv(entry.data());
      }
      if (descriptors_max > 0) {
        rlimit limit{descriptors_max, descriptors_max};
        ::setrlimit(RLIMIT_NOFILE, &limit);
      }
      ::execv(program, argv.data());
      ::_exit(127);
    }
    if (capture_stdout) {
      ::close(out[1]);
      stdout_fd_ = out[0];
    }
  }

  ~child_process() {
    kill9();
    if (stdout_fd_ >= 0) {
      ::close(stdout_fd_);
    }
  }

  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  int stdout_fd() const { return stdout_fd_; }
  pid_t pid() const { return pid_; }  // -1 once reaped

  // True while the process has not ended (it is not reaped here).
  bool running() const {
    if (pid_ <= 0) {
      return false;
    }
    siginfo_t info{};
    return ::waitid(P_PID, static_cast<id_t>(pid_), &info,
                    WEXITED | WNOHANG | WNOWAIT) == 0 &&
           info.si_pid == 0;
  }

  void kill9() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      pid_ = -1;
    }
  }

  // Reads the captured stdout until a whole line holding `marker` has
  // arrived, the process closes its stdout, or `limit` passes; all that was
  // read. A process is ready for signals once it printed the line that
  // follows its handlers' installation: a SIGTERM before that kills it.
  std::string read_until_line(std::string_view marker,
                              std::chrono::milliseconds limit) {
    std::string output;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      auto at = output.find(marker);
      if (at != std::string::npos &&
          output.find('\n', at) != std::string::npos) {
        return output;
      }
      if (stdout_fd_ < 0 || std::chrono::steady_clock::now() >= deadline) {
        return output;
      }
      pollfd poll_fd{stdout_fd_, POLLIN, 0};
      if (::poll(&poll_fd, 1, 100) <= 0) {
        continue;
      }
      char chunk[512];
      auto got = ::read(stdout_fd_, chunk, sizeof chunk);
      if (got <= 0) {
        return output;
      }
      output.append(chunk, static_cast<std::size_t>(got));
    }
  }

  // SIGTERM, then the exit code (-1 when it did not exit normally within
  // `limit`, after which it is killed).
  int terminate(std::chrono::milliseconds limit = std::chrono::seconds(30)) {
    // kill(-1, ...) would signal every process of the user.
    if (pid_ <= 0) {
      return -1;
    }
    ::kill(pid_, SIGTERM);
    int status = 0;
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      ::usleep(20'000);
    }
    kill9();
    return -1;
  }

  // Waits for the process to end on its own (a kill point); true when it
  // died of SIGKILL.
  bool wait_killed() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  }

 private:
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
};

}  // namespace durin::testing
