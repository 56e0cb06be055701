#include "cluster/search_agreement.hpp"

#include "cluster/etcd.hpp"

namespace durin::cluster {

namespace {

std::string key_of(const std::string& prefix, std::string_view tenant,
                   std::string_view name) {
  return prefix + "search-types/" + std::to_string(tenant.size()) + ":" +
         std::string(tenant) + "/" + std::string(name);
}

result<std::optional<search_attribute_type>> type_in(const std::vector<kv>& kvs,
                                                     std::string_view name) {
  if (kvs.empty()) {
    return std::optional<search_attribute_type>();
  }
  auto type = parse_search_attribute_type(kvs.front().value);
  if (!type) {
    return make_error(errc::unavailable,
                      "etcd holds no known type for search attribute '" +
                          std::string(name) + "'");
  }
  return std::optional<search_attribute_type>(*type);
}

}  // namespace

result<services::search_types::agreement> search_agreement(
    const std::string& endpoints, const layout& keys, std::int64_t timeout_ms) {
  auto made = etcd_client::make(endpoints, timeout_ms);
  if (!made) {
    return made.error();
  }
  auto client = std::make_shared<etcd_client>(std::move(*made));
  return services::search_types::agreement(
      [client, prefix = keys.prefix()](
          std::string_view tenant, std::string_view name,
          std::optional<search_attribute_type> want)
          -> result<std::optional<search_attribute_type>> {
        auto key = key_of(prefix, tenant, name);
        if (!want) {
          auto read = client->range(key);
          if (!read) {
            return make_error(errc::unavailable, read.error().message);
          }
          return type_in(read->kvs, name);
        }
        auto decided = client->txn(
            {{.key = key, .what = compare::target::create, .number = 0}},
            {{.what = request_op::kind::put,
              .key = key,
              .value = std::string(to_string(*want))}},
            {{.what = request_op::kind::range, .key = key}});
        if (!decided) {
          // Indefinite: the put may have landed; the next claim reads it.
          return make_error(errc::unavailable, decided.error().message);
        }
        if (decided->succeeded) {
          return want;
        }
        return type_in(decided->ranges.empty() ? std::vector<kv>{}
                                               : decided->ranges.front(),
                       name);
      });
}

}  // namespace durin::cluster
