#include "cluster/etcd.hpp"

#include <algorithm>
#include <mutex>
#include <optional>

#include "client/http_client.hpp"
#include "cluster/detail/etcd_wire.hpp"
#include "durin/json.hpp"
#include "persistence/assert.hpp"

namespace durin::cluster {

using detail::base64_encode;

std::string prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) {
    end.pop_back();
  }
  if (end.empty()) {
    return std::string(1, '\0');
  }
  end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
  return end;
}

struct etcd_client::state {
  std::mutex mutex;
  std::vector<detail::endpoint> endpoints;
  std::size_t current = 0;  // the endpoint calls go to; guarded by `mutex`
  std::optional<client::http_connection> connection;  // of `current`
  std::int64_t timeout_ms = 0;

  // POSTs `request` to `path` and parses the answer; of a streaming call,
  // the stream's first message unwrapped from its {"result": ...}. A
  // transport failure, or a member that says it cannot serve, moves to the
  // next endpoint.
  result<json> call(const char* path, const json& request,
                    bool streaming = false) {
    std::lock_guard lock(mutex);
    const auto& target = endpoints[current];
    if (!connection) {
      connection.emplace(target.address, timeout_ms);
    }
    auto answer = connection->send(
        "POST", path, {{"Content-Type", "application/json"}}, request.dump());
    if (!answer) {
      // invalid-argument here is a host that does not resolve: to the caller
      // that endpoint is unreachable like any other.
      auto code = answer.error().code == errc::timeout ? errc::timeout
                                                       : errc::shutting_down;
      next_endpoint();
      return make_error(code, "etcd " + target.url + " (" + path +
                                  "): " + answer.error().message);
    }
    if (answer->status != 200) {
      return rotated_on(
          detail::gateway_error(target.url, answer->status, answer->body));
    }
    std::string_view body = answer->body;
    if (streaming) {
      body = body.substr(0, body.find('\n'));
    }
    auto parsed = json::parse(body, nullptr, false);
    if (!parsed.is_object()) {
      return make_error(errc::internal, "etcd " + target.url + " (" + path +
                                            ") answered no JSON object");
    }
    if (!streaming) {
      return parsed;
    }
    // The HTTP status was sent before the call failed: the error is a
    // message of the stream.
    if (auto failed = parsed.find("error"); failed != parsed.end()) {
      return rotated_on(detail::stream_error(target.url, *failed));
    }
    auto inner = parsed.find("result");
    if (inner == parsed.end() || !inner->is_object()) {
      return make_error(errc::internal, "etcd " + target.url + " (" + path +
                                            ") answered a stream without a "
                                            "result");
    }
    return std::move(*inner);
  }

  // Moves on from a member that cannot serve now; another may.
  error rotated_on(error failure) {
    if (failure.code == errc::shutting_down || failure.code == errc::timeout) {
      next_endpoint();
    }
    return failure;
  }

  void next_endpoint() {
    connection.reset();
    current = (current + 1) % endpoints.size();
  }
};

namespace {

// The revision of an answer's header.
result<std::int64_t> header_revision(const json& answer) {
  auto header = answer.find("header");
  if (header == answer.end()) {
    return make_error(errc::internal, "etcd answered without a header");
  }
  return detail::int64_field(*header, "revision");
}

json range_request(std::string_view key, bool prefix) {
  json request = {{"key", base64_encode(key)}};
  if (prefix) {
    request["range_end"] = base64_encode(prefix_end(key));
  }
  return request;
}

json encode_op(const request_op& op) {
  switch (op.what) {
    case request_op::kind::put: {
      json put = {{"key", base64_encode(op.key)},
                  {"value", base64_encode(op.value)}};
      if (op.lease != 0) {
        put["lease"] = std::to_string(op.lease);
      }
      return {{"request_put", std::move(put)}};
    }
    case request_op::kind::range:
      return {{"request_range", range_request(op.key, op.prefix)}};
    case request_op::kind::erase:
      return {{"request_delete_range", range_request(op.key, op.prefix)}};
  }
  DURIN_ASSERT(false, "a request_op of no known kind");
  return {};
}

json encode_compare(const compare& condition) {
  static constexpr const char* results[] = {"EQUAL", "GREATER", "LESS",
                                            "NOT_EQUAL"};
  json out = {{"key", base64_encode(condition.key)},
              {"result", results[static_cast<int>(condition.is)]}};
  auto number = std::to_string(condition.number);
  switch (condition.what) {
    case compare::target::create:
      out["target"] = "CREATE";
      out["create_revision"] = number;
      break;
    case compare::target::mod:
      out["target"] = "MOD";
      out["mod_revision"] = number;
      break;
    case compare::target::version:
      out["target"] = "VERSION";
      out["version"] = number;
      break;
    case compare::target::value:
      out["target"] = "VALUE";
      out["value"] = base64_encode(condition.value);
      break;
    case compare::target::lease:
      out["target"] = "LEASE";
      out["lease"] = number;
      break;
  }
  return out;
}

json encode_ops(const std::vector<request_op>& ops) {
  json out = json::array();
  for (const auto& op : ops) {
    out.push_back(encode_op(op));
  }
  return out;
}

}  // namespace

