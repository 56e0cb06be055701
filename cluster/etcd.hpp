// A blocking client of etcd's v3 JSON gateway (POST /v3/..., etcd 3.4), for
// the cluster's configuration: membership, shard ownership and its fencing
// tokens. It is never on a request's path. One client is one keep-alive
// connection behind a mutex, so it is thread-safe but serialises its callers;
// make one client per independent path (keepalives apart from ownership
// txns). Errors are values; nothing here throws.
//
// Transport failures fail the call (shutting-down, or timeout when no answer
// came within `timeout_ms`; the message names the endpoint) and move the
// client to the next endpoint of its list for the next call. A failed write's
// outcome is indefinite: it may have landed. The client never retries on its
// own, so a create-if-absent txn never reports a loss it actually won; the
// caller re-reads and decides. Answers are at most 64 MiB
// (client::http_connection's body limit).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "durin/error.hpp"

namespace durin::cluster {

// One key as etcd stores it. Revisions are cluster-wide and strictly
// increasing, so `create_revision` can serve as a fencing token.
struct kv {
  std::string key;
  std::string value;
  std::int64_t create_revision = 0;
  std::int64_t mod_revision = 0;
  std::int64_t version = 0;  // puts since creation; 0: the key is absent
  std::int64_t lease = 0;    // 0: none
};

struct range_result {
  std::vector<kv> kvs;        // in key order (bytewise)
  std::int64_t revision = 0;  // the store's revision this read saw
};

// One condition of a txn: `what` of `key` compared to `number` (or to `value`
// for target::value). A key that is absent has revisions, version and lease
// 0, so `create == 0` means "absent".
struct compare {
  enum class target : std::uint8_t { create, mod, version, value, lease };
  enum class op : std::uint8_t { equal, greater, less, not_equal };
  std::string key;
  target what = target::mod;
  op is = op::equal;
  std::int64_t number = 0;
  std::string value;
};

// One operation of a txn branch. `prefix` makes a range or an erase cover
// every key that starts with `key`.
struct request_op {
  enum class kind : std::uint8_t { put, range, erase };
  kind what = kind::put;
  std::string key;
  std::string value;       // put only
  std::int64_t lease = 0;  // put only; 0: none
  bool prefix = false;     // range and erase only
};

struct txn_result {
  bool succeeded = false;  // every compare held: `then` ran, else `otherwise`
  std::int64_t revision = 0;  // the store's revision after the txn
  // The kvs of each range op of the branch taken, in the order of the ops.
  std::vector<std::vector<kv>> ranges;
};

struct lease {
  std::int64_t id = 0;
  std::int64_t ttl_s = 0;  // as granted; etcd raises it to its minimum TTL
};

// etcd's range end for "every key starting with `prefix`": the prefix with
// its last byte that is not 0xff incremented and what follows dropped; "\0"
// (every key from `prefix` on) when there is no such byte.
std::string prefix_end(std::string_view prefix);

class etcd_client {
 public:
  // `endpoints`: comma-separated client URLs, "http://127.0.0.1:2379,..."; the
  // first is used first. `timeout_ms` limits the connect, the send and the
  // answer of each call. Does no I/O: a call connects when it needs to, so a
  // client made while etcd is down works once it is up. invalid-argument when
  // the list is empty or an entry is not http://host:port.
  static result<etcd_client> make(std::string_view endpoints,
                                  std::int64_t timeout_ms = 2000);

  etcd_client(etcd_client&&) noexcept;
  etcd_client& operator=(etcd_client&&) noexcept;
  ~etcd_client();

  // A new lease of `ttl_s` seconds (etcd's minimum applies).
  result<lease> grant(std::int64_t ttl_s);
  // Renews the lease; the TTL it has again, in seconds. invalid-argument when
  // etcd no longer has the lease (it expired or was revoked): its keys are
  // gone, and the caller must grant a new one and acquire again.
  result<std::int64_t> keep_alive(std::int64_t lease_id);
  // Seconds the lease has left; 0 when etcd no longer has it.
  result<std::int64_t> time_to_live(std::int64_t lease_id);
  // Ends the lease and deletes its keys now. invalid-argument when etcd has
  // no such lease.
  status revoke(std::int64_t lease_id);

  // The key, or with `prefix` every key starting with it; kvs is empty when
  // there is none.
  result<range_result> range(std::string_view key, bool prefix = false);
  // Writes the key (attached to `lease` unless 0); the revision of the write.
  result<std::int64_t> put(std::string_view key, std::string_view value,
                           std::int64_t lease = 0);
  // Deletes the key (or every key under the prefix); how many were deleted.
  result<std::int64_t> erase(std::string_view key, bool prefix = false);
  // If every compare of `when` holds, runs `then`, else `otherwise`; all of
  // it atomically at one revision. invalid-argument when etcd refuses the
  // txn (e.g. two puts of one key).
  result<txn_result> txn(const std::vector<compare>& when,
                         const std::vector<request_op>& then,
                         const std::vector<request_op>& otherwise = {});
  // Drops the history before `revision`: watches and reads at older
  // revisions fail from then on. invalid-argument when `revision` is already
  // compacted or lies in the future.
  status compact(std::int64_t revision);

 private:
  struct state;
  explicit etcd_client(std::unique_ptr<state> state);

  std::unique_ptr<state> state_;
};

}  // namespace durin::cluster
