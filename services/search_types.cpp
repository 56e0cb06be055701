#include "services/search_types.hpp"

#include <cstdio>

#include "durin/limits.hpp"

namespace durin::services {

namespace {

// The (tenant, name) entry of search_types::tenants_, or null.
template <class Tenants>
auto entry_of(Tenants& tenants, std::string_view tenant, std::string_view name)
    -> decltype(&tenants.begin()->second.begin()->second) {
  auto known = tenants.find(tenant);
  if (known == tenants.end()) {
    return nullptr;
  }
  auto found = known->second.find(name);
  return found == known->second.end() ? nullptr : &found->second;
}

}  // namespace

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

void search_types::push_job_locked(
    std::string tenant,
    std::vector<std::pair<std::string, search_attribute_type>> wanted,
    std::function<void(status)> then) {
  if (!worker_.joinable()) {
    worker_ = std::thread([this] { run_jobs(); });
  }
  jobs_.push_back({std::move(tenant), std::move(wanted), std::move(then)});
  jobs_ready_.notify_one();
}

void search_types::confirm_own_locked() {
  for (const auto& [tenant, known] : tenants_) {
    std::vector<std::pair<std::string, search_attribute_type>> own;
    for (const auto& [name, fixed] : known) {
      if (!fixed.agreed) {
        own.emplace_back(name, fixed.type);
      }
    }
    if (!own.empty()) {
      push_job_locked(tenant, std::move(own), [](status) {});
    }
  }
}

void search_types::agree(std::string_view tenant,
                         const search_attributes& attributes,
                         std::function<void(status)> then) {
  {
    std::lock_guard lock(mutex_);
    auto unknown = unknown_locked(tenant, attributes);
    if (agree_ && !unknown.empty()) {
      push_job_locked(std::string(tenant), std::move(unknown), std::move(then));
      return;
    }
  }
  then({});
}

namespace {

status type_mismatch(const std::string& name, search_attribute_type fixed,
                     search_attribute_type got) {
  return make_error(
      errc::invalid_argument,
      "search attribute '" + name + "' is " + std::string(to_string(fixed)) +
          " in this tenant; got a " + std::string(to_string(got)));
}

}  // namespace

status search_types::check(std::string_view tenant,
                           const search_attributes& attributes) const {
  for (const auto& [name, value] : attributes) {
    if (auto fixed = type_of(tenant, name); fixed && *fixed != value.type) {
      return type_mismatch(name, *fixed, value.type);
    }
  }
  return {};
}

status search_types::claim(std::string_view tenant,
                           const search_attributes& attributes) {
  return claim_as(tenant, attributes, false);
}

status search_types::claim_for_start(std::string_view tenant,
                                     const search_attributes& attributes) {
  return claim_as(tenant, attributes, true);
}

void search_types::settle_start(std::string_view tenant,
                                const search_attributes& attributes,
                                bool admitted) {
  std::lock_guard lock(mutex_);
  auto known = tenants_.find(tenant);
  if (known == tenants_.end()) {
    return;
  }
  for (const auto& [name, value] : attributes) {
    auto found = known->second.find(name);
    if (found == known->second.end() || !found->second.provisional) {
      continue;
    }
    auto& fixed = found->second;
    --fixed.unsettled;
    if (admitted) {
      fixed.provisional = false;
    } else if (fixed.unsettled == 0) {
      known->second.erase(found);
    }
  }
}

status search_types::claim_as(std::string_view tenant,
                              const search_attributes& attributes,
                              bool for_start) {
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
  std::size_t added = 0;
  for (const auto& [name, value] : attributes) {
    auto found = known.find(name);
    if (found == known.end()) {
      ++added;
    } else if (found->second.type != value.type) {
      return type_mismatch(name, found->second.type, value.type);
    }
  }
  if (known.size() + added > limits::search_attribute_names_per_tenant_max) {
    return make_error(
        errc::invalid_argument,
        "a tenant uses at most " +
            std::to_string(limits::search_attribute_names_per_tenant_max) +
            " search attribute names");
  }
  for (const auto& [name, value] : attributes) {
    auto [at, added] = known.emplace(name, fixed_type{value.type});
    auto& fixed = at->second;
    if (!for_start) {
      fixed.provisional = false;
    } else if (added || fixed.provisional) {
      fixed.provisional = true;
      ++fixed.unsettled;
    }
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
    search_attribute_type proposed = want;
    {
      std::lock_guard lock(mutex_);
      if (known_locked(work.tenant, name) || !agree) {
        continue;  // agreed by an earlier job meanwhile
      }
      // This node's stored runs have a say before any new claim.
      proposed = own_locked(work.tenant, name).value_or(want);
    }
    auto fixed = agree(work.tenant, name, proposed);
    if (!fixed) {
      return make_error(errc::unavailable,
                        "the type of search attribute '" + name +
                            "' could not be agreed with the cluster: " +
                            fixed.error().message);
    }
    std::lock_guard lock(mutex_);
    (void)agreed_locked(work.tenant, name, fixed->value_or(proposed));
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
  auto [at, added] = tenants_[std::string(tenant)].emplace(std::string(name),
                                                           fixed_type{type});
  at->second.provisional = false;  // a stored run has it
  if (added && agree_) {
    // A shard recovered on a cluster node: its runs' type is proposed now,
    // before a claim can fix another.
    push_job_locked(std::string(tenant), {{std::string(name), type}},
                    [](status) {});
  }
}

std::optional<search_attribute_type> search_types::known_locked(
    std::string_view tenant, std::string_view name) const {
  const auto* fixed = entry_of(tenants_, tenant, name);
  if (fixed == nullptr || (agree_ && !fixed->agreed)) {
    return std::nullopt;
  }
  return fixed->type;
}

std::optional<search_attribute_type> search_types::own_locked(
    std::string_view tenant, std::string_view name) const {
  const auto* fixed = entry_of(tenants_, tenant, name);
  if (fixed == nullptr || fixed->agreed) {
    return std::nullopt;
  }
  return fixed->type;
}

search_attribute_type search_types::agreed_locked(
    std::string_view tenant, std::string_view name,
    search_attribute_type type) const {
  auto& known = tenants_[std::string(tenant)];
  auto [at, added] = known.try_emplace(std::string(name), fixed_type{type});
  auto& fixed = at->second;
  if (!added && !fixed.agreed && fixed.type != type) {
    std::fprintf(stderr,
                 "durin: search attribute '%.*s' of tenant '%.*s' is %s in "
                 "the cluster; runs stored here have it as %s and match no "
                 "query on it\n",
                 static_cast<int>(name.size()), name.data(),
                 static_cast<int>(tenant.size()), tenant.data(),
                 std::string(to_string(type)).c_str(),
                 std::string(to_string(fixed.type)).c_str());
  }
  fixed = {.type = type, .agreed = true};
  misses_.erase({std::string(tenant), std::string(name)});
  return type;
}

std::optional<search_attribute_type> search_types::type_of(
    std::string_view tenant, std::string_view name) const {
  agreement agree;
  std::optional<search_attribute_type> own;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mutex_);
    if (auto type = known_locked(tenant, name)) {
      return type;
    }
    agree = agree_;
    own = own_locked(tenant, name);
    if (!agree) {
      return std::nullopt;
    }
    auto missed = misses_.find({std::string(tenant), std::string(name)});
    if (!own && missed != misses_.end() && missed->second > now) {
      return std::nullopt;
    }
  }
  // With a type of its own the node proposes it (as joining would).
  auto fixed = agree(tenant, name, own);
  if (!fixed) {
    return own;  // the cluster could not be asked
  }
  std::lock_guard lock(mutex_);
  if (!*fixed) {
    if (misses_.size() >= misses_max) {
      misses_.clear();
    }
    misses_[{std::string(tenant), std::string(name)}] = now + miss_ttl;
    return std::nullopt;
  }
  return agreed_locked(tenant, name, **fixed);
}

void search_types::set_agreement(agreement agree) {
  bool leaving = !agree;
  {
    std::lock_guard lock(mutex_);
    agree_ = std::move(agree);
    misses_.clear();
    if (!leaving) {
      confirm_own_locked();
    }
  }
  if (leaving) {
    stop_jobs();
  }
}

}  // namespace durin::services
