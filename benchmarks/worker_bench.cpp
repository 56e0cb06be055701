// Remote-worker throughput and redelivery latency (issue 5), over loopback
// against a real `durin serve` process with real `durin worker` processes.
//
//   (1) baseline: GET /healthz round trips per second on the same server,
//       with as many connections as the workers poll with: a remote step
//       costs two such round trips (poll, complete) plus its durable write;
//   (2) steps/s: runs of acme.remote-echo (DURIN_BENCH_WORKER_STEPS steps
//       each) started without waiting, until the task service counted every
//       step's outcome as recorded;
//       with the CPU time per step of the serve and worker processes
//       (/proc/PID/stat), steadier than the rate on a shared machine;
//   (3) redelivery: a claimed charge never reported; the time from its
//       lease's expiry to a second poller receiving the new attempt.
//
// Sizes: DURIN_BENCH_WORKER_RUNS (default 2000), DURIN_BENCH_WORKER_STEPS
// (10), DURIN_BENCH_WORKERS (processes, 2), DURIN_BENCH_WORKER_CONCURRENCY
// (per process, 16), DURIN_BENCH_REDELIVERIES (10).
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "tests/support/serve_process.hpp"
#include "tests/support/temp_dir.hpp"

namespace {

using durin::json;
using steady = std::chrono::steady_clock;

int env_int(const char* name, int fallback) {
  const char* text = std::getenv(name);
  return text == nullptr ? fallback : std::atoi(text);
}

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double load_average() {
  double load = 0;
  if (FILE* file = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(file, "%lf", &load) != 1) {
      load = 0;
    }
    std::fclose(file);
  }
  return load;
}

// utime + stime of process `pid` in seconds, from /proc/PID/stat.
double cpu_seconds(pid_t pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(file)),
                   std::istreambuf_iterator<char>());
  auto close = text.rfind(')');
  if (close == std::string::npos) {
    return 0;
  }
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  unsigned long long utime = 0;
  unsigned long long stime = 0;
  // After the command: state is field 3; utime and stime are 14 and 15.
  for (int index = 3; index <= 15 && fields >> field; ++index) {
    if (index == 14) {
      utime = std::stoull(field);
    } else if (index == 15) {
      stime = std::stoull(field);
    }
  }
  return static_cast<double>(utime + stime) /
         static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// The `durin serve` child of this process (serve_process does not expose
// its pid): the child whose command line has "serve".
pid_t serve_pid() {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    auto name = entry.path().filename().string();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) {
      continue;
    }
    std::ifstream stat(entry.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)),
                     std::istreambuf_iterator<char>());
    auto close = text.rfind(')');
    if (close == std::string::npos) {
      continue;
    }
    std::istringstream fields(text.substr(close + 2));
    std::string state;
    long parent = 0;
    fields >> state >> parent;
    if (parent != ::getpid()) {
      continue;
    }
    std::ifstream command(entry.path() / "cmdline");
    std::string args((std::istreambuf_iterator<char>(command)),
                     std::istreambuf_iterator<char>());
    if (args.find(std::string("serve\0", 6)) != std::string::npos) {
      return static_cast<pid_t>(std::stol(name));
    }
  }
  return -1;
}

