// The `schedules` family: one record per schedule, a JSON object in a codec
// bytes frame (version byte, u32 length, bytes, CRC-32C), under
// keys::schedule(tenant, schedule id). What the object holds is the
// schedule service's (services/schedule_service.hpp); the layout is in
// persistence/README.md. Pure functions over a store or a batch: any thread.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "durin/error.hpp"
#include "durin/json.hpp"
#include "persistence/store.hpp"

namespace durin::persistence {

void put_schedule(write_batch& batch, std::string_view tenant,
                  std::string_view schedule_id, const json& record);
void delete_schedule(write_batch& batch, std::string_view tenant,
                     std::string_view schedule_id);

// nullopt when absent; corrupt-record naming the schedule when the value
// fails its checksum or is not a JSON object.
result<std::optional<json>> get_schedule(const store& from,
                                         std::string_view tenant,
                                         std::string_view schedule_id);

// Every schedule of the store in key order (tenant, then id) until `visit`
// answers false. A record that does not decode is reported to `visit` as
// an error (its tenant and id still known), not skipped in silence.
status scan_schedules(
    const store& from,
    const std::function<bool(const std::string& tenant, const std::string& id,
                             result<json> record)>& visit);

}  // namespace durin::persistence
