#include "cluster/server.hpp"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <thread>

#include "durin/runtime.hpp"
#include "persistence/auth_store.hpp"
#include "persistence/committer.hpp"
#include "persistence/requests.hpp"
#include "persistence/store.hpp"

namespace durin::cluster {

namespace {

int fail(std::ostream& err, const error& problem) {
  err << to_code(problem.code) << ": " << problem.message << std::endl;
  return 1;
}

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Blocks SIGTERM/SIGINT in every thread started after it, so sigwait in the
// serving thread receives them.
sigset_t block_stop_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

}  // namespace

int serve(serve_options options, registry flows, std::ostream& out,
          std::ostream& err) {
  auto signals = block_stop_signals();
  std::error_code fs_error;
  std::filesystem::create_directories(options.data_dir, fs_error);
  auto node = runtime::open({.data_dir = options.data_dir}, std::move(flows));
  if (!node) {
    return fail(err, node.error());
  }
  auto store = persistence::store::open(options.data_dir + "/gateway");
  if (!store) {
    return fail(err, store.error());
  }
  persistence::committer writer(**store);
  persistence::request_store requests(**store, writer);
  persistence::auth_store key_store(**store, writer);
  auth keys(key_store, wall_ms);
  const std::string admin_key_path = options.data_dir + "/admin.key";
  auto created = keys.bootstrap(admin_key_path);
  if (!created) {
    return fail(err, created.error());
  }
  const std::string instance_id = random_hex(16);
  // Keys held by requests of an earlier process are free at once: begin()
  // treats markers of other instances as free, and keeps the run they
  // record. Here only expired records go.
  if (auto swept = requests.sweep(wall_ms(), ""); !swept) {
    return fail(err, swept.error());
  }
  idempotency held(requests, instance_id, wall_ms, options.idempotency);
  metrics counters;
  auto commit_metrics = [&writer] {
    auto stats = writer.statistics();
    std::string text;
    text +=
        "# HELP durin_gateway_commit_groups_total fsync'd group writes "
        "of the gateway store.\n";
    text += "durin_gateway_commit_groups_total " +
            std::to_string(stats.group_writes) + "\n";
    text += "durin_gateway_commit_batches_total " +
            std::to_string(stats.batches) + "\n";
    text += "durin_gateway_commit_operations_total " +
            std::to_string(stats.operations) + "\n";
    text += "durin_gateway_commit_batches_per_group " +
            std::to_string(stats.group_writes == 0
                               ? 0.0
                               : static_cast<double>(stats.batches) /
                                     static_cast<double>(stats.group_writes)) +
            "\n";
    return text;
  };
  api routes(**node, keys, held, counters, commit_metrics, options.api);
  // Reads never block (a store read, a bounded scan), nor do replays of kept
  // answers: answer them on the io thread. Everything that writes goes to
  // the worker pool.
  options.gateway.answer_inline =
      [&routes](const http_request& request) -> std::optional<http_response> {
    if (request.method == "GET") {
      return routes.handle(request);
    }
    return routes.try_replay(request);
  };
  auto server =
      gateway::start(options.gateway, [&routes](const http_request& request) {
        return routes.handle(request);
      });
  if (!server) {
    return fail(err, server.error());
  }
  std::mutex sweep_mutex;
  std::condition_variable sweep_wake;
  bool stopping = false;
  std::thread sweeper([&] {
    std::unique_lock lock(sweep_mutex);
    while (!sweep_wake.wait_for(
        lock, std::chrono::milliseconds(options.sweep_interval_ms),
        [&] { return stopping; })) {
      lock.unlock();
      (void)requests.sweep(wall_ms(), "");
      lock.lock();
    }
  });
  if (*created) {
    out << "created tenant 'default'; admin API key written to "
        << admin_key_path << std::endl;
  } else {
    out << "admin API key in " << admin_key_path << std::endl;
  }
  out << "listening on " << options.gateway.address << ":" << (*server)->port()
      << std::endl;
  int received = 0;
  sigwait(&signals, &received);
  out << "stopping (signal " << received << ")" << std::endl;
  (*server)->stop();
  {
    std::lock_guard lock(sweep_mutex);
    stopping = true;
  }
  sweep_wake.notify_all();
  sweeper.join();
  writer.stop();
  node->reset();
  out << "stopped" << std::endl;
  return 0;
}

}  // namespace durin::cluster
