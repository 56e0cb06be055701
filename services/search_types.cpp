#include "services/search_types.hpp"

#include "durin/limits.hpp"

namespace durin::services {

search_types::~search_types() {
  stop_jobs();
}

std::vector<std::pair<std::string, search_attribute_type>>
search_types::unknown_locked(std::string_view tenant,
                             const search_attributes& attributes) const {
  std::vector<std::pair<std::string, search_attribute_type>> unknown;
  for (const auto& [name, value] : attributes) {
    if (!known_locked(tenant, name)) {
      unknown.emplace_back(name, value.type);
    }
  }
  return unknown;
}

void search_types::agree(std::string_view tenant,
                         const search_attributes& attributes,
                         std::function<void(status)> then) {
  {
    std::lock_guard lock(mutex_);
    auto unknown = unknown_locked(tenant, attributes);
    if (agree_ && !unknown.empty()) {
      if (!worker_.joinable()) {
        worker_ = std::thread([this] { run_jobs(); });
      }
      jobs_.push_back(
          {std::string(tenant), std::move(unknown), std::move(then)});
      jobs_ready_.notify_one();
      return;
    }
  }
  then({});
}

status search_types::claim(std::string_view tenant,
                           const search_attributes& attributes) {
  if (attributes.empty()) {
    return {};
  }
  std::unique_lock lock(mutex_);
  auto unknown = unknown_locked(tenant, attributes);
  if (agree_ && !unknown.empty()) {
    lock.unlock();
    agree(tenant, attributes, [](status) {});
    return make_error(errc::unavailable,
                      "the type of search attribute '" + unknown.front().first +
                          "' is being agreed with the cluster");
  }
  auto& known = tenants_[std::string(tenant)];
  for (const auto& [name, value] : attributes) {
    auto found = known.find(name);
    if (found != known.end() && found->second != value.type) {
      return make_error(errc::invalid_argument,
                        "search attribute '" + name + "' is " +
                            std::string(to_string(found->second)) +
                            " in this tenant; got a " +
                            std::string(to_string(value.type)));
    }
  }
  if (known.size() + unknown.size() >
      limits::search_attribute_names_per_tenant_max) {
    return make_error(
        errc::invalid_argument,
        "a tenant uses at most " +
            std::to_string(limits::search_attribute_names_per_tenant_max) +
            " search attribute names");
  }
  for (const auto& [name, value] : attributes) {
    known.emplace(name, value.type);
  }
  return {};
}

void search_types::run_jobs() {
  std::unique_lock lock(mutex_);
  for (;;) {
    jobs_ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (stopping_) {
      return;  // stop_jobs answers what is left
    }
    auto work = std::move(jobs_.front());
    jobs_.pop_front();
    auto agree = agree_;
    lock.unlock();
    auto agreed = agree_now(agree, work);
    work.then(std::move(agreed));
    lock.lock();
  }
}

// Outside the lock: each agreement is a round trip to etcd. What one fixes
// is fixed cluster-wide, so it is remembered even if a later name fails.
status search_types::agree_now(const agreement& agree, const job& work) {
  for (const auto& [name, want] : work.wanted) {
    {
      std::lock_guard lock(mutex_);
      if (known_locked(work.tenant, name) || !agree) {
        continue;  // agreed by an earlier job meanwhile
      }
    }
    auto fixed = agree(work.tenant, name, want);
    if (!fixed) {
      return make_error(errc::unavailable,
                        "the type of search attribute '" + name +
                            "' could not be agreed with the cluster: " +
                            fixed.error().message);
    }
    std::lock_guard lock(mutex_);
    tenants_[work.tenant].emplace(name, fixed->value_or(want));
  }
  return {};
}

void search_types::stop_jobs() {
  std::thread worker;
  std::deque<job> left;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    worker = std::move(worker_);
    left.swap(jobs_);
  }
  jobs_ready_.notify_all();
  if (worker.joinable()) {
    worker.join();
  }
  for (auto& work : left) {
    work.then(make_error(errc::unavailable,
                         "the node left the cluster before the type of a "
                         "search attribute was agreed"));
  }
  std::lock_guard lock(mutex_);
  stopping_ = false;
}

void search_types::learn(std::string_view tenant, std::string_view name,
                         search_attribute_type type) {
  std::lock_guard lock(mutex_);
  tenants_[std::string(tenant)].emplace(std::string(name), type);
}

std::optional<search_attribute_type> search_types::known_locked(
    std::string_view tenant, std::string_view name) const {
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

std::optional<search_attribute_type> search_types::type_of(
    std::string_view tenant, std::string_view name) const {
  agreement agree;
  {
    std::lock_guard lock(mutex_);
    if (auto type = known_locked(tenant, name)) {
      return type;
    }
    agree = agree_;
  }
  if (!agree) {
    return std::nullopt;
  }
  auto fixed = agree(tenant, name, std::nullopt);
  if (!fixed || !*fixed) {
    return std::nullopt;
  }
  std::lock_guard lock(mutex_);
  return tenants_[std::string(tenant)]
      .emplace(std::string(name), **fixed)
      .first->second;
}

void search_types::set_agreement(agreement agree) {
  bool leaving = !agree;
  {
    std::lock_guard lock(mutex_);
    agree_ = std::move(agree);
  }
  if (leaving) {
    stop_jobs();
  }
}

}  // namespace durin::services
