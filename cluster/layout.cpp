#include "cluster/layout.hpp"

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

std::uint64_t fnv1a(std::string_view text, std::uint64_t hash) {
  for (const unsigned char byte : text) {
    hash ^= byte;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

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
  return config;
}

std::string encode(const node_entry& node) {
  return json{{"id", node.id},
              {"http", node.http},
              {"peer", node.peer},
              {"lease", std::to_string(node.lease)}}
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

std::string rendezvous(std::uint32_t shard,
                       const std::vector<std::string>& nodes) {
  std::string best;
  std::uint64_t best_weight = 0;
  for (const auto& node : nodes) {
    std::uint64_t hash = fnv1a(node, 0xcbf29ce484222325ull);
    hash = fnv1a(std::to_string(shard), hash ^ 0xff);
    // A final mix, so that nearby shard numbers spread.
    hash ^= hash >> 33;
    hash *= 0xff51afd7ed558ccdull;
    hash ^= hash >> 33;
    if (best.empty() || hash > best_weight ||
        (hash == best_weight && node < best)) {
      best = node;
      best_weight = hash;
    }
  }
  return best;
}

}  // namespace durin::cluster
