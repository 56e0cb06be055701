#include "gateway/idempotency.hpp"

#include <ctime>

#include "base/time_text.hpp"
#include "durin/json.hpp"
#include "persistence/keys.hpp"

namespace durin::gateway {

using persistence::request_record;
using persistence::request_state;

idempotency::idempotency(persistence::request_store& requests,
                         std::string instance_id,
                         std::function<std::int64_t()> now_ms,
                         idempotency_options options)
    : idempotency([&requests](const persistence::request_address&)
                      -> persistence::request_store& { return requests; },
                  std::move(instance_id), std::move(now_ms), options) {}

idempotency::idempotency(store_router requests, std::string instance_id,
                         std::function<std::int64_t()> now_ms,
                         idempotency_options options)
    : requests_(std::move(requests)),
      instance_id_(std::move(instance_id)),
      now_ms_(std::move(now_ms)),
      options_(options) {}

std::string idempotency::map_key(const persistence::request_address& address) {
  return persistence::keys::request(address.tenant, address.caller,
                                    address.key);
}

void idempotency::release(const std::string& key, std::uint64_t generation) {
  std::lock_guard lock(mutex_);
  auto found = held_.find(key);
  if (found != held_.end() && found->second.generation == generation) {
    held_.erase(found);
  }
}

namespace {

http_response in_flight_response() {
  auto response =
      error_response(409, "idempotency-key-in-flight", in_flight_message);
  response.headers.emplace_back("Retry-After", "5");
  return response;
}

http_response conflict_response() {
  return error_response(409, "conflict", conflict_message);
}

http_response withheld_response(std::int64_t succeeded_at_ms) {
  return error_response(
      409, "idempotency-key-replay-withheld",
      "The first request with this Idempotency-Key succeeded at " +
          time_text::format_rfc3339_ms(succeeded_at_ms) +
          "; its response carried a secret, so it is not kept and is never "
          "sent again. Nothing was created twice. Use a fresh key to make "
          "another.");
}

http_response replay_response(const request_record& record) {
  http_response replay;
  replay.status = record.http_status;
  replay.content_type = record.content_type;
  replay.body = record.body;
  replay.headers.emplace_back("Idempotent-Replayed", "true");
  return replay;
}

}  // namespace

std::optional<http_response> idempotency::peek(
    const persistence::request_address& address,
    const std::string& fingerprint) {
  auto early = requests_(address).get(address);
  if (!early || !*early || (*early)->expires_at_ms <= now_ms_() ||
      (*early)->state == request_state::in_flight) {
    return std::nullopt;
  }
  const auto& record = **early;
  if (record.fingerprint != fingerprint) {
    return conflict_response();
  }
  if (record.state == request_state::withheld) {
    return withheld_response(record.succeeded_at_ms);
  }
  return replay_response(record);
}

idempotency::decision idempotency::begin(
    const persistence::request_address& address,
    const std::string& fingerprint) {
  const auto key = map_key(address);
  const auto now = now_ms_();
  // Fast path, no lock: a kept or withheld answer is final for its life, so
  // repeats of a finished request never wait on a holder.
  if (auto early = peek(address, fingerprint)) {
    return {outcome::answered, std::move(*early)};
  }
  std::uint64_t generation = 0;
  {
    std::lock_guard lock(mutex_);
    auto found = held_.find(key);
    if (found != held_.end() && found->second.lease_until_ms > now) {
      return {outcome::answered, found->second.fingerprint == fingerprint
                                     ? in_flight_response()
                                     : conflict_response()};
    }
    generation = next_generation_++;
    held_[key] = holder{fingerprint, generation, now + options_.lease_ms};
  }
  auto answered = [&](http_response response) {
    release(key, generation);
    return decision{outcome::answered, std::move(response)};
  };
  std::string recorded_run_id;
  auto found = requests_(address).get(address);
  if (!found) {
    return answered(error_response(
        503, "storage-error",
        "cannot read the Idempotency-Key: " + found.error().message));
  }
  if (*found && (*found)->expires_at_ms > now) {
    const auto& record = **found;
    const bool same = record.fingerprint == fingerprint;
    switch (record.state) {
      case request_state::kept: {
        if (!same) {
          return answered(conflict_response());
        }
        return answered(replay_response(record));
      }
      case request_state::withheld:
        return answered(same ? withheld_response(record.succeeded_at_ms)
                             : conflict_response());
      case request_state::in_flight:
        // A marker of this process whose holder is gone from memory but
        // whose lease runs: keep refusing until the lease ends. Markers of
        // other instances, or with an ended lease, are free.
        if (record.instance_id == instance_id_ && record.lease_until_ms > now) {
          return answered(same ? in_flight_response() : conflict_response());
        }
        if (same) {
          recorded_run_id = record.body;  // a run the old holder admitted
        } else if (!record.body.empty()) {
          // The old holder admitted a run for another request: still the
          // same key reused with a different request.
          return answered(conflict_response());
        }
        break;
    }
  }
  return {outcome::proceed, {}, generation, std::move(recorded_run_id)};
}

persistence::start_key idempotency::start_key_of(
    const persistence::request_address& address,
    const std::string& fingerprint) const {
  return {.address = address,
          .fingerprint = fingerprint,
          .instance_id = instance_id_,
          .lease_ms = options_.lease_ms,
          .keep_ms = options_.keep_ms};
}

http_response idempotency::finish(const persistence::request_address& address,
                                  const std::string& fingerprint,
                                  std::uint64_t generation,
                                  http_response response, bool carries_secret,
                                  stored already) {
  const auto key = map_key(address);
  const auto now = now_ms_();
  status kept;
  const bool success = response.status >= 200 && response.status < 300;
  if (already == stored::answer || (!success && already == stored::marker)) {
    // Durable already, or a marker that may name an admitted run: a retry
    // must find it.
  } else if (success) {
    request_record record;
    record.fingerprint = fingerprint;
    record.instance_id = instance_id_;
    record.expires_at_ms = now + options_.keep_ms;
    record.succeeded_at_ms = now;
    if (carries_secret) {
      record.state = request_state::withheld;
    } else {
      record.state = request_state::kept;
      record.http_status = static_cast<std::uint16_t>(response.status);
      record.content_type = response.content_type;
      record.body = response.body;
    }
    kept = requests_(address).put(address, record);
  }
  release(key, generation);
  if (!kept && response.status >= 200 && response.status < 300 &&
      !carries_secret) {
    // The work is done and durable; only its replay could not be kept.
    response.headers.emplace_back("Idempotency-Key-Kept", "false");
  }
  return response;
}

}  // namespace durin::gateway
