#include "cluster/layout.hpp"

#include "base/fnv1a.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

namespace durin::cluster {

namespace {

using json = nlohmann::json;

constexpr std::string_view config_suffix = "/config";
constexpr std::string_view lease_suffix = "/lease";

result<json> parse(std::string_view text, std::string_view what) {
  auto parsed = json::parse(text, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return make_error(errc::invalid_argument,
                      std::string(what) + " in etcd is not a JSON object");
  }
  return parsed;
}

using base::fnv1a;

}  // namespace

std::string layout::shard_config(std::uint32_t shard) const {
  char name[16];
  std::snprintf(name, sizeof name, "%04u", shard);
  return shards() + name + std::string(config_suffix);
}

std::string layout::shard_lease(std::uint32_t shard) const {
  char name[16];
  std::snprintf(name, sizeof name, "%04u", shard);
  return shards() + name + std::string(lease_suffix);
}

std::optional<std::pair<std::uint32_t, bool>> layout::shard_of_key(
    std::string_view key) const {
  const auto base = shards();
  if (key.size() != base.size() + 4 + config_suffix.size() &&
      key.size() != base.size() + 4 + lease_suffix.size()) {
    return std::nullopt;
  }
  if (key.substr(0, base.size()) != base) {
    return std::nullopt;
  }
  std::uint32_t shard = 0;
  for (const char digit : key.substr(base.size(), 4)) {
    if (digit < '0' || digit > '9') {
      return std::nullopt;
    }
    shard = shard * 10 + static_cast<std::uint32_t>(digit - '0');
  }
  const auto rest = key.substr(base.size() + 4);
  if (rest == config_suffix) {
    return std::pair{shard, false};
  }
  if (rest == lease_suffix) {
    return std::pair{shard, true};
  }
  return std::nullopt;
}

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 64) {
    return false;
  }
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) {
      return false;
    }
  }
  return true;
}

std::string encode(const cluster_config& config) {
  return json{{"shards", config.shards},
              {"hashVersion", config.hash_version},
              {"replicas", config.replicas},
              {"adminKey", config.admin_key}}
      .dump();
}

result<cluster_config> decode_config(std::string_view text) {
  auto parsed = parse(text, "the cluster's config");
  if (!parsed) {
    return parsed.error();
  }
  cluster_config config;
  const auto& value = *parsed;
  if (!value.contains("shards") || !value["shards"].is_number_unsigned() ||
      value["shards"].get<std::uint64_t>() == 0 ||
      value["shards"].get<std::uint64_t>() > 1024) {
    return make_error(errc::invalid_argument,
                      "the cluster's config names no shard count");
  }
  config.shards = value["shards"].get<std::uint32_t>();
  config.hash_version = value.value("hashVersion", 1u);
  config.admin_key = value.value("adminKey", std::string());
  config.replicas = value.value("replicas", 1u);
  if (config.replicas < 1 || config.replicas > 3) {
    return make_error(errc::invalid_argument,
                      "the cluster's config names a replica count outside "
                      "1 to 3");
  }
  return config;
}

std::string encode(const node_entry& node) {
  return json{{"id", node.id},
              {"http", node.http},
              {"peer", node.peer},
              {"lease", std::to_string(node.lease)},
              {"data", node.data}}
      .dump();
}

result<node_entry> decode_node(std::string_view text) {
  auto parsed = parse(text, "a node's entry");
  if (!parsed) {
    return parsed.error();
  }
  node_entry node;
  node.id = parsed->value("id", std::string());
  node.http = parsed->value("http", std::string());
  node.peer = parsed->value("peer", std::string());
  node.lease = std::strtoll(parsed->value("lease", "0").c_str(), nullptr, 10);
  node.data = parsed->value("data", std::string());
  return node;
}

std::string_view to_string(shard_state state) {
  return state == shard_state::moving ? "moving" : "active";
}

