// Process-level crash tests: durin keeps its promises when the whole process
// dies with SIGKILL at any moment.
//
// Goal: prove, against a real process and real fsyncs, that
//   - every admitted run ends completed with the output its input determines,
//     and no run is lost or started twice, whatever the kill timing;
//   - a run's history holds exactly one outcome per step call, one per
//     attempt id, and one firing per timer;
//   - a step whose outcome was recorded never runs again (replay returns the
//     record), and every attempt that ran belongs to a recorded step call;
//   - a durable sleep survives kills while it is armed, including when its
//     due time passes while no process is running.
//
// Method: crash_child.cpp is a small program that opens a runtime, starts the
// runs it is told about (never one an earlier incarnation admitted), and
// waits for them. Its step bodies append "step_id attempt_id ..." to an
// effects file and fsync it before returning. The test runs the child over
// and over, SIGKILLing it after a random delay (from spawn or from "runtime
// open") or letting it kill itself at the K-th group commit
// (DURIN_KILL_AT=committer.before_write:K / committer.after_write:K, see
// persistence/test_points.hpp), then lets a last incarnation finish. It then
// reads the store directly (persistence::store) and checks the rules above
// against the stored runs, their histories and the effects file.
//
// Knobs: DURIN_CRASH_SEED (printed on every run), DURIN_CRASH_KILLS (kills in
// the main test, default 200). A failing test keeps its /tmp directory and
// prints its path and the tail of the children's stderr.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "durin/json.hpp"
#include "durin/run.hpp"
#include "persistence/records.hpp"
#include "persistence/store.hpp"
#include "tests/support/shard_dirs.hpp"

extern char** environ;

namespace {

using namespace std::chrono_literals;
using durin::json;
using durin::persistence::event_kind;
using durin::persistence::event_record;
using durin::persistence::run_record;
namespace fs = std::filesystem;

// ---- what the child does (kept in step with crash_child.cpp)

constexpr std::string_view pipeline_flow = "crash.pipeline";
constexpr std::string_view fanout_flow = "crash.fanout";
constexpr std::string_view long_sleep_flow = "crash.long-sleep";

// Step names whose first attempt fails on purpose.
const std::set<std::string, std::less<>> flaky_steps = {"flaky",
                                                        "crash.square"};

std::string expected_flow(int index, bool long_sleep) {
  if (long_sleep) {
    return std::string(long_sleep_flow);
  }
  return std::string(index % 2 == 0 ? pipeline_flow : fanout_flow);
}

// The output each flow computes from its input's index.
json expected_output(const std::string& flow, std::int64_t index) {
  std::int64_t sum = 0;
  if (flow == pipeline_flow) {
    // stages 10i+0 .. 10i+3, then flaky 7i
    sum = 47 * index + 6;
  } else if (flow == fanout_flow) {
    // pair(i) = 2i+3, pair(i+100) = 2i+203, square(i) = i*i
    sum = index * index + 4 * index + 206;
  } else {
    // before-sleep i, after-sleep i+1
    sum = 2 * index + 1;
  }
  return json{{"flow", flow}, {"index", index}, {"sum", sum}};
}

// Step calls each flow makes.
std::size_t expected_step_calls(const std::string& flow) {
  if (flow == pipeline_flow) {
    return 6;  // four stages, flaky, echo
  }
  if (flow == fanout_flow) {
    return 5;  // left, right, left, right, crash.square
  }
  return 2;  // before-sleep, after-sleep
}

constexpr std::size_t expected_sleep_calls = 1;

// ---- knobs

std::uint64_t seed_from_env() {
  if (const char* text = std::getenv("DURIN_CRASH_SEED")) {
    return std::stoull(text);
  }
  return std::random_device{}() ^
         (static_cast<std::uint64_t>(std::random_device{}()) << 32);
}

int kills_from_env() {
  if (const char* text = std::getenv("DURIN_CRASH_KILLS")) {
    return std::max(1, std::stoi(text));
  }
  return 200;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) {
    return "exit " + std::to_string(WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status)) {
    return std::string("signal ") + ::strsignal(WTERMSIG(status));
  }
  return "status " + std::to_string(status);
}

