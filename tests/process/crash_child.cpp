// The child program of the process-level crash tests (crash_test.cpp). It
// opens a durin runtime on --data-dir, makes sure runs 0..N-1 exist (starting
// only the ones no earlier incarnation admitted), waits until every run has
// ended, prints ALL-DONE and exits 0. The parent SIGKILLs it at any moment
// and starts it again, so every step of that is written to be restartable.
//
// Usage:
//   durin_crash_child --data-dir DIR --effects FILE --runs N [--seed S]
//                     [--started FILE] [--long-sleep-ms MS]
//
// Every step body appends "step_id \t attempt_id \t step name \t attempt \t
// ok|fail" to the effects file and fsyncs it *before* returning, so the parent
// can tell which attempts ran, and in which order, whatever the kill timing.
// Each flow's output is a pure function of its input; the parent recomputes
// it. The flows use every kind of durable call: steps in sequence (inline and
// registered by name), a step that fails once with a retryable error, a
// sub-flow, ctx.sleep, ctx.now, ctx.random and ctx.side_effect.
//
// Lines on stdout (the parent reads them): OPENED once the runtime is open,
// ALL-DONE once every run has ended. Exit codes: 0 done, 2 setup failed,
// 3 the runtime broke a rule the child can see (a lost or doubled start).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "durin/durin.hpp"

namespace {

using namespace std::chrono_literals;
using durin::json;

constexpr int exit_setup_failed = 2;
constexpr int exit_violation = 3;

// Flow names; crash_test.cpp recomputes outputs by the same names.
constexpr std::string_view pipeline_flow_name = "crash.pipeline";
constexpr std::string_view fanout_flow_name = "crash.fanout";
constexpr std::string_view long_sleep_flow_name = "crash.long-sleep";
constexpr int pipeline_stages = 4;

struct child_options {
  std::string data_dir;
  std::string effects_path;
  std::string started_path;  // default: effects path + ".started"
  int runs = 0;
  std::uint64_t seed = 1;
  std::int64_t long_sleep_ms = 0;  // > 0: run the long-sleep flow instead
};

// Set once in main before the runtime opens; read by step bodies.
int effects_fd = -1;
std::uint64_t child_seed = 1;

// Writes all of `text`, with one write() where possible: O_APPEND puts each
// write at the end, though a kill can still cut one short (open_for_append).
// A failure here means the test can no longer tell what ran, so the child
// dies loudly.
void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t written = ::write(fd, text.data(), text.size());
    if (written < 0 && errno == EINTR) {
      continue;
    }
    if (written <= 0) {
      std::perror("crash_child: write");
      std::abort();
    }
    text.remove_prefix(static_cast<std::size_t>(written));
  }
}

// write_all, then fsync: the line survives even a machine crash, not only the
// SIGKILL of this process.
void append_durably(int fd, std::string_view text) {
  write_all(fd, text);
  if (::fsync(fd) != 0) {
    std::perror("crash_child: fsync");
    std::abort();
  }
}

// Opens `path` for appending. A SIGKILL can cut a write short even to a
// regular file (the kernel stops copying at a page boundary once a fatal
// signal is pending), so an earlier incarnation may have left a torn last
// line; it is ended here so that this incarnation's lines stand alone. Readers
// recognise torn lines by their missing end marker.
int open_for_append(const std::string& path) {
  const int fd =
      ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::perror(("crash_child: open " + path).c_str());
    std::_Exit(exit_setup_failed);
  }
  const off_t size = ::lseek(fd, 0, SEEK_END);
  char last = '\n';
  if (size > 0 && ::pread(fd, &last, 1, size - 1) != 1) {
    std::perror(("crash_child: read " + path).c_str());
    std::_Exit(exit_setup_failed);
  }
  if (last != '\n') {
    append_durably(fd, "\n");
  }
  return fd;
}

// stdout is a pipe read by the parent: unbuffered writes, one line each.
void say(std::string_view line) {
  std::string text(line);
  text += '\n';
  write_all(STDOUT_FILENO, text);
}

std::mt19937_64& thread_rng() {
  thread_local std::mt19937_64 rng(
      child_seed ^ std::hash<std::thread::id>{}(std::this_thread::get_id()));
  return rng;
}

