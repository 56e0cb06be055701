// `durin serve`: a node with the HTTP API, its request keys and API keys,
// metrics, a sweeper of expired request records, and a drain at SIGTERM.
#include "gateway/server.hpp"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
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
#include "services/runtime_access.hpp"
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

// GET /metrics beyond the request counters: tasks, storage, runs by status
// and the committers' group commits, summed over the shards.
std::string metrics_text(services::node& services, runtime& node) {
  persistence::committer::stats stats;
  for (auto& shard : services.shards) {
    auto one = shard->committer->statistics();
    stats.group_writes += one.group_writes;
    stats.batches += one.batches;
    stats.operations += one.operations;
    stats.landed_as_fence_closed += one.landed_as_fence_closed;
  }
  std::string text = task_metrics(node) + storage_metrics(node);
  if (auto counts = services.runs_by_status()) {
    text +=
        "# HELP durin_runs Runs stored on this node, by status.\n"
        "# TYPE durin_runs gauge\n";
    for (auto status :
         {run_status::pending, run_status::running, run_status::waiting,
          run_status::completed, run_status::failed, run_status::cancelled,
          run_status::terminated}) {
      text += "durin_runs{status=\"" + std::string(to_string(status)) + "\"} " +
              std::to_string((*counts)[static_cast<std::size_t>(status)]) +
              "\n";
    }
  }
  text +=
      "# HELP durin_commit_groups_total fsync'd group writes of the "
      "node's store.\n";
  text +=
      "durin_commit_groups_total " + std::to_string(stats.group_writes) + "\n";
  text += "durin_commit_batches_total " + std::to_string(stats.batches) + "\n";
  text += "durin_commit_operations_total " + std::to_string(stats.operations) +
          "\n";
  text += "durin_commit_batches_per_group " +
          std::to_string(stats.group_writes == 0
                             ? 0.0
                             : static_cast<double>(stats.batches) /
                                   static_cast<double>(stats.group_writes)) +
          "\n";
  text +=
      "# HELP durin_commit_landed_as_fence_closed_total group writes that "
      "landed while their shard's lease ended or a hand-over began "
      "(answered failed, still shipped to the backups).\n"
      "durin_commit_landed_as_fence_closed_total " +
      std::to_string(stats.landed_as_fence_closed) + "\n";
  return text;
}

// The request stores of the node's shards: a key's record lives in its
// key's shard.
class shard_requests {
 public:
  explicit shard_requests(services::node& services) : services_(services) {
    for (auto& shard : services.shards) {
      stores_.push_back(std::make_unique<persistence::request_store>(
          *shard->store, *shard->committer));
    }
  }

  persistence::request_store& of(const persistence::request_address& address) {
    return *stores_[services_.map.of_key(address)];
  }

  // Drops the expired records of every shard this node serves; the first
  // failure stops it.
  status sweep() {
    for (std::size_t index = 0; index < stores_.size(); ++index) {
      if (services::node::serves_no_more(*services_.shards[index])) {
        continue;
      }
      auto& requests = stores_[index];
      if (auto swept = requests->sweep(wall_ms(), ""); !swept) {
        return swept.error();
      }
    }
    return {};
  }

 private:
  services::node& services_;
  std::vector<std::unique_ptr<persistence::request_store>> stores_;
};

// Before serving: expired request records go (keys held by requests of an
// earlier process are free at once: begin() treats markers of other
// instances as free, and keeps the run they record), and the runs are
// counted from the stores, then kept by every write (a true gauge, right
// across restarts). Only storage that is ready fails the start.
status prepare_stores(shard_requests& requests, services::node& services) {
  if (auto swept = requests.sweep(); !swept && services.health().ready) {
    return swept.error();
  }
  if (auto counted = services.runs_by_status();
      !counted && services.health().ready) {
    return counted.error();
  }
  return {};
}

// Every sweep_interval_ms: drops expired request records and, when the
// store was not ready at start, sets up the admin key once it is (polled
// every 200 ms until then).
class sweeper {
 public:
  using bootstrap_report = std::function<void(bool made)>;

  sweeper(persistence::store& key_store, auth& keys, shard_requests& requests,
          std::string admin_key_path, std::int64_t interval_ms,
          bool bootstrap_pending, bootstrap_report report)
      : key_store_(key_store),
        keys_(keys),
        requests_(requests),
        admin_key_path_(std::move(admin_key_path)),
        interval_(interval_ms),
        bootstrap_pending_(bootstrap_pending),
        report_(std::move(report)),
        thread_([this] { loop(); }) {}

  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

 private:
  void loop() {
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(
        lock, bootstrap_pending_ ? std::chrono::milliseconds(200) : interval_,
        [&] { return stopping_; })) {
      lock.unlock();
      if (bootstrap_pending_ && key_store_.ready()) {
        if (auto made = keys_.bootstrap(admin_key_path_)) {
          bootstrap_pending_ = false;
          report_(*made);
        }
      }
      (void)requests_.sweep();
      lock.lock();
    }
  }

  persistence::store& key_store_;  // the first shard's: keys and tenants
  auth& keys_;
  shard_requests& requests_;
  const std::string admin_key_path_;
  const std::chrono::milliseconds interval_;
  bool bootstrap_pending_;  // read and written by the thread only
  bootstrap_report report_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;  // last: it starts once every member above exists
};

void report_admin_key(std::ostream& out, const std::string& path, bool made) {
  if (made) {
    out << "created tenant 'default'; admin API key written to " << path
        << std::endl;
  } else {
    out << "admin API key in " << path << std::endl;
  }
}

