// Durable request idempotency records: the `requests` column family, keyed by
// (tenant, caller, idempotency key). A record is either an in-flight marker
// (a request with that key is running in the process `instance_id`), a kept
// response (status and body, replayed byte for byte), or a withheld marker
// (the first request succeeded at `succeeded_at_ms` but its response carried
// a secret, so it was not kept). gateway/idempotency.hpp decides what the
// records mean; this file only stores them.
//
// Thread-safety: every method may be called from any thread. Writes go
// through the committer with sync=true; `put` and `erase` return only once
// the write is durable (they block the calling thread for one group commit:
// never call them from an actor). Errors are values; nothing throws.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "durin/error.hpp"
#include "persistence/committer.hpp"
#include "persistence/store.hpp"

namespace durin::persistence {

enum class request_state : std::uint8_t {
  in_flight = 1,  // a request with this key is running
  kept = 2,       // the first answer, kept for replay
  withheld = 3,   // the first answer carried a secret: not kept
};

struct request_record {
  request_state state = request_state::in_flight;
  std::string fingerprint;  // method, route, canonical body, headers
  std::string instance_id;  // the process that wrote an in-flight marker
  std::int64_t lease_until_ms = 0;   // in-flight: free after this time
  std::int64_t expires_at_ms = 0;    // the node removes the record after
  std::int64_t succeeded_at_ms = 0;  // kept, withheld: when it answered
  std::uint16_t http_status = 0;     // kept
  std::string content_type;          // kept
  std::string body;                  // kept: the response bytes
};

struct request_address {
  std::string tenant;
  std::string caller;  // the API key id
  std::string key;     // the Idempotency-Key header, 1..255 bytes
};

// The longest response body a record keeps (a longer answer is not kept:
// its request writes a marker, or nothing).
inline constexpr std::size_t kept_body_bytes_max = 32u << 20;

// The Idempotency-Key a start keeps its answer under, as plain data a run's
// admission carries down to whichever actor builds the batch: the records
// below are written there, durable exactly when the run (or its settling
// status) is.
struct start_key {
  request_address address;
  std::string fingerprint;
  std::string instance_id;  // the process holding the key
  std::int64_t lease_ms = 0;
  std::int64_t keep_ms = 0;
};

// The in-flight marker naming `run_id`: a retry after a crash answers that
// run instead of starting another.
request_record in_flight_marker(const start_key& key, std::int64_t now_ms,
                                std::string run_id);
// The kept answer (status, JSON body) a retry replays byte for byte.
request_record kept_answer(const start_key& key, std::int64_t now_ms,
                           std::uint16_t http_status, std::string body);

// Adds the put of `record` under `address` to `batch` (someone else's batch,
// written with its other records: a run's admission). Refuses, and adds
// nothing, a key or body too long to keep.
status add_request(write_batch& batch, const request_address& address,
                   const request_record& record);

// Adds the removal of the record under `address` to `batch`.
void remove_request(write_batch& batch, const request_address& address);

std::string encode(const request_record& record);
result<request_record> decode_request(std::string_view bytes);

class request_store {
 public:
  // REQUIRES: `target` and `writer` outlive the request store; `writer`
  // writes to `target`.
  request_store(store& target, committer& writer);

  // nullopt when no record is stored for the address.
  result<std::optional<request_record>> get(
      const request_address& address) const;

  // Stores `record` under `address` (sync); returns once durable.
  status put(const request_address& address, const request_record& record);

  // Removes the record (sync); returns once durable. Removing a missing
  // record succeeds.
  status erase(const request_address& address);

  // Removes every record with expires_at_ms <= now_ms and, when
  // `instance_id` is non-empty, in-flight markers of other instances (their
  // requests are gone: call that only before serving, since a concurrent
  // claim of the same key could otherwise be removed). Examines at most
  // `scan_max` records per call. Answers how many were removed.
  result<std::size_t> sweep(std::int64_t now_ms, std::string_view instance_id,
                            std::size_t scan_max = 1'000'000);

 private:
  status write(write_batch batch);

  store& store_;
  committer& writer_;
};

}  // namespace durin::persistence
