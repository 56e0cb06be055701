// API keys and tenants across a cluster. Every node keeps them in a store
// of its own (gateway/server.cpp), and the nodes keep those stores in step:
//
//   A change (POST /v1/api-keys, DELETE /v1/api-keys/{id}, POST
//   /v1/tenants) is written durably here, then sent to every other node
//   the routing table names live (placement::ask_every_live_node, whether
//   or not the node serves a shard) as an internal merge, which each node
//   applies durably before it answers (auth::merge: a record it lacks is
//   added, a revocation wins over a live key, nothing makes a revoked key
//   live again; idempotent and commutative). The change answers 2xx only
//   once every one of them did. When one did not within
//   `api_options::key_spread_ms`, it answers 503 keys-not-propagated
//   naming the nodes that did and did not: a revocation is durable here
//   and on those that answered, and its retry (the same DELETE, or the
//   same Idempotency-Key) sends it to every node again; a new key (a
//   tenant's first key) is withdrawn, since its secret is shown once and
//   never stored, and the retry makes it anew.
//
//   A node that registers (it starts, or etcd let its lease expire while
//   it was paused or cut off) was absent from the others' tables and may
//   have missed changes. Until it has exchanged tables with every other
//   live node (its own sent, each one's merged here; revoked wins), it
//   answers every authenticated request 503 keys-not-synced, and a node
//   whose lease is not live answers so too (it is not in the others'
//   tables, so it gets no changes). A node asked for its table answers
//   only once its routing table lists the asker's registration, so that a
//   change it makes after that is sent to the asker, and one it made
//   before is in the table it answers.
//
// Internal routes, answered only when sent by another node (404 to a
// client): POST /v1/internal/key-records {"tenants", "apiKeys"} merges
// records; POST /v1/internal/key-table {"registration", "tenants",
// "apiKeys"} merges and answers this node's whole table. Records carry the
// secret's SHA-256, never a secret.
//
// key_sync is the part that runs by itself: a thread that notices a new
// registration and exchanges tables until every live node answered.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "gateway/api.hpp"
#include "gateway/placement.hpp"

namespace durin::gateway {

struct key_sync_options {
  // How often the thread looks at the node's registration, and retries an
  // exchange that some node did not answer.
  std::chrono::milliseconds poll{100};
  std::chrono::milliseconds retry{250};
  // How often a node still not in step says so on stderr.
  std::chrono::milliseconds complain{5000};
};

class key_sync {
 public:
  // REQUIRES: `routes` and `where` outlive the key_sync; `routes` uses
  // `where` as its placement.
  key_sync(api& routes, placement& where, key_sync_options options = {});
  ~key_sync();  // stop()

  // Blocks until this node's table is in step for its registration now, or
  // `limit` passed; answers whether it is.
  bool wait_in_step(std::chrono::milliseconds limit);
  // Ends the thread (an exchange in flight ends by its deadline first).
  void stop();

 private:
  void loop();

  api& routes_;
  placement& where_;
  key_sync_options options_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  std::thread thread_;  // last: it starts once every member above exists
};

}  // namespace durin::gateway
