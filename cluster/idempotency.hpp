// Request idempotency: the rules of seeds/001 for every mutating route.
//
//   begin()  decides what a keyed request does: proceed (its key is now held
//            by it, durably, before anything starts), replay the kept first
//            answer, or refuse (in-flight, conflict, replay-withheld).
//   finish() stores the outcome before the caller sends it: a successful
//            answer is kept (sync) or, when it carries a secret, only the
//            fact that it succeeded; a failed one frees the key (sync).
//
// A key is held in memory by the request running it (the truth within this
// process) and durably by an in-flight marker naming this process's
// `instance_id`. A marker of another instance is free at once (its process
// is gone); a request holding a key for longer than `lease_ms` loses it.
// Kept answers expire after `keep_ms` (24 h) and are swept by the node.
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

#include "cluster/http_message.hpp"
#include "persistence/requests.hpp"

namespace durin::cluster {

inline constexpr std::string_view in_flight_message =
    "A request with this Idempotency-Key is still running. Retry after it "
    "answers (Retry-After), and you'll get its answer.";
inline constexpr std::string_view conflict_message =
    "Idempotency-Key was reused with a different request body. Use a fresh "
    "key or the original body.";

struct idempotency_options {
  std::int64_t lease_ms = 30'000;             // in-flight hold
  std::int64_t keep_ms = 24LL * 3600 * 1000;  // kept answers
  std::size_t key_bytes_max = 255;            // the header's value
};

// Formats `ms` (since the epoch) as RFC 3339 UTC with milliseconds:
// 2026-11-29T20:17:00.123Z.
std::string rfc3339_ms(std::int64_t ms);

class idempotency {
 public:
  enum class outcome { proceed, answered };

  struct decision {
    outcome kind = outcome::proceed;
    http_response response;        // when answered: replay or refusal
    std::uint64_t generation = 0;  // when proceed: pass to finish()
    // When proceed: the run an earlier holder of the key (a process that
    // crashed after admitting it) recorded with note_run; the request must
    // answer that run instead of starting another.
    std::string recorded_run_id;
  };

  // REQUIRES: `requests` outlives this; `now_ms` is thread-safe.
  idempotency(persistence::request_store& requests, std::string instance_id,
              std::function<std::int64_t()> now_ms,
              idempotency_options options = {});

  decision begin(const persistence::request_address& address,
                 const std::string& fingerprint);

  // Without taking the key: the kept answer (replay), the withheld or
  // conflict refusal when the key's request finished; nullopt otherwise.
  // One store read, no write: safe on an io thread.
  std::optional<http_response> peek(const persistence::request_address& address,
                                    const std::string& fingerprint);

  // Records in the key's in-flight marker (sync) that the request admitted
  // `run_id`, so that a retry after a crash answers that run.
  status note_run(const persistence::request_address& address,
                  const std::string& fingerprint, const std::string& run_id);

  // Stores what `response` means for the key, then releases it. Answers the
  // response to send (a storage failure while keeping becomes a 503).
  http_response finish(const persistence::request_address& address,
                       const std::string& fingerprint, std::uint64_t generation,
                       http_response response, bool carries_secret);

  const std::string& instance_id() const { return instance_id_; }

 private:
  struct holder {
    std::string fingerprint;
    std::uint64_t generation = 0;
    std::int64_t lease_until_ms = 0;
  };

  static std::string map_key(const persistence::request_address& address);
  void release(const std::string& key, std::uint64_t generation);

  persistence::request_store& requests_;
  std::string instance_id_;
  std::function<std::int64_t()> now_ms_;
  idempotency_options options_;
  std::mutex mutex_;
  std::unordered_map<std::string, holder> held_;  // guarded by mutex_
  std::uint64_t next_generation_ = 1;             // guarded by mutex_
};

// {"code", "message"} with `status`.
http_response error_response(unsigned status, std::string_view code,
                             std::string_view message);

}  // namespace durin::cluster