bool killed_by_sigkill(int status) {
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

// ---- the child process

// One incarnation of durin_crash_child. stdout is a pipe the test reads line
// by line; stderr is appended to a log file. The destructor SIGKILLs and reaps
// a child still running, so no test path leaks a process; PR_SET_PDEATHSIG
// covers the test binary itself dying.
class child_process {
 public:
  child_process(const std::vector<std::string>& args,
                const std::string& kill_at, const std::string& log_path) {
    std::vector<std::string> env_strings;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      if (std::strncmp(*entry, "DURIN_KILL_AT=", 14) != 0) {
        env_strings.emplace_back(*entry);
      }
    }
    if (!kill_at.empty()) {
      env_strings.push_back("DURIN_KILL_AT=" + kill_at);
    }
    // Everything exec needs is built before fork: after it, the child may
    // only make async-signal-safe calls.
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(DURIN_CRASH_CHILD));
    for (const auto& arg : args) {
      argv.push_back(const_cast<char*>(arg.c_str()));
    }
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& entry : env_strings) {
      envp.push_back(entry.data());
    }
    envp.push_back(nullptr);

    int out_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
      throw std::runtime_error("pipe2 failed");
    }
    const int log_fd = ::open(log_path.c_str(),
                              O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      throw std::runtime_error("cannot open " + log_path);
    }
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) {
        ::_exit(127);  // the test died between fork and prctl
      }
      ::dup2(out_pipe[1], STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
      ::execve(DURIN_CRASH_CHILD, argv.data(), envp.data());
      static constexpr char failed[] = "crash_test: cannot exec the child\n";
      (void)!::write(STDERR_FILENO, failed, sizeof failed - 1);
      ::_exit(127);
    }
    ::close(out_pipe[1]);
    ::close(log_fd);
    if (pid_ < 0) {
      ::close(out_pipe[0]);
      throw std::runtime_error("fork failed");
    }
    stdout_fd_ = out_pipe[0];
  }

  ~child_process() {
    if (pid_ > 0) {
      (void)kill_and_reap();
    }
    if (stdout_fd_ >= 0) {
      ::close(stdout_fd_);
    }
  }

  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  // True once the child printed `line`; false when it closed stdout (ended)
  // or `timeout` passed first.
  bool wait_for_line(std::string_view line, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!has_printed(line)) {
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= 0ms || stdout_closed_) {
        return false;
      }
      read_output(std::chrono::duration_cast<std::chrono::milliseconds>(left));
    }
    return true;
  }

  bool has_printed(std::string_view line) const {
    return std::find(lines_.begin(), lines_.end(), line) != lines_.end();
  }

  const std::vector<std::string>& lines() const { return lines_; }

  // The wait status, once the child has ended within `timeout`.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (status_) {
        return status_;
      }
      int status = 0;
      const pid_t done = ::waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        status_ = status;
        drain_output();
        pid_ = -1;
        return status_;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return std::nullopt;
      }
      read_output(5ms);
    }
  }

  // SIGKILLs the child (a no-op when it already ended) and reaps it.
  int kill_and_reap() {
    if (status_) {
      return *status_;
    }
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    status_ = status;
    drain_output();
    pid_ = -1;
    return status;
  }

 private:
  // Reads what the pipe holds, waiting at most `timeout` for the first byte.
  void read_output(std::chrono::milliseconds timeout) {
    if (stdout_closed_) {
      std::this_thread::sleep_for(std::min(timeout, 5ms));
      return;
    }
    pollfd poll_fd{stdout_fd_, POLLIN, 0};
    if (::poll(&poll_fd, 1, static_cast<int>(timeout.count())) <= 0) {
      return;
    }
    char buffer[4096];
    const ssize_t got = ::read(stdout_fd_, buffer, sizeof buffer);
    if (got <= 0) {
      stdout_closed_ = got == 0 || errno != EINTR;
      return;
    }
    pending_.append(buffer, static_cast<std::size_t>(got));
    for (auto end = pending_.find('\n'); end != std::string::npos;
         end = pending_.find('\n')) {
      lines_.push_back(pending_.substr(0, end));
      pending_.erase(0, end + 1);
    }
  }

  void drain_output() {
    while (!stdout_closed_) {
      read_output(0ms);
      pollfd poll_fd{stdout_fd_, POLLIN, 0};
      if (::poll(&poll_fd, 1, 0) <= 0) {
        break;
      }
    }
  }

  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  bool stdout_closed_ = false;
  std::string pending_;
  std::vector<std::string> lines_;
  std::optional<int> status_;
};