pid_t spawn_worker(const durin::testing::serve_process& node, int concurrency,
                   int index) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    auto server = "http://127.0.0.1:" + std::to_string(node.port());
    auto workers = std::to_string(concurrency);
    auto id = "bench-worker-" + std::to_string(index);
    ::execl(DURIN_CLI, "durin", "worker", "--server", server.c_str(),
            "--api-key", node.admin_key().c_str(), "--queue", "workers",
            "--concurrency", workers.c_str(), "--worker-id", id.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

double healthz_per_second(const durin::testing::serve_process& node,
                          int connections) {
  std::atomic<std::int64_t> done{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < connections; ++i) {
    threads.emplace_back([&] {
      durin::testing::api_client client(node.address(), node.admin_key());
      while (!stop) {
        if (client.get("/healthz").status == 200) {
          ++done;
        }
      }
    });
  }
  auto start = steady::now();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  stop = true;
  for (auto& thread : threads) {
    thread.join();
  }
  return static_cast<double>(done) /
         std::chrono::duration<double>(steady::now() - start).count();
}

// From /metrics, not /v1/tasks: listing a thousand live attempts every few
// milliseconds would cost the server more than the steps measured.
std::int64_t completed_steps(durin::testing::api_client& client) {
  auto text = client.get("/metrics").body;
  const std::string name = "\ndurin_task_outcomes_total ";
  auto at = text.find(name);
  return at == std::string::npos ? -1
                                 : std::atoll(text.c_str() + at + name.size());
}

// The commit batches per fsync'd group the node reports in /metrics.
void print_batches_per_group(durin::testing::api_client& client) {
  auto text = client.get("/metrics").body;
  const std::string name = "\ndurin_commit_batches_per_group ";
  auto at = text.find(name);
  if (at != std::string::npos) {
    std::printf("commit batches per fsync'd group: %s\n",
                text.substr(at + name.size(),
                            text.find('\n', at + 1) - at - name.size())
                    .c_str());
  }
}

// Starts `runs` runs of `steps` remote steps each and measures the steps
// per second `workers` worker processes of `concurrency` finish.
void measure_steps(int runs, int steps, int workers, int concurrency) {
  durin::testing::temp_dir dir;
  durin::testing::serve_process node(dir.path(), {}, 10'000);
  double baseline = healthz_per_second(node, workers * concurrency);

  std::vector<pid_t> pids;
  for (int i = 0; i < workers; ++i) {
    pids.push_back(spawn_worker(node, concurrency, i));
  }
  durin::testing::api_client client(node.address(), node.admin_key());
  const pid_t server = serve_pid();
  double server_cpu = cpu_seconds(server);
  double workers_cpu = 0;
  for (auto pid : pids) {
    workers_cpu += cpu_seconds(pid);
  }
  auto start = steady::now();
  std::atomic<int> next{0};
  std::vector<std::thread> starters;
  for (int t = 0; t < 8; ++t) {
    starters.emplace_back([&] {
      durin::testing::api_client starter(node.address(), node.admin_key());
      while (next.fetch_add(1) < runs) {
        starter.post("/v1/runs", {{"flow", "acme.remote-echo"},
                                  {"input", {{"count", steps}, {"value", 1}}},
                                  {"wait", false}});
      }
    });
  }
  for (auto& thread : starters) {
    thread.join();
  }
  const std::int64_t total = static_cast<std::int64_t>(runs) * steps;
  auto deadline = start + std::chrono::seconds(600);
  while (completed_steps(client) < total && steady::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  double seconds = std::chrono::duration<double>(steady::now() - start).count();
  auto finished = completed_steps(client);
  print_batches_per_group(client);
  server_cpu = cpu_seconds(server) - server_cpu;
  double workers_cpu_after = 0;
  for (auto pid : pids) {
    workers_cpu_after += cpu_seconds(pid);
  }
  workers_cpu = workers_cpu_after - workers_cpu;
  for (auto pid : pids) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  double per_second = static_cast<double>(finished) / seconds;
  double steps_done = std::max<double>(static_cast<double>(finished), 1);
  std::printf(
      "remote-worker CPU per step: serve %.1f us, workers %.1f us (serve "
      "%.2f s of CPU over %.2f s)\n",
      server_cpu * 1e6 / steps_done, workers_cpu * 1e6 / steps_done, server_cpu,
      seconds);
  std::printf(
      "SUMMARY | remote-worker steps | goal >= 10000 steps/s | measured %.0f "
      "steps/s (%lld of %lld steps, %d workers x %d, %.1f s; load %.1f) | "
      "baseline /healthz %.0f requests/s | ratio %.3f of baseline/2 | %s\n",
      per_second, static_cast<long long>(finished),
      static_cast<long long>(total), workers, concurrency, seconds,
      load_average(), baseline, per_second / (baseline / 2),
      per_second >= 10'000 ? "MET" : "MISSED");
}

// Redelivery: on a node whose charges lease for 300 ms, how long after its
// lease expired a silent worker's task reaches another worker. 1 when a
// task never came.
int measure_redelivery(int redeliveries) {
  durin::testing::temp_dir lease_dir;
  durin::testing::serve_process leased(lease_dir.path(),
                                       {"DURIN_CHARGE_TIMEOUT_MS=300"});
  durin::testing::api_client lease_client(leased.address(), leased.admin_key());
  std::vector<std::int64_t> delays;
  for (int i = 0; i < redeliveries; ++i) {
    lease_client.post("/v1/runs",
                      {{"flow", "acme.pay"},
                       {"input", {{"orderId", "o" + std::to_string(i)}}},
                       {"wait", false}});
    auto first = lease_client.post("/v1/task-queues/payments/poll",
                                   {{"workerId", "silent"}, {"waitMs", 5000}});
    if (!first.value["task"].is_object()) {
      std::fprintf(stderr, "no task to claim\n");
      return 1;
    }
    auto expires = first.value["task"]["leaseExpiresAtMs"].get<std::int64_t>();
    auto second =
        lease_client.post("/v1/task-queues/payments/poll",
                          {{"workerId", "rescuer"}, {"waitMs", 5000}});
    auto got_at = wall_ms();
    if (!second.value["task"].is_object()) {
      std::fprintf(stderr, "no redelivery within 5 s\n");
      return 1;
    }
    delays.push_back(got_at - expires);
    lease_client.post("/v1/tasks/" +
                          second.value["task"]["attemptId"].get<std::string>() +
                          "/complete",
                      {{"workerId", "rescuer"}, {"result", "ok"}});
  }
  std::sort(delays.begin(), delays.end());
  std::printf(
      "SUMMARY | redelivery after lease expiry | goal <= 1000 ms | median %lld "
      "ms, max %lld ms over %d expiries (load %.1f) | %s\n",
      static_cast<long long>(delays[delays.size() / 2]),
      static_cast<long long>(delays.back()), redeliveries, load_average(),
      delays.back() <= 1000 ? "MET" : "MISSED");
  return 0;
}

}  // namespace

int main() {
  const int runs = env_int("DURIN_BENCH_WORKER_RUNS", 2000);
  const int steps = env_int("DURIN_BENCH_WORKER_STEPS", 10);
  const int workers = env_int("DURIN_BENCH_WORKERS", 2);
  const int concurrency = env_int("DURIN_BENCH_WORKER_CONCURRENCY", 16);
  const int redeliveries = env_int("DURIN_BENCH_REDELIVERIES", 10);
  measure_steps(runs, steps, workers, concurrency);
  return measure_redelivery(redeliveries);
}
