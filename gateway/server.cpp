#include "gateway/server.hpp"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <thread>

#include "durin/runtime.hpp"
#include "gateway/readiness.hpp"
#include "gateway/worker_api.hpp"
#include "persistence/auth_store.hpp"
#include "persistence/committer.hpp"
#include "persistence/requests.hpp"
#include "persistence/store.hpp"
#include "services/node.hpp"
#include "services/task_service.hpp"

namespace durin::gateway {

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
  // The runtime's own actor system: its workers block after a short spin
  // (see runtime::open) instead of sleeping in a polling loop.
  auto node =
      runtime::open({.data_dir = options.data_dir, .shards = options.shards},
                    std::move(flows));
  if (!node) {
    return fail(err, node.error());
  }
  // Request records live in their key's shard, where they ride in the
  // admission batches of the runs they start (one fsync, no window between
  // the two); API keys and tenants, node-wide, in the first shard.
  auto& services = services::services_of(**node);
  std::vector<std::unique_ptr<persistence::request_store>> shard_requests;
  for (auto& shard : services.shards) {
    shard_requests.push_back(std::make_unique<persistence::request_store>(
        *shard->store, *shard->committer));
  }
  auto requests_of = [&shard_requests,
                      &services](const persistence::request_address& address)
      -> persistence::request_store& {
    return *shard_requests[services.map.of_key(address)];
  };
  auto sweep_requests = [&shard_requests]() -> status {
    for (auto& requests : shard_requests) {
      if (auto swept = requests->sweep(wall_ms(), ""); !swept) {
        return swept.error();
      }
    }
    return {};
  };
  auto& first = services.first();
  persistence::auth_store key_store(*first.store, *first.committer);
  auth keys(key_store, wall_ms);
  const std::string admin_key_path = options.data_dir + "/admin.key";
  // On a store not ready at start (a full disk), the admin key is set up by
  // the sweeper once it is; the node serves /healthz and /readyz meanwhile.
  auto created = keys.bootstrap(admin_key_path);
  const bool bootstrap_pending = !created && !first.store->ready();
  if (!created && !bootstrap_pending) {
    return fail(err, created.error());
  }
  const std::string instance_id = random_hex(16);
  // Keys held by requests of an earlier process are free at once: begin()
  // treats markers of other instances as free, and keeps the run they
  // record. Here only expired records go.
  if (auto swept = sweep_requests(); !swept && services.health().ready) {
    return fail(err, swept.error());
  }
  idempotency held(requests_of, instance_id, wall_ms, options.idempotency);
  metrics counters;
  // Counted from the store now, then kept by every write (a true gauge,
  // right across restarts).
  if (auto counted = services.runs_by_status();
      !counted && services.health().ready) {
    return fail(err, counted.error());
  }
  auto commit_metrics = [&services, &node] {
    persistence::committer::stats stats;
    for (auto& shard : services.shards) {
      auto one = shard->committer->statistics();
      stats.group_writes += one.group_writes;
      stats.batches += one.batches;
      stats.operations += one.operations;
    }
    std::string text = task_metrics(**node) + storage_metrics(**node);
    if (auto counts = services.runs_by_status()) {
      text +=
          "# HELP durin_runs Runs stored on this node, by status.\n"
          "# TYPE durin_runs gauge\n";
      for (auto status :
           {run_status::pending, run_status::running, run_status::waiting,
            run_status::completed, run_status::failed, run_status::cancelled}) {
        text +=
            "durin_runs{status=\"" + std::string(to_string(status)) + "\"} " +
            std::to_string((*counts)[static_cast<std::size_t>(status)]) + "\n";
      }
    }
    text +=
        "# HELP durin_commit_groups_total fsync'd group writes of the "
        "node's store.\n";
    text += "durin_commit_groups_total " + std::to_string(stats.group_writes) +
            "\n";
    text +=
        "durin_commit_batches_total " + std::to_string(stats.batches) + "\n";
    text += "durin_commit_operations_total " +
            std::to_string(stats.operations) + "\n";
    text += "durin_commit_batches_per_group " +
            std::to_string(stats.group_writes == 0
                               ? 0.0
                               : static_cast<double>(stats.batches) /
                                     static_cast<double>(stats.group_writes)) +
            "\n";
    return text;
  };
  api routes(**node, keys, held, counters, commit_metrics, options.api);
  // Every request takes one way through the api (gateway/api.hpp): on the
  // io thread that read it, handing to the worker pool only what may block.
  options.http.dispatch = [&routes](http_request request, reply_fn reply,
                                    const offload_fn& offload) {
    routes.dispatch(std::move(request), std::move(reply), offload);
  };
  // At SIGTERM long polls answer at once (empty), not at the end of their
  // wait: they would hold the drain.
  options.http.on_drain = [&node] { (**node).tasks().release_polls(); };
  auto server = http_server::start(options.http);
  if (!server) {
    return fail(err, server.error());
  }
  std::mutex sweep_mutex;
  std::condition_variable sweep_wake;
  bool stopping = false;
  auto report_bootstrap = [&out, &admin_key_path](bool made) {
    if (made) {
      out << "created tenant 'default'; admin API key written to "
          << admin_key_path << std::endl;
    } else {
      out << "admin API key in " << admin_key_path << std::endl;
    }
  };
  std::thread sweeper([&, pending = bootstrap_pending]() mutable {
    std::unique_lock lock(sweep_mutex);
    const auto interval = std::chrono::milliseconds(options.sweep_interval_ms);
    while (!sweep_wake.wait_for(
        lock, pending ? std::chrono::milliseconds(200) : interval,
        [&] { return stopping; })) {
      lock.unlock();
      if (pending && first.store->ready()) {
        if (auto made = keys.bootstrap(admin_key_path)) {
          pending = false;
          report_bootstrap(*made);
        }
      }
      (void)sweep_requests();
      lock.lock();
    }
  });
  if (bootstrap_pending) {
    out << "storage not ready (" << services.health().fault
        << "); the admin API key is set up once it is" << std::endl;
  } else {
    report_bootstrap(*created);
  }
  out << "listening on " << options.http.address << ":" << (*server)->port()
      << std::endl;
  int received = 0;
  sigwait(&signals, &received);
  out << "stopping (signal " << received << ")" << std::endl;
  (*server)->stop();
  routes.close();
  {
    std::lock_guard lock(sweep_mutex);
    stopping = true;
  }
  sweep_wake.notify_all();
  sweeper.join();
  node->reset();
  out << "stopped" << std::endl;
  return 0;
}

}  // namespace durin::gateway