// ---- the files a scenario works in

struct scenario_paths {
  std::string data_dir;
  std::string effects;
  std::string started;
  std::string log;

  explicit scenario_paths(const fs::path& root)
      : data_dir((root / "data").string()),
        effects((root / "effects.log").string()),
        started((root / "started.log").string()),
        log((root / "child.log").string()) {
    fs::create_directories(root);
  }
};

std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

std::string log_tail(const std::string& path, std::size_t bytes = 4000) {
  const std::string text = read_whole(path);
  return text.size() <= bytes ? text : "..." + text.substr(text.size() - bytes);
}

void append_log(const std::string& path, const std::string& line) {
  std::ofstream(path, std::ios::app) << line << '\n';
}

// Lines the child wrote whole (a torn last line was cut by a kill).
std::vector<std::string> whole_lines(const std::string& path) {
  const std::string text = read_whole(path);
  std::vector<std::string> lines;
  std::size_t begin = 0;
  for (auto end = text.find('\n'); end != std::string::npos;
       end = text.find('\n', begin)) {
    lines.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return lines;
}

// One line of the effects file: an attempt of a step ran its body.
struct effect {
  std::string step_id;
  std::string attempt_id;
  std::string step_name;
  std::uint32_t attempt = 0;
  std::string outcome;  // "ok" or "fail"; empty when torn
  // The child was killed while writing the line (a kill can cut even a
  // regular-file write short at a page boundary); step id and attempt id are
  // complete, the rest may not be.
  bool torn = false;
};

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> fields;
  std::size_t begin = 0;
  for (auto tab = line.find('\t'); tab != std::string::npos;
       tab = line.find('\t', begin)) {
    fields.push_back(line.substr(begin, tab - begin));
    begin = tab + 1;
  }
  fields.push_back(line.substr(begin));
  return fields;
}

bool is_whole_effect(const std::vector<std::string>& fields) {
  return fields.size() == 5 && !fields[3].empty() &&
         fields[3].find_first_not_of("0123456789") == std::string::npos &&
         (fields[4] == "ok" || fields[4] == "fail");
}

// Whole lines, and torn lines that still name their step and attempt (a tab
// follows both). A torn fragment too short for that names nothing: skipped.
std::vector<effect> read_effects(const std::string& path) {
  std::vector<effect> effects;
  for (const auto& line : whole_lines(path)) {
    const auto fields = split_tabs(line);
    if (fields.size() > 5) {
      ADD_FAILURE() << "effects file: malformed line '" << line << "'";
      continue;
    }
    if (is_whole_effect(fields)) {
      effects.push_back(effect{
          fields[0], fields[1], fields[2],
          static_cast<std::uint32_t>(std::stoul(fields[3])), fields[4], false});
    } else if (fields.size() >= 3) {
      effects.push_back(effect{fields[0], fields[1], fields[2], 0, "", true});
    }
  }
  return effects;
}

// index -> run id, for every start the child saw acknowledged. Lines
// without the end marker were torn by a kill while being written.
std::map<int, std::string> read_started(const std::string& path) {
  std::map<int, std::string> started;
  for (const auto& line : whole_lines(path)) {
    std::istringstream in(line);
    int index = -1;
    std::string run_id;
    std::string end;
    if (in >> index >> run_id >> end && end == "end") {
      started[index] = run_id;
    }
  }
  return started;
}

// ---- the store, read after the last child ended

struct stored_run {
  run_record record;
  json input;
  json output;
  std::vector<event_record> history;
};

json decode_payload(const std::string& bytes) {
  if (bytes.empty()) {
    return json();
  }
  return json::from_msgpack(bytes);
}

void load_shard_runs(const std::string& data_dir,
                     std::vector<stored_run>& runs);

// Every run in the store, with its history. Opens the store only while no
// child runs (RocksDB allows one process at a time) and closes it again.
std::vector<stored_run> load_runs(const std::string& data_dir) {
  std::vector<stored_run> runs;
  for (const auto& dir : durin::testing::shard_dirs(data_dir)) {
    load_shard_runs(dir, runs);
  }
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) {
    return a.record.id > b.record.id;  // newest first, as one store lists
  });
  return runs;
}