// Waits for SIGTERM or SIGINT, then stops in order: the server (it drains
// what it has), the routes' workers, the sweeper, the node.
void serve_until_signal(const sigset_t& signals, http_server& server,
                        api& routes, sweeper& sweep,
                        std::unique_ptr<runtime>& node, cluster_member* cluster,
                        std::ostream& out) {
  int received = 0;
  sigwait(&signals, &received);
  out << "stopping (signal " << received << ")" << std::endl;
  server.stop();
  routes.close();
  if (cluster != nullptr) {
    cluster->leave();
  }
  sweep.stop();
  node.reset();
  out << "stopped" << std::endl;
}

}  // namespace

int serve(serve_options options, registry flows, std::ostream& out,
          std::ostream& err) {
  auto signals = block_stop_signals();
  std::error_code fs_error;
  std::filesystem::create_directories(options.data_dir, fs_error);
  // The runtime's own actor system: its workers block after a short spin
  // (see runtime::open) instead of sleeping in a polling loop.
  auto* cluster = options.cluster.get();
  if (cluster != nullptr) {
    options.shards = cluster->shards();
  }
  auto node = runtime_access::open(
      {.data_dir = options.data_dir, .shards = options.shards},
      std::move(flows), {},
      cluster != nullptr ? cluster->fences()
                         : std::vector<std::shared_ptr<persistence::fence>>{});
  if (!node) {
    return fail(err, node.error());
  }
  // Request records live in their key's shard, where they ride in the
  // admission batches of the runs they start (one fsync, no window between
  // the two); API keys and tenants, node-wide, in the first shard.
  auto& services = runtime_access::services(**node);
  shard_requests requests(services);
  auto requests_of = [&requests](const persistence::request_address& address)
      -> persistence::request_store& { return requests.of(address); };
  // In a cluster the first shard may be another node's: keys and tenants
  // live in a store of the node's own (data_dir/node), bootstrapped with
  // the cluster's admin key and kept in step with every other node's
  // (gateway/key_sync.hpp).
  std::unique_ptr<persistence::store> own_store;
  std::unique_ptr<persistence::committer> own_committer;
  persistence::store* key_home = services.first().store.get();
  persistence::committer* key_writer = services.first().committer.get();
  if (cluster != nullptr) {
    auto opened = persistence::store::open(options.data_dir + "/node");
    if (!opened) {
      return fail(err, opened.error());
    }
    own_store = std::move(*opened);
    own_committer = std::make_unique<persistence::committer>(*own_store);
    key_home = own_store.get();
    key_writer = own_committer.get();
  }
  persistence::auth_store key_store(*key_home, *key_writer);
  auth keys(key_store, wall_ms);
  const std::string admin_key_path = options.data_dir + "/admin.key";
  const std::string admin_secret =
      cluster != nullptr ? cluster->admin_key() : std::string();
  // On a store not ready at start (a full disk), the admin key is set up by
  // the sweeper once it is; the node serves /healthz and /readyz meanwhile.
  auto created = keys.bootstrap(admin_key_path, admin_secret);
  const bool bootstrap_pending = !created && !key_home->ready();
  if (!created && !bootstrap_pending) {
    return fail(err, created.error());
  }
  if (auto prepared = prepare_stores(requests, services); !prepared) {
    return fail(err, prepared.error());
  }
  idempotency held(requests_of, random_hex(16), wall_ms, options.idempotency);
  metrics counters;
  auto commit_metrics = [&services, &node] {
    return metrics_text(services, **node);
  };
  api routes(**node, keys, held, counters, commit_metrics, options.api);
  if (cluster != nullptr) {
    routes.set_placement(&cluster->attach(routes));
  }
  // Every request takes one way through the api (gateway/api.hpp): on the
  // io thread that read it, handing to the worker pool only what may block.
  options.http.dispatch = [&routes](http_request request, reply_fn reply,
                                    const offload_fn& offload) {
    routes.dispatch(std::move(request), std::move(reply), offload);
  };
  // At SIGTERM long polls answer at once (empty), not at the end of their
  // wait: they would hold the drain.
  options.http.on_drain = [&node, &routes,
                           drain_ms = options.http.drain_timeout_ms] {
    runtime_access::services(**node).tasks->release_polls();
    routes.release_run_waits();
    routes.end_waited_starts_after(std::chrono::milliseconds(drain_ms));
  };
  auto server = http_server::start(options.http);
  if (!server) {
    return fail(err, server.error());
  }
  auto report_bootstrap = [&out, &admin_key_path](bool made) {
    report_admin_key(out, admin_key_path, made);
  };
  sweeper sweep(*key_home, keys, requests, admin_key_path,
                options.sweep_interval_ms, bootstrap_pending, report_bootstrap);
  if (bootstrap_pending) {
    out << "storage not ready (" << services.health().fault
        << "); the admin API key is set up once it is" << std::endl;
  } else {
    report_bootstrap(*created);
  }
  const std::string http_address =
      options.http.address + ":" + std::to_string((*server)->port());
  if (cluster != nullptr) {
    if (auto joined = cluster->join(http_address); !joined) {
      (*server)->stop();
      routes.close();
      sweep.stop();
      return fail(err, joined.error());
    }
  }
  out << "listening on " << http_address << std::endl;
  serve_until_signal(signals, **server, routes, sweep, *node, cluster, out);
  return 0;
}

}  // namespace durin::gateway