std::string encode(const shard_config& shard) {
  json value = {
      {"epoch", shard.epoch},
      {"owner", shard.owner.empty() ? json(nullptr) : json(shard.owner)},
      {"state", to_string(shard.state)}};
  if (!shard.target.empty()) {
    value["target"] = shard.target;
  }
  if (!shard.backups.empty()) {
    value["backups"] = shard.backups;
  }
  if (!shard.in_sync.empty()) {
    json in_sync = json::array();
    for (const auto& entry : shard.in_sync) {
      in_sync.push_back(
          {{"node", entry.node}, {"lease", std::to_string(entry.lease)}});
    }
    value["inSync"] = std::move(in_sync);
  }
  if (shard.accept_loss_at != 0) {
    value["acceptLossAt"] = shard.accept_loss_at;
  }
  if (!shard.accept_loss_by.empty()) {
    value["acceptLossBy"] = shard.accept_loss_by;
  }
  return value.dump();
}

result<shard_config> decode_shard(std::string_view text) {
  auto parsed = parse(text, "a shard's config");
  if (!parsed) {
    return parsed.error();
  }
  shard_config shard;
  shard.epoch = parsed->value("epoch", std::uint64_t{0});
  if (parsed->contains("owner") && (*parsed)["owner"].is_string()) {
    shard.owner = (*parsed)["owner"].get<std::string>();
  }
  shard.state = parsed->value("state", std::string("active")) == "moving"
                    ? shard_state::moving
                    : shard_state::active;
  shard.target = parsed->value("target", std::string());
  shard.accept_loss_at = parsed->value("acceptLossAt", std::uint64_t{0});
  shard.accept_loss_by = parsed->value("acceptLossBy", std::string());
  if (auto backups = parsed->find("backups");
      backups != parsed->end() && backups->is_array()) {
    for (const auto& node : *backups) {
      if (node.is_string()) {
        shard.backups.push_back(node.get<std::string>());
      }
    }
  }
  if (auto in_sync = parsed->find("inSync");
      in_sync != parsed->end() && in_sync->is_array()) {
    for (const auto& entry : *in_sync) {
      if (entry.is_object()) {
        shard.in_sync.push_back(
            {entry.value("node", std::string()),
             std::strtoll(entry.value("lease", "0").c_str(), nullptr, 10)});
      }
    }
  }
  return shard;
}

std::string encode(const shard_lease& lease) {
  return json{{"node", lease.node}, {"epoch", lease.epoch}}.dump();
}

result<shard_lease> decode_lease(std::string_view text) {
  auto parsed = parse(text, "a shard's lease");
  if (!parsed) {
    return parsed.error();
  }
  shard_lease lease;
  lease.node = parsed->value("node", std::string());
  lease.epoch = parsed->value("epoch", std::uint64_t{0});
  return lease;
}

bool shard_config::is_backup(std::string_view node) const {
  return std::find(backups.begin(), backups.end(), node) != backups.end();
}

bool shard_config::in_step(std::string_view node, std::int64_t lease) const {
  return std::any_of(in_sync.begin(), in_sync.end(), [&](const auto& entry) {
    return entry.node == node && entry.lease == lease;
  });
}

std::string_view shard_config::loss_accepted_by() const {
  if (accept_loss_at == 0 || accept_loss_at != epoch) {
    return {};
  }
  return accept_loss_by.empty() ? std::string_view(owner)
                                : std::string_view(accept_loss_by);
}

namespace {

std::uint64_t weight(std::uint32_t shard, const std::string& node) {
  std::uint64_t hash = fnv1a(node, 0xcbf29ce484222325ull);
  hash = fnv1a(std::to_string(shard), hash ^ 0xff);
  // A final mix, so that nearby shard numbers spread.
  hash ^= hash >> 33;
  hash *= 0xff51afd7ed558ccdull;
  hash ^= hash >> 33;
  return hash;
}

}  // namespace

std::vector<std::string> rendezvous_ranked(
    std::uint32_t shard, const std::vector<std::string>& nodes,
    std::size_t count) {
  std::vector<std::pair<std::uint64_t, std::string>> ranked;
  for (const auto& node : nodes) {
    ranked.emplace_back(weight(shard, node), node);
  }
  // Heaviest first; ties by name, so every node ranks alike.
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<std::string> out;
  for (std::size_t index = 0; index < ranked.size() && index < count; ++index) {
    if (out.empty() || out.back() != ranked[index].second) {
      out.push_back(ranked[index].second);
    }
  }
  return out;
}

std::string rendezvous(std::uint32_t shard,
                       const std::vector<std::string>& nodes) {
  auto ranked = rendezvous_ranked(shard, nodes, 1);
  return ranked.empty() ? std::string() : ranked.front();
}

}  // namespace durin::cluster