void load_shard_runs(const std::string& data_dir,
                     std::vector<stored_run>& runs) {
  auto opened = durin::persistence::store::open(data_dir);
  if (!opened) {
    ADD_FAILURE() << "cannot open the store: " << opened.error().to_string();
    return;
  }
  const auto& db = **opened;
  std::string before_id;
  do {
    auto scan = db.scan_runs(before_id, std::nullopt, std::nullopt, 1000);
    if (!scan) {
      ADD_FAILURE() << "scan_runs: " << scan.error().to_string();
      return;
    }
    for (auto& record : scan->runs) {
      stored_run run;
      run.input = decode_payload(record.input);
      run.output = decode_payload(record.output);
      auto history = db.load_history(record.id);
      if (!history) {
        ADD_FAILURE() << "history of " << record.id << ": "
                      << history.error().to_string();
      } else {
        run.history = std::move(*history);
      }
      run.record = std::move(record);
      runs.push_back(std::move(run));
    }
    before_id = scan->next_before_id;
  } while (!before_id.empty());
}

std::size_t count_kind(const stored_run& run, event_kind kind) {
  return static_cast<std::size_t>(
      std::count_if(run.history.begin(), run.history.end(),
                    [kind](const event_record& e) { return e.kind == kind; }));
}

bool is_step_event(event_kind kind) {
  return kind == event_kind::step_completed ||
         kind == event_kind::step_attempt_failed ||
         kind == event_kind::step_failed;
}

bool is_step_outcome(event_kind kind) {
  return kind == event_kind::step_completed || kind == event_kind::step_failed;
}

// ---- the rules

// Rule: runs 0..runs-1 each exist exactly once, with the flow and input the
// child gives that index, and every start the child saw acknowledged is in
// the store under the id it was acknowledged with.
void expect_each_index_admitted_once(const std::vector<stored_run>& runs,
                                     int run_count, bool long_sleep,
                                     const std::string& started_path) {
  std::map<int, std::vector<std::string>> by_index;
  for (const auto& run : runs) {
    const int index = run.input.value("index", -1);
    by_index[index].push_back(run.record.id);
    EXPECT_EQ(run.record.flow, expected_flow(index, long_sleep))
        << "run " << run.record.id << " has the wrong flow";
  }
  for (int index = 0; index < run_count; ++index) {
    EXPECT_EQ(by_index[index].size(), 1u)
        << "index " << index << " should have exactly one run";
  }
  EXPECT_EQ(by_index.size(), static_cast<std::size_t>(run_count))
      << "the store holds runs for indexes the child never asked for";
  for (const auto& [index, run_id] : read_started(started_path)) {
    const auto& ids = by_index[index];
    EXPECT_TRUE(std::find(ids.begin(), ids.end(), run_id) != ids.end())
        << "acknowledged start of index " << index << " (" << run_id
        << ") is lost";
  }
}

// Rule: every run completed, with the output its input determines.
void expect_runs_completed_with_outputs(const std::vector<stored_run>& runs) {
  for (const auto& run : runs) {
    const auto& record = run.record;
    EXPECT_EQ(record.status, durin::run_status::completed)
        << "run " << record.id << " (" << run.input.dump() << ") is "
        << durin::to_string(record.status) << ": " << record.error_code << " "
        << record.error_message;
    if (record.status != durin::run_status::completed) {
      continue;
    }
    EXPECT_EQ(run.output,
              expected_output(record.flow, run.input.value("index", -1)))
        << "run " << record.id << " has a wrong output";
  }
}

