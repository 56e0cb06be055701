// The type of every search attribute name, per tenant, as this node knows
// it: fixed by the name's first use (a start's attributes, a flow's upsert)
// and seeded at open, and after a shard is recovered, from the stored runs
// (store::search_attribute_types). Starts and upserts claim their types
// here before anything is written; queries ask it to type their literals.
//
// In a cluster the first use of a name is agreed cluster-wide through an
// `agreement` (cluster/search_agreement.hpp: a create-if-absent in etcd),
// asked once per (tenant, name) a node does not know yet; every node then
// holds the type the first claimant anywhere fixed, so two nodes never
// type one name differently. Without an agreement (one node) the node's
// own first use fixes it.
//
// Thread-safety: every method may be called from any thread (one mutex,
// never held across an agreement's call). claim and agree never block on
// the cluster: agreements run on the types' own thread (started with the
// first agreement), so that run actors and the gateway's handlers do not
// wait for etcd. type_of does, for a name the node does not know: lists
// run on threads that may block.
//
// A type this node fixed alone (its stored runs' types, learned at open or
// when a shard is recovered; or a claim while it had no agreement) counts
// as unknown while the node has an agreement, until the cluster confirms
// it: a node that ran alone, then joined a cluster, or a shard moved in,
// types nothing by its own history where the cluster fixed another type.
// Such a type is what the node proposes when it asks, before any claim's,
// and the cluster's answer replaces it (a difference is logged: the runs
// stored with the other type then match no typed literal of that name).
// Joining (set_agreement) asks for every such type at once, in the
// background.
//
// Not durable by itself: the run records (and in a cluster, etcd) are. A
// type claimed only by starts that were all refused is forgotten (a node
// restarted would not know it); one claimed by an upsert whose write
// fails stays fixed.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "durin/error.hpp"
#include "durin/search.hpp"

namespace durin::services {

class search_types {
 public:
  // With `want`: the type fixed for the name cluster-wide, which is `want`
  // when the name had none. Without: the type fixed, or nullopt when none
  // is. An error (unavailable) when the cluster could not be asked.
  using agreement = std::function<result<std::optional<search_attribute_type>>(
      std::string_view tenant, std::string_view name,
      std::optional<search_attribute_type> want)>;

  search_types() = default;
  search_types(const search_types&) = delete;
  search_types& operator=(const search_types&) = delete;
  ~search_types();

  // Calls `then` with ok once every name of `attributes` has a type this
  // node knows for `tenant`: at once, on the calling thread, when it knows
  // them all or has no agreement; else on the types' thread, after asking
  // the cluster, with unavailable when it did not answer. Fixes nothing
  // locally; claim does. `then` must not block.
  void agree(std::string_view tenant, const search_attributes& attributes,
             std::function<void(status)> then);

  // Fixes the type of each of `attributes` for `tenant` where it is new;
  // ok when every type agrees with the one fixed, else invalid-argument
  // naming the first attribute that does not (nothing is fixed then), or
  // the limit search_attribute_names_per_tenant_max. Unavailable, at once,
  // when a name must be agreed with the cluster first: that agreement is
  // then under way, so that a claim a little later finds the name known.
  status claim(std::string_view tenant, const search_attributes& attributes);

  // As claim, for a start not yet admitted: a name it fixes stays fixed
  // only once settle_start says its run is (or may be) admitted, or
  // something else (a stored run, an upsert, the cluster) fixes it too.
  // Until then queries and other claims see the type as fixed.
  status claim_for_start(std::string_view tenant,
                         const search_attributes& attributes);
  // The outcome of a start whose claim_for_start succeeded.
  void settle_start(std::string_view tenant,
                    const search_attributes& attributes, bool admitted);

  // As claim, fixing nothing: invalid-argument naming the first of
  // `attributes` whose type differs from the one fixed for `tenant`. For
  // what will be claimed later (a schedule's action); may ask the cluster,
  // as type_of does.
  status check(std::string_view tenant,
               const search_attributes& attributes) const;

  // As claim, from stored runs: never refuses (the store holds it anyway);
  // a name already fixed keeps its type.
  void learn(std::string_view tenant, std::string_view name,
             search_attribute_type type);

  // The name's type; a name unknown here is asked of the agreement, if any
  // (and remembered once fixed). nullopt when no type is fixed or the
  // cluster could not be asked (then this node's own type, if it has
  // one). That no type is fixed is remembered for miss_ttl, so that lists
  // naming a name nobody uses ask etcd once a second, not each time; a
  // name fixed meanwhile by another node is seen within that time.
  static constexpr std::chrono::milliseconds miss_ttl{1000};
  std::optional<search_attribute_type> type_of(std::string_view tenant,
                                               std::string_view name) const;

  // Set by a cluster node before it serves (which asks the cluster for
  // every type this node fixed alone); null again when it leaves, which
  // answers the agreements still queued unavailable and waits for the one
  // under way.
  void set_agreement(agreement agree);

 private:
  struct fixed_type {
    search_attribute_type type;
    bool agreed = false;  // by the cluster; else by this node alone
    // Fixed only by starts not yet settled (`unsettled` of them): erased
    // when the last is refused.
    bool provisional = false;
    std::uint32_t unsettled = 0;
  };
  // claim (lasting) and claim_for_start (provisional).
  status claim_as(std::string_view tenant, const search_attributes& attributes,
                  bool for_start);
  using names = std::map<std::string, fixed_type, std::less<>>;
  // The type, if fixed and (with an agreement) agreed.
  std::optional<search_attribute_type> known_locked(
      std::string_view tenant, std::string_view name) const;
  // The type this node fixed alone, if any: what it proposes.
  std::optional<search_attribute_type> own_locked(std::string_view tenant,
                                                  std::string_view name) const;
  // Remembers what the cluster fixed, replacing this node's own type.
  search_attribute_type agreed_locked(std::string_view tenant,
                                      std::string_view name,
                                      search_attribute_type type) const;
  // A job that asks for every type this node fixed alone.
  void confirm_own_locked();
  void push_job_locked(
      std::string tenant,
      std::vector<std::pair<std::string, search_attribute_type>> wanted,
      std::function<void(status)> then);

  struct job {
    std::string tenant;
    std::vector<std::pair<std::string, search_attribute_type>> wanted;
    std::function<void(status)> then;
  };
  // The names of `attributes` the node does not know for `tenant`.
  std::vector<std::pair<std::string, search_attribute_type>> unknown_locked(
      std::string_view tenant, const search_attributes& attributes) const;
  void run_jobs();
  status agree_now(const agreement& agree, const job& work);
  void stop_jobs();

  mutable std::mutex mutex_;
  mutable std::map<std::string, names, std::less<>> tenants_;
  // (tenant, name) the cluster had no type for, and until when to believe
  // it. Cleared when it grows past misses_max.
  static constexpr std::size_t misses_max = 4096;
  mutable std::map<std::pair<std::string, std::string>,
                   std::chrono::steady_clock::time_point>
      misses_;
  agreement agree_;
  std::deque<job> jobs_;
  std::condition_variable jobs_ready_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace durin::services