// Records that this attempt of the current step ran, then lingers a few ms:
// the pause widens the window between the effect and its recorded outcome,
// which is where a kill forces the step to run again.
void record_effect(std::string_view outcome) {
  const durin::step_info& meta = durin::step_metadata();
  std::string line = meta.step_id + '\t' + meta.attempt_id + '\t' +
                     meta.step_name + '\t' + std::to_string(meta.attempt) +
                     '\t' + std::string(outcome) + '\n';
  append_durably(effects_fd, line);
  std::uniform_int_distribution<int> pause_ms(1, 5);
  std::this_thread::sleep_for(
      std::chrono::milliseconds(pause_ms(thread_rng())));
}

// ---- step bodies

std::int64_t stage_step(std::int64_t index, std::int64_t stage) {
  record_effect("ok");
  return index * 10 + stage;
}

std::int64_t offset_step(std::int64_t base, std::int64_t offset) {
  record_effect("ok");
  return base + offset;
}

// The first attempt always fails with a retryable error, so every run takes
// the retry path (a recorded attempt failure and a retry timer).
std::int64_t flaky_step(std::int64_t index) {
  if (durin::step_metadata().attempt == 1) {
    record_effect("fail");
    throw durin::retryable_error("the first attempt fails on purpose", 10ms);
  }
  record_effect("ok");
  return index * 7;
}

// Registered by name; flaky like flaky_step so the registry path retries too.
std::int64_t square_step(std::int64_t value) {
  if (durin::step_metadata().attempt == 1) {
    record_effect("fail");
    throw durin::retryable_error("the first attempt fails on purpose", 10ms);
  }
  record_effect("ok");
  return value * value;
}

std::string echo_step(std::string text) {
  record_effect("ok");
  return text;
}

// Small backoff so retries do not dominate the test's run time; many attempts
// so that a runtime which counts killed attempts still lets the step succeed.
durin::retry_policy fast_retry() {
  durin::retry_policy policy;
  policy.max_attempts = 100;
  policy.initial_backoff = 10ms;
  policy.backoff_multiplier = 1.0;
  policy.max_backoff = 10ms;
  policy.jitter = 0.0;
  return policy;
}

// Not reproducible on purpose: only ctx.side_effect may make it durable.
std::string make_nonce() {
  std::random_device device;
  return std::to_string(::getpid()) + "-" + std::to_string(device()) + "-" +
         std::to_string(device());
}

// ---- flows

std::int64_t elapsed_ms(std::chrono::system_clock::time_point from,
                        std::chrono::system_clock::time_point to) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(to - from)
      .count();
}

// Sleeps `sleep_ms` and checks, with the recorded clock, that the timer did
// not fire early. A failure fails the run with flow-error, which the parent
// reports.
durin::flow<void> checked_sleep(durin::context& ctx, std::int64_t sleep_ms) {
  const auto before = ctx.now();
  co_await ctx.sleep(std::chrono::milliseconds(sleep_ms));
  const auto after = ctx.now();
  if (elapsed_ms(before, after) < sleep_ms) {
    throw std::runtime_error(
        "woke after " + std::to_string(elapsed_ms(before, after)) +
        " ms of a " + std::to_string(sleep_ms) + " ms sleep");
  }
}

// 50..300 ms, drawn through the recorded ctx.random(), so a replay sleeps the
// same duration as the original execution.
durin::flow<void> random_sleep(durin::context& ctx) {
  const auto sleep_ms = 50 + static_cast<std::int64_t>(ctx.random() % 251);
  co_await checked_sleep(ctx, sleep_ms);
}

// Four stages, a flaky step, a random sleep, then a side effect echoed by a
// step: the echo must return the very value the side effect recorded, in the
// original execution and in every replay.
durin::flow<json> pipeline_flow(durin::context& ctx, json input) {
  const auto index = input.at("index").get<std::int64_t>();
  std::int64_t sum = 0;
  for (std::int64_t stage = 0; stage < pipeline_stages; ++stage) {
    sum += co_await ctx.step("stage-" + std::to_string(stage), stage_step,
                             index, stage);
  }
  sum += co_await ctx.step(durin::step_options{"flaky", fast_retry()},
                           flaky_step, index);
  co_await random_sleep(ctx);
  const auto nonce = ctx.side_effect("nonce", make_nonce);
  const auto echoed = co_await ctx.step("echo", echo_step, nonce);
  if (echoed != nonce) {
    throw std::runtime_error("side effect replayed as '" + nonce +
                             "' but the step saw '" + echoed + "'");
  }
  co_return json{{"flow", std::string(pipeline_flow_name)},
                 {"index", index},
                 {"sum", sum}};
}