// Rule: the history holds exactly one outcome per step call, one event per
// attempt id, one run start and one run end (last); each flaky step
// succeeded only on a later attempt than the one that fails on purpose.
void expect_one_outcome_per_step(const stored_run& run) {
  const auto& id = run.record.id;
  std::map<std::uint64_t, std::size_t> outcomes;  // call -> outcome events
  std::set<std::string> attempt_ids;
  for (const auto& event : run.history) {
    if (!is_step_event(event.kind)) {
      continue;
    }
    outcomes[event.call] += is_step_outcome(event.kind) ? 1 : 0;
    EXPECT_TRUE(attempt_ids.insert(event.attempt_id).second)
        << "run " << id << " records attempt " << event.attempt_id << " twice";
    if (event.kind == event_kind::step_completed &&
        flaky_steps.count(event.name) != 0) {
      EXPECT_GE(event.attempt, 2u) << "run " << id << " step " << event.name
                                   << " completed on an attempt that must fail";
    }
  }
  EXPECT_EQ(outcomes.size(), expected_step_calls(run.record.flow))
      << "run " << id << " has the wrong number of step calls";
  for (const auto& [call, count] : outcomes) {
    EXPECT_EQ(count, 1u) << "run " << id << " call " << call << " has " << count
                         << " outcomes";
  }
  EXPECT_EQ(count_kind(run, event_kind::run_started), 1u) << "run " << id;
  EXPECT_EQ(count_kind(run, event_kind::run_completed), 1u) << "run " << id;
  if (!run.history.empty() &&
      run.record.status == durin::run_status::completed) {
    EXPECT_EQ(run.history.back().kind, event_kind::run_completed)
        << "run " << id << " records events after its end";
  }
}

// Rule: each recorded value (now, random, side effect) is recorded once.
void expect_one_value_per_call(const stored_run& run) {
  std::map<std::uint64_t, std::size_t> values;
  for (const auto& event : run.history) {
    if (event.kind == event_kind::value_recorded) {
      ++values[event.call];
    }
  }
  for (const auto& [call, count] : values) {
    EXPECT_EQ(count, 1u) << "run " << run.record.id << " records value call "
                         << call << " " << count << " times";
  }
}

// Rule: every sleep is armed once and fires once, not before it is due; the
// run ends after the sleep's due time.
void expect_sleeps_fired_once(const stored_run& run) {
  std::map<std::uint64_t, const event_record*> armed;
  std::map<std::uint64_t, std::vector<const event_record*>> fired;
  for (const auto& event : run.history) {
    if (event.kind == event_kind::timer_armed) {
      EXPECT_EQ(armed.count(event.call), 0u)
          << "run " << run.record.id << " arms call " << event.call << " twice";
      armed[event.call] = &event;
    } else if (event.kind == event_kind::timer_fired) {
      fired[event.call].push_back(&event);
    }
  }
  EXPECT_EQ(armed.size(), expected_sleep_calls)
      << "run " << run.record.id << " has the wrong number of sleeps";
  for (const auto& [call, arm] : armed) {
    const auto& firings = fired[call];
    ASSERT_EQ(firings.size(), 1u)
        << "run " << run.record.id << " timer call " << call << " fired "
        << firings.size() << " times";
    EXPECT_GE(firings.front()->at_ms, arm->due_ms)
        << "run " << run.record.id << " timer call " << call
        << " fired before it was due";
    EXPECT_GE(run.record.completed_at_ms, arm->due_ms)
        << "run " << run.record.id << " ended before its sleep was due";
  }
  for (const auto& [call, firings] : fired) {
    EXPECT_EQ(armed.count(call), 1u)
        << "run " << run.record.id << " fires unarmed timer call " << call;
  }
}

// Rule: a step whose outcome is recorded never runs again. For every
// recorded outcome, the effects line of its attempt must be the last line of
// its step id; and every step id that ran belongs to exactly one recorded
// step call (call numbering is the same in every replay).
void expect_recorded_steps_never_ran_again(const std::vector<stored_run>& runs,
                                           const std::string& effects_path) {
  const auto effects = read_effects(effects_path);
  std::cout << "[ crash    ] effects file: " << effects.size()
            << " attempts ran, "
            << std::count_if(effects.begin(), effects.end(),
                             [](const effect& e) { return e.torn; })
            << " of them killed mid-line" << std::endl;
  std::map<std::string, const effect*> by_attempt;
  std::map<std::string, std::string> last_attempt;  // step_id -> attempt_id
  for (const auto& line : effects) {
    EXPECT_TRUE(by_attempt.emplace(line.attempt_id, &line).second)
        << "attempt " << line.attempt_id << " ran its body twice";
    last_attempt[line.step_id] = line.attempt_id;
  }
  std::map<std::string, std::string> step_owner;  // step_id -> "run/call"
  int reported = 0;
  for (const auto& run : runs) {
    for (const auto& event : run.history) {
      if (!is_step_event(event.kind)) {
        continue;
      }
      const auto found = by_attempt.find(event.attempt_id);
      if (found == by_attempt.end()) {
        ADD_FAILURE() << "run " << run.record.id << " records attempt "
                      << event.attempt_id << " of " << event.name
                      << " whose body never ran";
        continue;
      }
      const effect& ran = *found->second;
      const std::string owner =
          run.record.id + " call " + std::to_string(event.call);
      const auto [owned, fresh] = step_owner.emplace(ran.step_id, owner);
      EXPECT_TRUE(fresh || owned->second == owner)
          << "step id " << ran.step_id << " belongs to " << owned->second
          << " and to " << owner;
      EXPECT_EQ(ran.step_id.rfind(run.record.id + "/", 0), 0u)
          << "step id " << ran.step_id << " does not name run "
          << run.record.id;
      if (is_step_outcome(event.kind) &&
          last_attempt[ran.step_id] != event.attempt_id && reported++ < 20) {
        ADD_FAILURE() << "step " << ran.step_id << " (" << event.name
                      << ") ran again after its outcome was recorded: "
                      << "recorded attempt " << event.attempt_id
                      << ", later attempt " << last_attempt[ran.step_id];
      }
    }
  }
  for (const auto& [step_id, attempt_id] : last_attempt) {
    EXPECT_EQ(step_owner.count(step_id), 1u)
        << "step id " << step_id << " ran (last attempt " << attempt_id
        << ") but no run records an outcome for it";
  }
}

