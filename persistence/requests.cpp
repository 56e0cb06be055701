// The `requests` family: value layout in persistence/README.md.
#include "persistence/requests.hpp"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <future>
#include <memory>

#include "persistence/codec.hpp"
#include "persistence/keys.hpp"

namespace durin::persistence {

namespace {

constexpr std::uint8_t request_layout = 1;

void put_string(std::string& out, std::string_view text) {
  keys::put_u32(out, static_cast<std::uint32_t>(text.size()));
  out.append(text);
}

// Reads from the front of `in`, refusing any length that overruns it.
struct reader {
  std::string_view in;
  bool ok = true;

  std::uint64_t u64() {
    if (in.size() < 8) {
      ok = false;
      return 0;
    }
    auto value = keys::get_u64(in.data());
    in.remove_prefix(8);
    return value;
  }
  std::uint8_t u8() {
    if (in.empty()) {
      ok = false;
      return 0;
    }
    auto value = static_cast<std::uint8_t>(in[0]);
    in.remove_prefix(1);
    return value;
  }
  std::string text() {
    if (in.size() < 4) {
      ok = false;
      return {};
    }
    std::size_t length = keys::get_u32(in.data());
    in.remove_prefix(4);
    if (length > in.size()) {
      ok = false;
      return {};
    }
    std::string value(in.substr(0, length));
    in.remove_prefix(length);
    return value;
  }
};

std::string key_of(const request_address& address) {
  return keys::request(address.tenant, address.caller, address.key);
}

bool address_fits(const request_address& address) {
  return keys::fits(address.tenant) && keys::fits(address.caller) &&
         keys::fits(address.key);
}

}  // namespace

std::string encode(const request_record& record) {
  std::string body;
  body.push_back(static_cast<char>(request_layout));
  body.push_back(static_cast<char>(record.state));
  keys::put_u64(body, static_cast<std::uint64_t>(record.lease_until_ms));
  keys::put_u64(body, static_cast<std::uint64_t>(record.expires_at_ms));
  keys::put_u64(body, static_cast<std::uint64_t>(record.succeeded_at_ms));
  keys::put_u16(body, record.http_status);
  put_string(body, record.fingerprint);
  put_string(body, record.instance_id);
  put_string(body, record.content_type);
  put_string(body, record.body);
  return codec::encode_bytes(body);
}

result<request_record> decode_request(std::string_view bytes) {
  auto body = codec::decode_bytes(bytes);
  if (!body) {
    return make_error(errc::corrupt_record,
                      "requests: " + body.error().message);
  }
  reader in{*body};
  request_record record;
  if (in.u8() != request_layout) {
    return make_error(errc::corrupt_record, "requests: unknown layout");
  }
  auto state = in.u8();
  if (state < 1 || state > 3) {
    return make_error(errc::corrupt_record, "requests: bad state");
  }
  record.state = static_cast<request_state>(state);
  record.lease_until_ms = static_cast<std::int64_t>(in.u64());
  record.expires_at_ms = static_cast<std::int64_t>(in.u64());
  record.succeeded_at_ms = static_cast<std::int64_t>(in.u64());
  if (in.in.size() < 2) {
    return make_error(errc::corrupt_record, "requests: truncated");
  }
  record.http_status = keys::get_u16(in.in.data());
  in.in.remove_prefix(2);
  record.fingerprint = in.text();
  record.instance_id = in.text();
  record.content_type = in.text();
  record.body = in.text();
  if (!in.ok || !in.in.empty()) {
    return make_error(errc::corrupt_record, "requests: truncated or trailing");
  }
  return record;
}

request_store::request_store(store& target, committer& writer)
    : store_(target), writer_(writer) {}

result<std::optional<request_record>> request_store::get(
    const request_address& address) const {
  if (!address_fits(address)) {
    return make_error(errc::invalid_argument, "request key too long");
  }
  auto got = store_.get_value(family::requests, key_of(address));
  if (!got) {
    return got.error();
  }
  if (!*got) {
    return std::optional<request_record>{};
  }
  auto record = decode_request(**got);
  if (!record) {
    return record.error();
  }
  return std::optional<request_record>(std::move(*record));
}

status request_store::write(write_batch batch) {
  auto done = std::make_shared<std::promise<status>>();
  auto answer = done->get_future();
  writer_.submit(std::move(batch),
                 [done](const status& outcome) { done->set_value(outcome); });
  return answer.get();
}

static_assert(kept_body_bytes_max <= codec::field_bytes_max / 2,
              "a kept body leaves room for the rest of its record");

status add_request(write_batch& batch, const request_address& address,
                   const request_record& record) {
  if (!address_fits(address)) {
    return make_error(errc::invalid_argument, "request key too long");
  }
  if (record.body.size() > kept_body_bytes_max) {
    return make_error(errc::invalid_argument, "response too large to keep");
  }
  batch.put_value(family::requests, key_of(address), encode(record));
  if (!batch.problem().empty()) {
    return make_error(errc::invalid_argument, batch.problem());
  }
  return {};
}

void remove_request(write_batch& batch, const request_address& address) {
  if (address_fits(address)) {
    batch.delete_key(family::requests, key_of(address));
  }
}

request_record in_flight_marker(const start_key& key, std::int64_t now_ms,
                                std::string run_id) {
  request_record marker;
  marker.state = request_state::in_flight;
  marker.fingerprint = key.fingerprint;
  marker.instance_id = key.instance_id;
  marker.lease_until_ms = now_ms + key.lease_ms;
  marker.expires_at_ms = now_ms + key.keep_ms;
  marker.body = std::move(run_id);
  return marker;
}

request_record kept_answer(const start_key& key, std::int64_t now_ms,
                           std::uint16_t http_status, std::string body) {
  request_record record;
  record.state = request_state::kept;
  record.fingerprint = key.fingerprint;
  record.instance_id = key.instance_id;
  record.expires_at_ms = now_ms + key.keep_ms;
  record.succeeded_at_ms = now_ms;
  record.http_status = http_status;
  record.content_type = "application/json";
  record.body = std::move(body);
  return record;
}

status request_store::put(const request_address& address,
                          const request_record& record) {
  auto batch = store_.batch();
  if (auto added = add_request(batch, address, record); !added) {
    return added;
  }
  return write(std::move(batch));
}

status request_store::erase(const request_address& address) {
  if (!address_fits(address)) {
    return make_error(errc::invalid_argument, "request key too long");
  }
  auto batch = store_.batch();
  batch.delete_key(family::requests, key_of(address));
  return write(std::move(batch));
}

result<std::size_t> request_store::sweep(std::int64_t now_ms,
                                         std::string_view instance_id,
                                         std::size_t scan_max) {
  std::vector<std::string> doomed;
  std::size_t examined = 0;
  auto scanned = store_.scan_values(
      family::requests, [&](std::string_view key, std::string_view value) {
        if (examined++ >= scan_max) {
          return false;
        }
        auto record = decode_request(value);
        // An undecodable record is of no use to anyone.
        bool remove = !record;
        if (record) {
          remove = record->expires_at_ms <= now_ms ||
                   (!instance_id.empty() &&
                    record->state == request_state::in_flight &&
                    record->instance_id != instance_id);
        }
        if (remove) {
          doomed.emplace_back(key);
        }
        return true;
      });
  if (!scanned) {
    return scanned.error();
  }
  auto batch = store_.batch();
  for (const auto& key : doomed) {
    batch.delete_key(family::requests, key);
  }
  const std::size_t removed = doomed.size();
  if (removed == 0) {
    return removed;
  }
  if (auto written = write(std::move(batch)); !written) {
    return written.error();
  }
  return removed;
}

}  // namespace durin::persistence
