#include "cluster/shard_move.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "cluster/detail/peer_router.hpp"
#include "persistence/sync_path.hpp"

namespace durin::cluster {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr std::uint64_t chunk_bytes = 4u << 20;
constexpr auto copy_retry = std::chrono::seconds(1);
constexpr auto peer_timeout = std::chrono::seconds(30);

// A file name an owner may name: no directories, no way out of the export.
bool plain_name(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name != "." &&
         name != "..";
}

}  // namespace

shard_mover::shard_mover(membership& members, store_of stores,
                         std::string data_dir, caf::actor_system& system)
    : members_(members),
      stores_(std::move(stores)),
      data_dir_(std::move(data_dir)),
      system_(system) {}

shard_mover::~shard_mover() {
  stop();
}

void shard_mover::stop() {
  std::vector<std::thread> jobs;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    jobs.swap(jobs_);
  }
  for (auto& job : jobs) {
    job.join();
  }
}

void shard_mover::observe(std::uint32_t shard, const shard_config& config) {
  if (config.target != members_.options().node_id ||
      config.owner == members_.options().node_id) {
    return;
  }
  std::lock_guard lock(mutex_);
  if (stopping_ || copying_.count(shard) != 0) {
    return;
  }
  if (auto wait = not_before_.find(shard);
      wait != not_before_.end() &&
      std::chrono::steady_clock::now() < wait->second) {
    return;
  }
  copying_.insert(shard);
  jobs_.emplace_back([this, shard, config] { copy(shard, config); });
}

namespace {

std::string export_name_of(std::uint32_t shard, char kind,
                           std::uint64_t number) {
  char name[40];
  std::snprintf(name, sizeof name, "%04u-%c%llu", shard, kind,
                static_cast<unsigned long long>(number));
  return name;
}

}  // namespace

std::string shard_mover::export_dir(const std::string& export_name) const {
  return data_dir_ + "/moves/" + export_name;
}

void shard_mover::copy(std::uint32_t shard, shard_config config) {
  auto* store = stores_(shard);
  status done;
  const auto peer = members_.peer_of(config.owner);
  if (store == nullptr) {
    done = make_error(errc::internal, "no store for the shard");
  } else if (peer.empty()) {
    done = make_error(errc::shutting_down,
                      "the shard's owner " + config.owner + " is not live");
  } else {
    const auto incoming = store->dir() + ".incoming";
    std::error_code ignored;
    fs::remove_all(incoming, ignored);
    done = fetch(peer, incoming, move_files_atom::value, shard, config.epoch);
    if (done) {
      done = store->replace_files(incoming);
    }
    if (!done) {
      fs::remove_all(incoming, ignored);
    }
  }
  if (done && members_.finish_move(shard, config)) {
    std::fprintf(stderr, "durin: shard %u copied from node %s\n", shard,
                 config.owner.c_str());
  } else if (!done) {
    std::fprintf(stderr, "durin: the move of shard %u waits: %s\n", shard,
                 done.error().message.c_str());
  }
  std::lock_guard lock(mutex_);
  copying_.erase(shard);
  not_before_[shard] = std::chrono::steady_clock::now() + copy_retry;
}

template <class... Ts>
status shard_mover::fetch(const std::string& peer, const std::string& into,
                          Ts&&... ask) {
  auto router = detail::peer_router(system_, peer);
  if (!router) {
    return router.error();
  }
  caf::scoped_actor self{system_};
  move_manifest files;
  status failed;
  self->request(*router, peer_timeout, std::forward<Ts>(ask)...)
      .receive([&](move_manifest& got) { files = std::move(got); },
               [&](caf::error& problem) {
                 failed = make_error(errc::shutting_down,
                                     "the node at " + peer +
                                         " did not export the shard: " +
                                         system_.render(problem));
               });
  if (!failed) {
    return failed;
  }
  std::error_code made;
  fs::create_directories(into, made);
  if (made) {
    return make_error(errc::storage_error, "cannot make the copy's directory");
  }
  for (std::size_t index = 0; index < files.names.size(); ++index) {
    const auto& name = files.names[index];
    if (!plain_name(name) || index >= files.sizes.size()) {
      return make_error(errc::internal, "the owner named a bad file");
    }
    const auto path = into + "/" + name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    for (std::uint64_t offset = 0; offset < files.sizes[index];) {
      std::string bytes;
      self->request(*router, peer_timeout, move_chunk_atom::value,
                    files.export_name, name, offset, chunk_bytes)
          .receive([&](std::string& got) { bytes = std::move(got); },
                   [&](caf::error& problem) {
                     failed = make_error(errc::shutting_down,
                                         "a chunk of the shard's files did "
                                         "not come: " +
                                             system_.render(problem));
                   });
      if (!failed) {
        return failed;
      }
      if (bytes.empty()) {
        return make_error(errc::internal, "the owner sent an empty chunk");
      }
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      offset += bytes.size();
    }
    out.close();
    if (!out || !persistence::sync_path(path)) {
      return make_error(errc::storage_error, "cannot write the shard's copy");
    }
  }
  if (!persistence::sync_path(into)) {
    return make_error(errc::storage_error, "cannot sync the shard's copy");
  }
  return {};
}