result<etcd_client> etcd_client::make(std::string_view endpoints,
                                      std::int64_t timeout_ms) {
  auto parsed = detail::parse_endpoints(endpoints);
  if (!parsed) {
    return parsed.error();
  }
  if (timeout_ms <= 0) {
    return make_error(errc::invalid_argument,
                      "an etcd client's timeout_ms must be positive");
  }
  auto made = std::make_unique<state>();
  made->endpoints = std::move(*parsed);
  made->timeout_ms = timeout_ms;
  return etcd_client(std::move(made));
}

etcd_client::etcd_client(std::unique_ptr<state> state)
    : state_(std::move(state)) {}
etcd_client::etcd_client(etcd_client&&) noexcept = default;
etcd_client& etcd_client::operator=(etcd_client&&) noexcept = default;
etcd_client::~etcd_client() = default;

result<lease> etcd_client::grant(std::int64_t ttl_s) {
  auto answer =
      state_->call("/v3/lease/grant", {{"TTL", std::to_string(ttl_s)}});
  if (!answer) {
    return answer.error();
  }
  auto id = detail::int64_field(*answer, "ID");
  auto ttl = detail::int64_field(*answer, "TTL");
  if (!id || !ttl) {
    return (id ? ttl : id).error();
  }
  if (*id == 0) {
    return make_error(errc::internal, "etcd granted a lease without an ID");
  }
  return lease{*id, *ttl};
}

result<std::int64_t> etcd_client::keep_alive(std::int64_t lease_id) {
  // A streaming call over HTTP: one request, one message back.
  auto answer = state_->call("/v3/lease/keepalive",
                             {{"ID", std::to_string(lease_id)}}, true);
  if (!answer) {
    return answer.error();
  }
  auto ttl = detail::int64_field(*answer, "TTL");
  if (!ttl) {
    return ttl.error();
  }
  // A lease etcd no longer has is renewed to nothing: no TTL in the answer.
  if (*ttl <= 0) {
    return make_error(errc::invalid_argument,
                      "etcd has no lease " + std::to_string(lease_id) +
                          " (it expired or was revoked)");
  }
  return *ttl;
}

result<std::int64_t> etcd_client::time_to_live(std::int64_t lease_id) {
  auto answer =
      state_->call("/v3/lease/timetolive", {{"ID", std::to_string(lease_id)}});
  if (!answer) {
    return answer.error();
  }
  auto ttl = detail::int64_field(*answer, "TTL");
  if (!ttl) {
    return ttl.error();
  }
  // etcd answers -1 for a lease it does not have.
  return std::max<std::int64_t>(0, *ttl);
}

status etcd_client::revoke(std::int64_t lease_id) {
  auto answer =
      state_->call("/v3/lease/revoke", {{"ID", std::to_string(lease_id)}});
  if (!answer) {
    return answer.error();
  }
  return {};
}

result<range_result> etcd_client::range(std::string_view key, bool prefix) {
  auto answer = state_->call("/v3/kv/range", range_request(key, prefix));
  if (!answer) {
    return answer.error();
  }
  auto kvs = detail::decode_kvs(*answer);
  auto revision = header_revision(*answer);
  if (!kvs || !revision) {
    return kvs ? revision.error() : kvs.error();
  }
  return range_result{std::move(*kvs), *revision};
}

result<std::int64_t> etcd_client::put(std::string_view key,
                                      std::string_view value,
                                      std::int64_t lease) {
  json request = {{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) {
    request["lease"] = std::to_string(lease);
  }
  auto answer = state_->call("/v3/kv/put", request);
  if (!answer) {
    return answer.error();
  }
  return header_revision(*answer);
}

result<std::int64_t> etcd_client::erase(std::string_view key, bool prefix) {
  auto answer = state_->call("/v3/kv/deleterange", range_request(key, prefix));
  if (!answer) {
    return answer.error();
  }
  return detail::int64_field(*answer, "deleted");
}

result<txn_result> etcd_client::txn(const std::vector<compare>& when,
                                    const std::vector<request_op>& then,
                                    const std::vector<request_op>& otherwise) {
  json compares = json::array();
  for (const auto& condition : when) {
    compares.push_back(encode_compare(condition));
  }
  json request = {{"compare", std::move(compares)},
                  {"success", encode_ops(then)},
                  {"failure", encode_ops(otherwise)}};
  auto answer = state_->call("/v3/kv/txn", request);
  if (!answer) {
    return answer.error();
  }
  txn_result out;
  auto revision = header_revision(*answer);
  if (!revision) {
    return revision.error();
  }
  out.revision = *revision;
  // proto3 omits false: a failed txn has no "succeeded".
  auto succeeded = answer->find("succeeded");
  out.succeeded = succeeded != answer->end() && succeeded->is_boolean() &&
                  succeeded->get<bool>();
  auto responses = answer->find("responses");
  if (responses == answer->end()) {
    return out;
  }
  if (!responses->is_array()) {
    return make_error(errc::internal, "etcd answered a malformed txn");
  }
  for (const auto& response : *responses) {
    if (!response.is_object()) {
      return make_error(errc::internal, "etcd answered a malformed txn");
    }
    auto ranged = response.find("response_range");
    if (ranged == response.end()) {
      continue;  // a put's or an erase's answer
    }
    auto kvs = detail::decode_kvs(*ranged);
    if (!kvs) {
      return kvs.error();
    }
    out.ranges.push_back(std::move(*kvs));
  }
  return out;
}

status etcd_client::compact(std::int64_t revision) {
  auto answer = state_->call("/v3/kv/compaction",
                             {{"revision", std::to_string(revision)}});
  if (!answer) {
    return answer.error();
  }
  return {};
}

}  // namespace durin::cluster
