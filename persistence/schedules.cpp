// The `schedules` family's values (persistence/schedules.hpp).
#include "persistence/schedules.hpp"

#include "persistence/codec.hpp"
#include "persistence/keys.hpp"

namespace durin::persistence {

namespace {

result<json> decode(std::string_view bytes, std::string_view tenant,
                    std::string_view id) {
  auto what = "schedules: schedule '" + std::string(id) + "' of tenant '" +
              std::string(tenant) + "': ";
  auto body = codec::decode_bytes(bytes);
  if (!body) {
    return make_error(errc::corrupt_record, what + body.error().message);
  }
  auto value = json::parse(*body, nullptr, false);
  if (value.is_discarded() || !value.is_object()) {
    return make_error(errc::corrupt_record, what + "not a JSON object");
  }
  return value;
}

}  // namespace

void put_schedule(write_batch& batch, std::string_view tenant,
                  std::string_view schedule_id, const json& record) {
  batch.put_value(family::schedules, keys::schedule(tenant, schedule_id),
                  codec::encode_bytes(record.dump()));
}

void delete_schedule(write_batch& batch, std::string_view tenant,
                     std::string_view schedule_id) {
  batch.delete_key(family::schedules, keys::schedule(tenant, schedule_id));
}

result<std::optional<json>> get_schedule(const store& from,
                                         std::string_view tenant,
                                         std::string_view schedule_id) {
  auto got =
      from.get_value(family::schedules, keys::schedule(tenant, schedule_id));
  if (!got) {
    return got.error();
  }
  if (!*got) {
    return std::optional<json>();
  }
  auto value = decode(**got, tenant, schedule_id);
  if (!value) {
    return value.error();
  }
  return std::optional<json>(std::move(*value));
}

status scan_schedules(
    const store& from,
    const std::function<bool(const std::string& tenant, const std::string& id,
                             result<json> record)>& visit) {
  // scan_values' visitor may not call the store: the records are collected
  // first, then visited.
  std::vector<std::pair<keys::token_address, std::string>> found;
  auto scanned = from.scan_values(
      family::schedules, [&](std::string_view key, std::string_view value) {
        auto address = keys::decode_schedule(key);
        if (address) {
          found.emplace_back(std::move(*address), std::string(value));
        }
        return true;
      });
  if (!scanned) {
    return scanned;
  }
  for (auto& [address, value] : found) {
    if (!visit(address.tenant, address.token,
               decode(value, address.tenant, address.token))) {
      break;
    }
  }
  return {};
}

}  // namespace durin::persistence