status shard_mover::pull_checkpoint(std::uint32_t shard,
                                    const std::string& peer,
                                    const std::string& into) {
  return fetch(peer, into, checkpoint_atom::value, shard);
}

result<move_manifest> shard_mover::manifest(std::uint32_t shard,
                                            std::uint64_t epoch) {
  auto* store = stores_(shard);
  if (store == nullptr) {
    return make_error(errc::invalid_argument, "no such shard");
  }
  if (members_.locate(shard).at == route::where::here ||
      (store->guard() && store->guard()->open())) {
    return make_error(errc::invalid_argument,
                      "this node still serves the shard");
  }
  const auto name = export_name_of(shard, 'e', epoch);
  const auto dir = export_dir(name);
  {
    std::lock_guard lock(mutex_);
    if (exported_.count(name) == 0) {
      std::error_code ignored;
      fs::remove_all(dir, ignored);
      if (auto exported = store->export_files(dir); !exported) {
        return exported.error();
      }
      exported_.insert(name);
    }
  }
  return list_export(name);
}

result<move_manifest> shard_mover::checkpoint(std::uint32_t shard) {
  auto* store = stores_(shard);
  if (store == nullptr) {
    return make_error(errc::invalid_argument, "no such shard");
  }
  std::string name;
  {
    std::lock_guard lock(mutex_);
    name = export_name_of(shard, 'c', ++next_checkpoint_);
    if (auto last = checkpoints_.find(shard); last != checkpoints_.end()) {
      std::error_code ignored;
      fs::remove_all(export_dir(last->second), ignored);
      exported_.erase(last->second);
    }
    checkpoints_[shard] = name;
  }
  std::error_code ignored;
  fs::create_directories(data_dir_ + "/moves", ignored);
  fs::remove_all(export_dir(name), ignored);
  if (auto made = store->checkpoint(export_dir(name)); !made) {
    return made.error();
  }
  {
    std::lock_guard lock(mutex_);
    exported_.insert(name);
  }
  return list_export(name);
}

result<move_manifest> shard_mover::list_export(const std::string& name) {
  move_manifest out;
  out.export_name = name;
  std::error_code failure;
  for (const auto& entry : fs::directory_iterator(export_dir(name), failure)) {
    if (entry.is_regular_file()) {
      out.names.push_back(entry.path().filename().string());
      out.sizes.push_back(entry.file_size());
    }
  }
  if (failure) {
    return make_error(errc::storage_error, "cannot list the shard's export");
  }
  return out;
}

result<std::string> shard_mover::chunk(const std::string& export_name,
                                       const std::string& name,
                                       std::uint64_t offset,
                                       std::uint64_t length) {
  const auto dir = export_dir(export_name);
  {
    std::lock_guard lock(mutex_);
    if (exported_.count(export_name) == 0 || !plain_name(name)) {
      return make_error(errc::invalid_argument, "no such exported file");
    }
  }
  std::ifstream in(dir + "/" + name, std::ios::binary);
  if (!in) {
    return make_error(errc::invalid_argument, "no such exported file");
  }
  in.seekg(static_cast<std::streamoff>(offset));
  std::string bytes(std::min<std::uint64_t>(length, chunk_bytes), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<std::size_t>(in.gcount()));
  return bytes;
}

// ---- the operator's side ----------------------------------------------------

