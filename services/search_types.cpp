#include "services/search_types.hpp"

#include "durin/limits.hpp"

namespace durin::services {

std::string search_types::claim(std::string_view tenant,
                                const search_attributes& attributes) {
  if (attributes.empty()) {
    return {};
  }
  std::lock_guard lock(mutex_);
  auto& known = tenants_[std::string(tenant)];
  std::size_t adding = 0;
  for (const auto& [name, value] : attributes) {
    auto found = known.find(name);
    if (found == known.end()) {
      ++adding;
    } else if (found->second != value.type) {
      return "search attribute '" + name + "' is " +
             std::string(to_string(found->second)) + " in this tenant; got a " +
             std::string(to_string(value.type));
    }
  }
  if (known.size() + adding > limits::search_attribute_names_per_tenant_max) {
    return "a tenant uses at most " +
           std::to_string(limits::search_attribute_names_per_tenant_max) +
           " search attribute names";
  }
  for (const auto& [name, value] : attributes) {
    known.emplace(name, value.type);
  }
  return {};
}

void search_types::learn(std::string_view tenant, std::string_view name,
                         search_attribute_type type) {
  std::lock_guard lock(mutex_);
  tenants_[std::string(tenant)].emplace(std::string(name), type);
}

std::optional<search_attribute_type> search_types::type_of(
    std::string_view tenant, std::string_view name) const {
  std::lock_guard lock(mutex_);
  auto known = tenants_.find(tenant);
  if (known == tenants_.end()) {
    return std::nullopt;
  }
  auto found = known->second.find(name);
  if (found == known->second.end()) {
    return std::nullopt;
  }
  return found->second;
}

}  // namespace durin::services
