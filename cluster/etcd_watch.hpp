// One watch of a key or a prefix through etcd's JSON gateway (POST
// /v3/watch, a stream of NDJSON lines), on a thread of its own. It delivers
// every change from its start revision on, exactly once and in revision
// order, across broken connections: it reconnects (backoff 50 ms doubling
// to 1 s, the next endpoint each time) and resumes at the revision after the
// last event it delivered. When that cannot be done, because etcd compacted
// the revisions it would resume at or cancelled the watch, it calls
// `on_lost` once and ends; the owner then re-reads with etcd_client::range
// and starts a new watch at range_result::revision + 1.
//
// Both callbacks run on the watch's thread, one at a time; they must not
// throw and must not destroy the watch. Destruction aborts whatever the
// thread waits on (a read, a connect, a backoff) and joins it at once,
// after the callback that runs, if one does; no callback runs once the
// destructor has returned.
//
// Each response line is at most 64 MiB (watch_line_bytes_max); a longer one
// ends the watch with on_lost rather than resuming into it again. A peer
// that vanishes without closing the connection is noticed by TCP keepalive
// within about 8 s.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/etcd.hpp"
#include "durin/error.hpp"

namespace durin::cluster {

inline constexpr std::size_t watch_line_bytes_max = 64 << 20;

struct watch_event {
  enum class type : std::uint8_t { put, erase };
  type what = type::put;
  // For an erase, the key and the revision of the delete only.
  kv now;
  // With watch_options::prev_kv, the key as it was before this event (an
  // empty key when it did not exist); otherwise empty.
  kv previous;
};

struct watch_options {
  std::string key;
  bool prefix = false;  // every key that starts with `key`
  // The first revision to deliver; 0: changes after the watch is made.
  std::int64_t start_revision = 0;
  bool prev_kv = false;
  // The limit of each connection's setup: connecting, sending the watch's
  // request and reading etcd's answer header, together. Default 2000.
  std::int64_t timeout_ms = 2000;
};

class etcd_watch {
 public:
  // `events` in revision order; `revision` is the mod_revision of the last
  // one: the watched keys are known up to and including that revision.
  using events_handler = std::function<void(std::vector<watch_event> events,
                                            std::int64_t revision)>;
  using lost_handler = std::function<void()>;

  // Starts the watch's thread; the first connection is made there. `endpoints`
  // as for etcd_client::make. invalid-argument for a malformed endpoint list,
  // an empty key, a negative start revision or missing callbacks.
  static result<etcd_watch> start(std::string_view endpoints,
                                  watch_options options,
                                  events_handler on_events,
                                  lost_handler on_lost);

  etcd_watch(etcd_watch&&) noexcept;
  etcd_watch& operator=(etcd_watch&&) = delete;
  ~etcd_watch();

  // How many times etcd confirmed this watch (the first connection, then one
  // per resume): for metrics, and for tests that prove a resume happened.
  std::int64_t streams_created() const;

 private:
  class runner;
  explicit etcd_watch(std::unique_ptr<runner> runner);

  std::unique_ptr<runner> runner_;
};

}  // namespace durin::cluster