namespace {

struct cluster_view {
  std::map<std::string, node_entry> nodes;
  std::map<std::uint32_t, shard_config> configs;
  std::map<std::uint32_t, shard_lease> leases;
  std::uint32_t shards = 0;
  std::uint32_t replicas = 1;
};

// Whether `node` keeps a copy of the shard that has every write its owner
// acknowledged, at the node lease it is live with.
bool in_step_copy(const cluster_view& view, const shard_config& config,
                  const std::string& node) {
  auto live = view.nodes.find(node);
  return live != view.nodes.end() && config.in_step(node, live->second.lease);
}

result<cluster_view> read_view(etcd_client& etcd, const std::string& cluster) {
  const layout keys(cluster);
  auto all = etcd.range(keys.prefix(), true);
  if (!all) {
    return all.error();
  }
  cluster_view view;
  for (const auto& item : all->kvs) {
    if (item.key == keys.config()) {
      if (auto config = decode_config(item.value)) {
        view.shards = config->shards;
        view.replicas = config->replicas;
      }
    } else if (item.key.compare(0, keys.nodes().size(), keys.nodes()) == 0) {
      if (auto node = decode_node(item.value)) {
        view.nodes[item.key.substr(keys.nodes().size())] = std::move(*node);
      }
    } else if (auto shard = keys.shard_of_key(item.key)) {
      if (shard->second) {
        if (auto lease = decode_lease(item.value)) {
          view.leases[shard->first] = std::move(*lease);
        }
      } else if (auto config = decode_shard(item.value)) {
        config->mod_revision = item.mod_revision;
        view.configs[shard->first] = std::move(*config);
      }
    }
  }
  if (view.shards == 0) {
    return make_error(errc::invalid_argument,
                      "cluster '" + cluster + "' is not initialised in etcd");
  }
  return view;
}

// The config of shard `shard`, or invalid-argument naming why there is none.
result<shard_config> config_named(const cluster_view& view,
                                  std::uint32_t shard) {
  if (shard >= view.shards) {
    return make_error(errc::invalid_argument,
                      "shard " + std::to_string(shard) +
                          " does not exist; the "
                          "cluster has shards 0 to " +
                          std::to_string(view.shards - 1));
  }
  auto found = view.configs.find(shard);
  if (found == view.configs.end()) {
    return make_error(errc::invalid_argument,
                      "shard " + std::to_string(shard) + " has no config yet");
  }
  return found->second;
}

// One read, decision and compare-and-swap of shard `shard`'s config, again
// (up to 10 times) while the config changed between its read and its swap:
// the owner changes it too (its in-sync set). `decide(view, config)`
// answers the config to write, nullopt when there is nothing to write
// (the config read is answered), or an error naming what is wrong.
template <class Decide>
result<shard_config> change_config(etcd_client& etcd,
                                   const std::string& cluster,
                                   std::uint32_t shard, const std::string& what,
                                   Decide decide) {
  for (int round = 0; round < 10; ++round) {
    auto view = read_view(etcd, cluster);
    if (!view) {
      return view.error();
    }
    auto config = config_named(*view, shard);
    if (!config) {
      return config.error();
    }
    result<std::optional<shard_config>> next = decide(*view, *config);
    if (!next) {
      return next.error();
    }
    if (!*next) {
      return *config;
    }
    compare same;
    same.key = layout(cluster).shard_config(shard);
    same.what = compare::target::mod;
    same.number = config->mod_revision;
    request_op write;
    write.key = same.key;
    write.value = encode(**next);
    auto done = etcd.txn({same}, {write});
    if (!done) {
      return done.error();
    }
    if (done->succeeded) {
      return **next;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return make_error(errc::invalid_argument,
                    "shard " + std::to_string(shard) +
                        "'s config kept changing; run the " + what + " again");
}

}  // namespace

using next_config = result<std::optional<shard_config>>;

result<shard_config> request_move(etcd_client& etcd, const std::string& cluster,
                                  std::uint32_t shard, const std::string& to) {
  return change_config(
      etcd, cluster, shard, "move",
      [&](const cluster_view& view, const shard_config& config) -> next_config {
        if (config.owner == to && config.state == shard_state::active &&
            config.target.empty()) {
          return std::optional<shard_config>();  // there already
        }
        if (view.nodes.count(to) == 0) {
          return make_error(errc::invalid_argument,
                            "node '" + to + "' is not live in cluster '" +
                                cluster +
                                "' (a move needs its target running)");
        }
        if (config.state == shard_state::moving && config.target != to &&
            config.owner != to) {
          return make_error(errc::invalid_argument,
                            "shard " + std::to_string(shard) +
                                " is moving to node '" + config.target +
                                "' already; move it back to '" + config.owner +
                                "' to cancel that first");
        }
        shard_config next = config;
        if (config.owner.empty() || config.owner == to) {
          // Not placed yet, or a cancel: the shard is simply (re)placed on
          // `to`, without the copy an online move added beyond the
          // cluster's replicas.
          if (!config.target.empty() && config.state == shard_state::active &&
              next.backups.size() + 1 > view.replicas) {
            std::erase(next.backups, config.target);
          }
          next.state = shard_state::active;
          next.owner = to;
          next.target.clear();
        } else if (view.replicas > 1 && config.state == shard_state::active &&
                   view.nodes.count(config.owner) != 0) {
          // Online, with replication: `to` becomes a copy if it is none (it
          // joins and catches up), the owner hands the shard over once `to`
          // is in step, and `to` takes it at epoch + 1 (cluster/
          // membership.cpp); the shard is unavailable only between the two.
          next.target = to;
          if (!config.is_backup(to)) {
            next.backups.push_back(to);
          }
        } else {
          next.state = shard_state::moving;
          next.target = to;
        }
        return std::optional(next);
      });
}

result<shard_config> accept_loss(etcd_client& etcd, const std::string& cluster,
                                 std::uint32_t shard, const std::string& by) {
  const auto name = "shard " + std::to_string(shard);
  return change_config(
      etcd, cluster, shard, "command",
      [&](const cluster_view& view, const shard_config& config) -> next_config {
        if (auto lease = view.leases.find(shard); lease != view.leases.end()) {
          return make_error(errc::invalid_argument,
                            name + " is served by node '" + lease->second.node +
                                "' at epoch " +
                                std::to_string(lease->second.epoch) +
                                ": nothing of it is lost");
        }
        if (config.owner.empty() || config.epoch == 0) {
          return make_error(errc::invalid_argument,
                            name +
                                " was never served: its owner takes it "
                                "without being told");
        }
        if (config.state != shard_state::active) {
          return make_error(errc::invalid_argument,
                            name + " is moving to node '" + config.target +
                                "'; move it back to '" + config.owner +
                                "' to cancel that first");
        }
        const std::string taker = by.empty() ? config.owner : by;
        if (taker != config.owner && !config.is_backup(taker)) {
          std::string copies = "'" + config.owner + "'";
          for (const auto& backup : config.backups) {
            copies += ", '" + backup + "'";
          }
          return make_error(errc::invalid_argument,
                            "node '" + taker + "' keeps no copy of " + name +
                                " (its copies are on " + copies + ")");
        }
        if (taker != config.owner && view.nodes.count(taker) == 0) {
          return make_error(errc::invalid_argument,
                            "node '" + taker + "' is not live in cluster '" +
                                cluster + "' (it must run to take " + name +
                                ")");
        }
        if (config.loss_accepted_by() == taker) {
          return std::optional<shard_config>();  // accepted already
        }
        shard_config next = config;
        next.accept_loss_at = config.epoch;
        next.accept_loss_by = taker == config.owner ? "" : taker;
        return std::optional(next);
      });
}

result<std::uint64_t> wait_for_move(etcd_client& etcd,
                                    const std::string& cluster,
                                    std::uint32_t shard, const std::string& to,
                                    std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    auto view = read_view(etcd, cluster);
    if (view) {
      auto config = view->configs.find(shard);
      auto lease = view->leases.find(shard);
      if (config != view->configs.end() && lease != view->leases.end() &&
          config->second.owner == to &&
          config->second.state == shard_state::active &&
          lease->second.node == to) {
        return lease->second.epoch;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return make_error(errc::timeout, "shard " + std::to_string(shard) +
                                       " is not served by '" + to + "' yet");
}

result<std::vector<std::pair<std::uint32_t, std::string>>> copies_plan(
    etcd_client& etcd, const std::string& cluster, const std::string& node) {
  auto view = read_view(etcd, cluster);
  if (!view) {
    return view.error();
  }
  std::vector<std::pair<std::uint32_t, std::string>> plan;
  for (const auto& [shard, config] : view->configs) {
    if (!config.is_backup(node)) {
      continue;
    }
    // A node that keeps no copy of the shard yet.
    std::vector<std::string> free;
    for (const auto& [id, entry] : view->nodes) {
      if (id != node && id != config.owner && !config.is_backup(id)) {
        free.push_back(id);
      }
    }
    if (free.empty()) {
      return make_error(
          errc::invalid_argument,
          "no live node without a copy of shard " + std::to_string(shard) +
              " can keep one in place of the copy on node '" + node +
              "' (the cluster keeps " + std::to_string(view->replicas) +
              " copies of each shard)");
    }
    plan.emplace_back(shard, rendezvous(shard, free));
  }
  return plan;
}

status replace_copy(etcd_client& etcd, const std::string& cluster,
                    std::uint32_t shard, const std::string& node,
                    const std::string& to, std::chrono::milliseconds limit) {
  const auto name = "shard " + std::to_string(shard);
  // 1. `to` becomes a copy beside `node`'s: it joins and catches up.
  auto added = change_config(
      etcd, cluster, shard, "drain",
      [&](const cluster_view&, const shard_config& config) -> next_config {
        if (!config.is_backup(node) || config.is_backup(to)) {
          return std::optional<shard_config>();
        }
        shard_config next = config;
        next.backups.push_back(to);
        return std::optional(next);
      });
  if (!added) {
    return added.error();
  }
  if (!added->is_backup(node)) {
    return {};  // not a copy of it (any more)
  }
  // 2. Until `to` is in step: from then on it has every write.
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto view = read_view(etcd, cluster);
    if (view) {
      auto config = view->configs.find(shard);
      if (config != view->configs.end() &&
          in_step_copy(*view, config->second, to)) {
        break;
      }
    }
    if (std::chrono::steady_clock::now() >= until) {
      return make_error(errc::timeout,
                        "node '" + to + "' did not catch up with " + name +
                            " in time; node '" + node +
                            "' keeps its copy (run the drain again)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // 3. `node`'s copy goes: the primary no longer waits for it, and it
  // stops following.
  auto removed = change_config(
      etcd, cluster, shard, "drain",
      [&](const cluster_view& view, const shard_config& config) -> next_config {
        if (!config.is_backup(node)) {
          return std::optional<shard_config>();
        }
        if (config.owner == node || !in_step_copy(view, config, to)) {
          return make_error(errc::invalid_argument,
                            name + " changed while its copy moved from node '" +
                                node + "' to '" + to +
                                "' (a failover?); run the drain again");
        }
        shard_config next = config;
        std::erase(next.backups, node);
        std::erase_if(next.in_sync, [&node](const in_sync_entry& entry) {
          return entry.node == node;
        });
        return std::optional(next);
      });
  if (!removed) {
    return removed.error();
  }
  return {};
}

result<std::vector<std::pair<std::uint32_t, std::string>>> drain_plan(
    etcd_client& etcd, const std::string& cluster, const std::string& node) {
  auto view = read_view(etcd, cluster);
  if (!view) {
    return view.error();
  }
  std::vector<std::string> others;
  for (const auto& [id, entry] : view->nodes) {
    if (id != node) {
      others.push_back(id);
    }
  }
  std::vector<std::pair<std::uint32_t, std::string>> plan;
  for (const auto& [shard, config] : view->configs) {
    if (config.owner != node) {
      continue;
    }
    if (others.empty()) {
      return make_error(
          errc::invalid_argument,
          "no other node is live to take the shards of node '" + node + "'");
    }
    // A copy in step takes over at once; otherwise a node by rendezvous
    // hashing (which first catches up, or copies the shard offline).
    std::string to = rendezvous(shard, others);
    for (const auto& backup : config.backups) {
      if (backup != node && in_step_copy(*view, config, backup)) {
        to = backup;
        break;
      }
    }
    plan.emplace_back(shard, std::move(to));
  }
  // A mistyped id would otherwise be "drained" at once: nothing names it.
  const bool named = view->nodes.count(node) != 0 ||
                     std::any_of(view->configs.begin(), view->configs.end(),
                                 [&node](const auto& shard) {
                                   return shard.second.owner == node ||
                                          shard.second.is_backup(node);
                                 });
  if (!named) {
    return make_error(errc::invalid_argument,
                      "node '" + node + "' is not in cluster '" + cluster +
                          "': no live node has that id and no shard is "
                          "placed on it");
  }
  return plan;
}

}  // namespace durin::cluster
