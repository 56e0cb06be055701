// The wire format of etcd 3.4's JSON gateway, shared by the unary client
// (cluster/etcd.cpp) and the watch (cluster/etcd_watch.cpp): keys and values
// are base64, int64 fields are JSON strings, fields at their default value
// are omitted, errors are {"error", "message", "code": gRPC code}. Decoding
// any bytes returns an error (internal: etcd answered something this client
// does not understand), never throws. Plain functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "client/http_client.hpp"
#include "cluster/etcd.hpp"
#include "durin/error.hpp"
#include "durin/json.hpp"

namespace durin::cluster::detail {

std::string base64_encode(std::string_view bytes);
// internal when `text` is not padded standard base64.
result<std::string> base64_decode(std::string_view text);

// The int64 field `name` of `object` (a string or a number); 0 when absent,
// as proto3 omits defaults; internal when it is anything else.
result<std::int64_t> int64_field(const json& object, const char* name);

// A base64 field (`key`, `value`); "" when absent.
result<std::string> bytes_field(const json& object, const char* name);

// One mvccpb.KeyValue; fields absent are 0 or "".
result<kv> decode_kv(const json& object);

// The `kvs` of a range answer (absent: none).
result<std::vector<kv>> decode_kvs(const json& answer);

// The error of an answer that is not 200, by its gRPC code: deadline
// exceeded → timeout, unavailable → shutting-down (retry, maybe elsewhere);
// invalid argument, not found, failed precondition, out of range →
// invalid-argument (the call names a lease etcd does not have, or a compacted
// or future revision); anything else → internal.
error gateway_error(std::string_view endpoint, unsigned http_status,
                    std::string_view body);
// The same for an error sent as a message of a stream ({"error": {...,
// "grpc_code": N}}), whose HTTP status was 200 already.
error stream_error(std::string_view endpoint, const json& error_object);

// One member's client URL, as given and parsed.
struct endpoint {
  std::string url;  // "http://127.0.0.1:2379"
  client::server_address address;
};

// "http://a:1,http://b:2" → endpoints in that order; invalid-argument when
// the list is empty or an entry is not http://host:port.
result<std::vector<endpoint>> parse_endpoints(std::string_view list);

}  // namespace durin::cluster::detail