void expect_all_rules(const scenario_paths& paths, int run_count,
                      bool long_sleep) {
  const auto runs = load_runs(paths.data_dir);
  SCOPED_TRACE("verifying " + std::to_string(runs.size()) + " stored runs");
  expect_each_index_admitted_once(runs, run_count, long_sleep, paths.started);
  expect_runs_completed_with_outputs(runs);
  for (const auto& run : runs) {
    expect_one_outcome_per_step(run);
    expect_one_value_per_call(run);
    expect_sleeps_fired_once(run);
  }
  expect_recorded_steps_never_ran_again(runs, paths.effects);
}

// ---- the fixture

class CrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/durin-crash-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr) << std::strerror(errno);
    root_ = pattern;
    seed_ = seed_from_env();
    rng_.seed(seed_);
    std::cout << "[ crash    ] seed " << seed_
              << " (set DURIN_CRASH_SEED to repeat), dir " << root_.string()
              << std::endl;
    RecordProperty("seed", std::to_string(seed_));
  }

  void TearDown() override {
    child_.reset();  // kills and reaps a child a failed assertion left behind
    if (HasFailure()) {
      std::cout << "[ crash    ] kept " << root_.string() << " (seed " << seed_
                << ")" << std::endl;
      return;
    }
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }

  struct child_args {
    int runs = 0;
    std::string kill_at;  // DURIN_KILL_AT, empty for none
    std::int64_t long_sleep_ms = 0;
  };

  child_process& spawn(const scenario_paths& paths, const child_args& args) {
    child_.reset();
    std::vector<std::string> argv = {"--data-dir", paths.data_dir,
                                     "--effects",  paths.effects,
                                     "--started",  paths.started,
                                     "--runs",     std::to_string(args.runs),
                                     "--seed",     std::to_string(rng_())};
    if (args.long_sleep_ms > 0) {
      argv.push_back("--long-sleep-ms");
      argv.push_back(std::to_string(args.long_sleep_ms));
    }
    append_log(paths.log, "=== child runs=" + std::to_string(args.runs) +
                              " kill_at=" + args.kill_at);
    child_ = std::make_unique<child_process>(argv, args.kill_at, paths.log);
    return *child_;
  }

  // Fails the test unless `status` is a SIGKILL or a clean finish.
  void expect_killed_or_done(int status, const scenario_paths& paths) {
    if (killed_by_sigkill(status)) {
      return;
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
                child_->has_printed("ALL-DONE"))
        << "child ended with " << describe_status(status) << " (seed " << seed_
        << "); its stderr:\n"
        << log_tail(paths.log);
  }

  // Lets a child run until ALL-DONE and a clean exit.
  void run_to_completion(const scenario_paths& paths, const child_args& args,
                         std::chrono::milliseconds timeout) {
    auto& child = spawn(paths, args);
    if (!child.wait_for_line("ALL-DONE", timeout)) {
      // Either it ended without finishing (stdout closed) or it is stuck.
      const auto status = child.wait_exit(100ms);
      ADD_FAILURE() << "the last child "
                    << (status ? "ended with " + describe_status(*status) +
                                     " before ALL-DONE"
                               : "did not finish within " +
                                     std::to_string(timeout.count()) + " ms")
                    << " (seed " << seed_ << "); its stderr:\n"
                    << log_tail(paths.log);
      child_.reset();
      return;
    }
    const auto status = child.wait_exit(30s);
    EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
        << "the last child printed ALL-DONE but then "
        << (status ? describe_status(*status) : "hung in shutdown")
        << "; its stderr:\n"
        << log_tail(paths.log);
    child_.reset();
  }

  int random_between(int low, int high) {
    return std::uniform_int_distribution<int>(low, high)(rng_);
  }

  fs::path root_;
  std::uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::unique_ptr<child_process> child_;
};