// Two steps in a sub-flow; awaited twice.
durin::flow<std::int64_t> pair_flow(durin::context& ctx, std::int64_t base) {
  const auto left = co_await ctx.step("left", offset_step, base, 1);
  const auto right = co_await ctx.step("right", offset_step, base, 2);
  co_return left + right;
}

durin::flow<json> fanout_flow(durin::context& ctx, json input) {
  const auto index = input.at("index").get<std::int64_t>();
  std::int64_t sum = co_await pair_flow(ctx, index);
  sum += co_await pair_flow(ctx, index + 100);
  sum += co_await ctx.step<std::int64_t>("crash.square", index);
  co_await random_sleep(ctx);
  const auto pid = ctx.side_effect("pid", [] { return ::getpid(); });
  if (pid <= 0) {
    throw std::runtime_error("side effect recorded pid " + std::to_string(pid));
  }
  co_return json{
      {"flow", std::string(fanout_flow_name)}, {"index", index}, {"sum", sum}};
}

// A step, a long sleep (long enough for the parent to kill the child while
// the timer is armed, and for the run actor to be passivated), a step.
durin::flow<json> long_sleep_flow(durin::context& ctx, json input) {
  const auto index = input.at("index").get<std::int64_t>();
  const auto sleep_ms = input.at("sleep_ms").get<std::int64_t>();
  std::int64_t sum = co_await ctx.step("before-sleep", offset_step, index, 0);
  co_await checked_sleep(ctx, sleep_ms);
  sum += co_await ctx.step("after-sleep", offset_step, index, 1);
  co_return json{{"flow", std::string(long_sleep_flow_name)},
                 {"index", index},
                 {"sum", sum}};
}

durin::registry make_registry() {
  durin::registry reg;
  reg.flow(std::string(pipeline_flow_name), pipeline_flow);
  reg.flow(std::string(fanout_flow_name), fanout_flow);
  reg.flow(std::string(long_sleep_flow_name), long_sleep_flow);
  reg.step("crash.square", square_step, fast_retry());
  return reg;
}

// ---- runs

// Run i's flow and input. Kept in step with crash_test.cpp.
std::pair<std::string, json> run_spec(const child_options& options, int index) {
  if (options.long_sleep_ms > 0) {
    // Run 0 sleeps the base, run 1 four times it, ...: staggered due times.
    const std::int64_t sleep_ms = options.long_sleep_ms * (1 + 3 * index);
    return {std::string(long_sleep_flow_name),
            json{{"index", index}, {"sleep_ms", sleep_ms}}};
  }
  const auto flow = index % 2 == 0 ? pipeline_flow_name : fanout_flow_name;
  return {std::string(flow), json{{"index", index}}};
}

[[noreturn]] void violation(const std::string& what) {
  std::fprintf(stderr, "crash_child: VIOLATION: %s\n", what.c_str());
  say("VIOLATION " + what);
  std::_Exit(exit_violation);
}

// Every run the store holds, by its input's index.
std::map<int, std::vector<std::string>> runs_by_index(durin::runtime& rt) {
  std::map<int, std::vector<std::string>> by_index;
  durin::run_filter filter;
  filter.limit = 1000;
  for (;;) {
    auto page = rt.list(filter);
    if (!page) {
      std::fprintf(stderr, "crash_child: list: %s\n",
                   page.error().to_string().c_str());
      std::_Exit(exit_setup_failed);
    }
    for (const auto& info : page->runs) {
      by_index[info.input.at("index").get<int>()].push_back(info.id);
    }
    if (page->next_cursor.empty()) {
      return by_index;
    }
    filter.cursor = page->next_cursor;
  }
}

// The indexes an earlier incarnation saw `start` acknowledge, with run ids.
// A line without its end marker was torn by a kill: skipped (that start's
// run is still found through list()).
std::map<int, std::string> read_started(const std::string& path) {
  std::map<int, std::string> started;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    int index = -1;
    std::string run_id;
    std::string end;
    if (fields >> index >> run_id >> end && end == "end") {
      started[index] = run_id;
    }
  }
  return started;
}

