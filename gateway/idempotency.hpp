// Request idempotency: the rules of seeds/001 for every mutating route.
//
//   begin()  decides what a keyed request does: proceed (its key is now held
//            by it), replay the kept first answer, or refuse (in-flight,
//            conflict, replay-withheld). It writes nothing.
//   finish() stores the outcome before the caller sends it: a successful
//            answer is kept (sync) or, when it carries a secret, only the
//            fact that it succeeded; a failed one keeps nothing.
//
// A key is held in memory by the request running it: within one process
// that is the truth, and a request holding a key for longer than `lease_ms`
// loses it. Nothing durable is written before the request acts, so a crash
// before it acts leaves the key free. A start writes its key's record in
// the run's admission batch (persistence::in_flight_marker / kept_answer): the
// in-flight marker naming the run, or for a start without wait the kept
// answer itself, so a run and its key's record are durable together. A
// marker of another instance is free at once (its process is gone), but a
// retry with the same request answers the run it names. Kept answers expire
// after `keep_ms` (24 h) and are swept by the node.
//
// Thread-safety: every method may be called from any thread; begin/finish
// block for one group commit (gateway worker threads only, never actors).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "client/http_message.hpp"
#include "durin/limits.hpp"
#include "gateway/wire_format.hpp"
#include "persistence/requests.hpp"

namespace durin::gateway {

using wire::http_request;
using wire::http_response;

inline constexpr std::string_view in_flight_message =
    "A request with this Idempotency-Key is still running. Retry after it "
    "answers (Retry-After), and you'll get its answer.";
inline constexpr std::string_view conflict_message =
    "Idempotency-Key was reused with a different request body. Use a fresh "
    "key or the original body.";

struct idempotency_options {
  std::int64_t lease_ms = 30'000;             // in-flight hold
  std::int64_t keep_ms = 24LL * 3600 * 1000;  // kept answers
  std::size_t key_bytes_max = limits::idempotency_key_bytes_max;
};

class idempotency {
 public:
  enum class outcome { proceed, answered };

  // What the request has made durable for its key before finish().
  enum class stored {
    nothing,  // finish keeps a 2xx answer, and keeps nothing otherwise
    marker,   // an admission may have written an in-flight marker naming
              // its run: a failed answer leaves it (the run may exist)
    answer,   // the answer sent is already kept (admission_answer)
  };

  struct decision {
    outcome kind = outcome::proceed;
    http_response response;        // when answered: replay or refusal
    std::uint64_t generation = 0;  // when proceed: pass to finish()
    // When proceed: the run an earlier holder of the key (a process that
    // crashed after admitting it) recorded in its marker; the request must
    // answer that run instead of starting another.
    std::string recorded_run_id;
  };

  // Where a key's records are kept: the request store of the key's shard.
  using store_router = std::function<persistence::request_store&(
      const persistence::request_address&)>;

  // REQUIRES: `requests` outlives this; `now_ms` is thread-safe.
  idempotency(persistence::request_store& requests, std::string instance_id,
              std::function<std::int64_t()> now_ms,
              idempotency_options options = {});
  // REQUIRES: every store the router answers outlives this.
  idempotency(store_router requests, std::string instance_id,
              std::function<std::int64_t()> now_ms,
              idempotency_options options = {});

  decision begin(const persistence::request_address& address,
                 const std::string& fingerprint);

  // Without taking the key: the kept answer (replay), the withheld or
  // conflict refusal when the key's request finished; nullopt otherwise.
  // One store read, no write: safe on an io thread.
  std::optional<http_response> peek(const persistence::request_address& address,
                                    const std::string& fingerprint);

  // The key as a start's admission carries it down (persistence::start_key):
  // the actor that builds the run's admission batch writes the marker or the
  // kept answer there (actors/admission.hpp).
  persistence::start_key start_key_of(
      const persistence::request_address& address,
      const std::string& fingerprint) const;

  // Stores what `response` means for the key (unless `already` says it is
  // durable), then releases it. Answers the response to send.
  http_response finish(const persistence::request_address& address,
                       const std::string& fingerprint, std::uint64_t generation,
                       http_response response, bool carries_secret,
                       stored already = stored::nothing);

  const std::string& instance_id() const { return instance_id_; }

 private:
  struct holder {
    std::string fingerprint;
    std::uint64_t generation = 0;
    std::int64_t lease_until_ms = 0;
  };

  static std::string map_key(const persistence::request_address& address);
  void release(const std::string& key, std::uint64_t generation);

  store_router requests_;
  std::string instance_id_;
  std::function<std::int64_t()> now_ms_;
  idempotency_options options_;
  std::mutex mutex_;
  std::unordered_map<std::string, holder> held_;  // guarded by mutex_
  std::uint64_t next_generation_ = 1;             // guarded by mutex_
};

}  // namespace durin::gateway