// How one incarnation of the child is ended.
enum class kill_plan { after_spawn, after_open, before_write, after_write };

const char* to_string(kill_plan plan) {
  switch (plan) {
    case kill_plan::after_spawn:
      return "SIGKILL after spawn";
    case kill_plan::after_open:
      return "SIGKILL after OPENED";
    case kill_plan::before_write:
      return "kill point committer.before_write";
    case kill_plan::after_write:
      return "kill point committer.after_write";
  }
  return "?";
}

struct kill_stats {
  int kills = 0;          // incarnations that died by SIGKILL
  int self_kills = 0;     // ... of which at a named kill point
  int finished = 0;       // incarnations that reached ALL-DONE first
  int points_missed = 0;  // kill point not reached within the grace period
};

// ---- the tests

TEST_F(CrashTest, RunsSurviveManyKills) {
  const int kills_wanted = kills_from_env();
  const scenario_paths paths(root_ / "many-kills");
  // Every incarnation is asked for one run more than the last, so
  // admissions keep happening throughout and every incarnation has fresh
  // work in flight when it dies (a run takes a few hundred ms).
  const auto run_count_of = [](int generation) { return 20 + generation; };
  kill_stats stats;
  int generation = 0;
  while (stats.kills < kills_wanted) {
    ++generation;
    const int choice = random_between(0, 99);
    const auto plan = choice < 35   ? kill_plan::after_spawn
                      : choice < 70 ? kill_plan::after_open
                      : choice < 85 ? kill_plan::before_write
                                    : kill_plan::after_write;
    child_args args{run_count_of(generation), "", 0};
    if (plan == kill_plan::before_write || plan == kill_plan::after_write) {
      args.kill_at = std::string(plan == kill_plan::before_write
                                     ? "committer.before_write:"
                                     : "committer.after_write:") +
                     std::to_string(random_between(1, 20));
    }
    auto& child = spawn(paths, args);
    std::optional<int> status;
    bool parent_killed = false;
    if (args.kill_at.empty()) {
      if (plan == kill_plan::after_open) {
        (void)child.wait_for_line("OPENED", 30s);
      }
      std::this_thread::sleep_for(
          std::chrono::milliseconds(random_between(1, 150)));
      parent_killed = true;
      status = child.kill_and_reap();
    } else {
      // The child kills itself at the K-th group commit, or finishes first.
      status = child.wait_exit(5s);
      if (!status) {
        ++stats.points_missed;
        parent_killed = true;
        status = child.kill_and_reap();
      }
    }
    ASSERT_NO_FATAL_FAILURE(expect_killed_or_done(*status, paths));
    ASSERT_FALSE(HasFailure()) << "generation " << generation << ": "
                               << to_string(plan) << " " << args.kill_at;
    if (killed_by_sigkill(*status)) {
      ++stats.kills;
      stats.self_kills += parent_killed ? 0 : 1;
    } else {
      ++stats.finished;
    }
  }
  const int run_count = run_count_of(generation);
  std::cout << "[ crash    ] " << generation << " incarnations: " << stats.kills
            << " killed (" << stats.self_kills << " at named kill points, "
            << stats.points_missed << " kill points not reached), "
            << stats.finished << " finished; now finishing " << run_count
            << " runs" << std::endl;
  run_to_completion(paths, {run_count, "", 0}, 120s);
  expect_all_rules(paths, run_count, false);
}