// Reconciles the acknowledged starts with the store, then starts only the
// indexes the store does not hold: a start that became durable just before a
// kill is in the store even though no "started" line says so.
std::vector<std::string> ensure_runs(durin::runtime& rt,
                                     const child_options& options) {
  auto by_index = runs_by_index(rt);
  for (const auto& [index, ids] : by_index) {
    if (ids.size() != 1) {
      violation("index " + std::to_string(index) + " was started " +
                std::to_string(ids.size()) + " times");
    }
  }
  for (const auto& [index, run_id] : read_started(options.started_path)) {
    auto it = by_index.find(index);
    if (it == by_index.end() || it->second.front() != run_id) {
      violation("acknowledged start of index " + std::to_string(index) + " (" +
                run_id + ") is not in the store");
    }
  }
  const int started_fd = open_for_append(options.started_path);
  for (int index = 0; index < options.runs; ++index) {
    if (by_index.count(index) != 0) {
      continue;
    }
    auto [flow, input] = run_spec(options, index);
    auto info = rt.start(flow, input);
    if (!info) {
      std::fprintf(stderr, "crash_child: start %d: %s\n", index,
                   info.error().to_string().c_str());
      std::_Exit(exit_setup_failed);
    }
    // Only now is the start acknowledged; a kill before this line leaves an
    // admitted run that the next incarnation finds through list().
    append_durably(started_fd,
                   std::to_string(index) + ' ' + info->id + " end\n");
    by_index[index].push_back(info->id);
  }
  ::close(started_fd);
  std::vector<std::string> ids;
  for (const auto& [index, run_ids] : by_index) {
    ids.push_back(run_ids.front());
  }
  return ids;
}

// Waits until the run ends; the parent judges the outcome from the store.
void wait_for_end(durin::runtime& rt, const std::string& run_id) {
  for (;;) {
    auto info = rt.wait(run_id, 5s);
    if (info) {
      if (info->status != durin::run_status::completed) {
        std::fprintf(stderr, "crash_child: run %s ended %s: %s\n",
                     run_id.c_str(),
                     std::string(durin::to_string(info->status)).c_str(),
                     info->error ? info->error->message.c_str() : "");
      }
      return;
    }
    if (info.error().code == durin::errc::run_not_found) {
      violation("run " + run_id + " vanished");
    }
    if (info.error().code != durin::errc::timeout) {
      std::fprintf(stderr, "crash_child: wait %s: %s\n", run_id.c_str(),
                   info.error().to_string().c_str());
      std::this_thread::sleep_for(100ms);
    }
  }
}

std::optional<child_options> parse_options(int argc, char** argv) {
  child_options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--data-dir") {
      options.data_dir = value;
    } else if (flag == "--effects") {
      options.effects_path = value;
    } else if (flag == "--started") {
      options.started_path = value;
    } else if (flag == "--runs") {
      options.runs = std::stoi(value);
    } else if (flag == "--seed") {
      options.seed = std::stoull(value);
    } else if (flag == "--long-sleep-ms") {
      options.long_sleep_ms = std::stoll(value);
    } else {
      return std::nullopt;
    }
  }
  if (argc % 2 != 1 || options.data_dir.empty() ||
      options.effects_path.empty() || options.runs <= 0) {
    return std::nullopt;
  }
  if (options.started_path.empty()) {
    options.started_path = options.effects_path + ".started";
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  const auto options = parse_options(argc, argv);
  if (!options) {
    std::fprintf(stderr,
                 "usage: durin_crash_child --data-dir DIR --effects FILE "
                 "--runs N [--seed S] [--started FILE] "
                 "[--long-sleep-ms MS]\n");
    return exit_setup_failed;
  }
  child_seed = options->seed;
  effects_fd = open_for_append(options->effects_path);
  durin::runtime_options runtime_options;
  runtime_options.data_dir = options->data_dir;
  auto rt = durin::runtime::open(runtime_options, make_registry());
  if (!rt) {
    std::fprintf(stderr, "crash_child: open: %s\n",
                 rt.error().to_string().c_str());
    return exit_setup_failed;
  }
  say("OPENED");
  for (const auto& run_id : ensure_runs(**rt, *options)) {
    wait_for_end(**rt, run_id);
  }
  say("ALL-DONE");
  // A clean shutdown is part of what is tested: the parent times it.
  rt->reset();
  ::close(effects_fd);
  return 0;
}