// Waits (30 s at most) until the effects file shows `run_count` runs past
// their first step ("before-sleep"); the child must not end meanwhile.
void wait_until_past_first_step(child_process& child,
                                const scenario_paths& paths,
                                std::size_t run_count) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  for (;;) {
    std::set<std::string> before_sleep;  // step ids: one per run
    for (const auto& line : read_effects(paths.effects)) {
      if (line.step_name == "before-sleep" && line.outcome == "ok") {
        before_sleep.insert(line.step_id);
      }
    }
    if (before_sleep.size() == run_count) {
      return;
    }
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "runs never reached their sleep; child stderr:\n"
        << log_tail(paths.log);
    const auto ended = child.wait_exit(20ms);
    ASSERT_FALSE(ended.has_value())
        << "child ended with " << describe_status(*ended)
        << " before both runs slept; its stderr:\n"
        << log_tail(paths.log);
  }
}

// Kills the child while both runs' sleeps are armed, stays down past the
// first run's due time, kills a second incarnation during the second run's
// sleep, then checks both sleeps fired once, not early, and the runs ended.
TEST_F(CrashTest, SleepCompletesAfterKillDuringSleep) {
  constexpr int run_count = 2;
  constexpr std::int64_t base_sleep_ms = 2000;  // run 0: 2 s, run 1: 8 s
  const scenario_paths paths(root_ / "long-sleep");
  const child_args args{run_count, "", base_sleep_ms};

  // The effects file shows when both runs are past their first step; their
  // timers are armed right after that step's outcome is durable.
  std::vector<std::int64_t> due_ms;
  for (int tries = 0; due_ms.empty(); ++tries) {
    ASSERT_LT(tries, 3) << "never caught both runs inside their sleep";
    auto& child = spawn(paths, args);
    ASSERT_NO_FATAL_FAILURE(
        wait_until_past_first_step(child, paths, run_count));
    std::this_thread::sleep_for(300ms);
    ASSERT_NO_FATAL_FAILURE(
        expect_killed_or_done(child.kill_and_reap(), paths));
    for (const auto& run : load_runs(paths.data_dir)) {
      if (count_kind(run, event_kind::timer_armed) != 1 ||
          count_kind(run, event_kind::timer_fired) != 0) {
        due_ms.clear();
        break;
      }
      for (const auto& event : run.history) {
        if (event.kind == event_kind::timer_armed) {
          due_ms.push_back(event.due_ms);
        }
      }
    }
    if (due_ms.size() != run_count) {
      due_ms.clear();
    }
  }
  std::sort(due_ms.begin(), due_ms.end());

  // Stay down until the first sleep is overdue: recovery must fire it.
  const auto now_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(
      std::max<std::int64_t>(0, due_ms[0] - now_ms()) + 200));

  // A second kill while the later sleep is still armed.
  ASSERT_LT(now_ms() + 1000, due_ms[1]) << "too slow to kill inside the sleep";
  auto& second = spawn(paths, args);
  ASSERT_TRUE(second.wait_for_line("OPENED", 30s)) << log_tail(paths.log);
  std::this_thread::sleep_for(300ms);
  ASSERT_NO_FATAL_FAILURE(expect_killed_or_done(second.kill_and_reap(), paths));

  run_to_completion(paths, args, 60s);
  expect_all_rules(paths, run_count, true);
}

// DURIN_KILL_AT really stops the child at a group commit (otherwise the main
// test's kill-point incarnations would silently be timer kills), and an
// admission cut at its commit is neither lost nor doubled afterwards.
TEST_F(CrashTest, NamedKillPointsStopTheChildAtAGroupCommit) {
  constexpr int run_count = 4;
  for (const std::string point :
       {"committer.before_write", "committer.after_write"}) {
    SCOPED_TRACE(point);
    const scenario_paths paths(root_ / point);
    auto& child = spawn(paths, {run_count, point + ":1", 0});
    const auto status = child.wait_exit(30s);
    ASSERT_TRUE(status.has_value())
        << "kill point " << point << " never fired; stderr:\n"
        << log_tail(paths.log);
    EXPECT_TRUE(killed_by_sigkill(*status))
        << "child ended with " << describe_status(*status) << "; stderr:\n"
        << log_tail(paths.log);
    run_to_completion(paths, {run_count, "", 0}, 60s);
    expect_all_rules(paths, run_count, false);
  }
}

}  // namespace
