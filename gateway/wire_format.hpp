// The gateway's wire vocabulary, in one place: how a request body is read
// (UTF-8, JSON depth, allowed fields), how the target's escapes are decoded,
// and how every answer is formed: a JSON value, or an error
// {"code", "message"} whose status follows from its code. Plain functions
// of their arguments; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "client/http_message.hpp"
#include "durin/error.hpp"
#include "durin/ids.hpp"
#include "durin/json.hpp"

namespace durin::gateway {

using wire::http_request;
using wire::http_response;

// The HTTP status of a runtime error code.
unsigned http_status_of(errc code);
// {"code", "message"} of a runtime error (adds "runId" / "conflictingRunId").
http_response error_response(const error& err);
// {"code", "message"} with `status`, for the codes of the HTTP layer that
// have no runtime error (invalid-path, unauthorized, not-found, ...).
http_response error_response(unsigned status, std::string_view code,
                             std::string_view message);
// A JSON answer; invalid UTF-8 in strings is replaced, never thrown on.
http_response json_response(unsigned status, const json& body);
// 400 invalid-argument with `message`.
http_response bad_request(std::string_view message);
// A header the API reads at most once (Authorization, Idempotency-Key),
// `name` spelled as documented. Sent twice, a proxy in front and this node
// could each act on another one, so `problem` is then 400 invalid-argument
// naming the header and never a value (a value may be a secret). Otherwise
// `value`, empty when the header is absent.
struct single_header {
  std::string_view value;
  bool sent = false;
  std::optional<http_response> problem;
};
single_header header_once(const http_request& request, std::string_view name);
// A query parameter's number: at most `digits_max` decimal digits, in
// `min..max`; nullopt otherwise.
std::optional<std::uint64_t> query_number(std::string_view value,
                                          std::uint64_t min, std::uint64_t max,
                                          std::size_t digits_max);

// One definition of well-formed UTF-8 for the gateway and the id rule.
using durin::valid_utf8;
// True when every byte is printable ASCII (0x21..0x7e).
bool printable_ascii(std::string_view text);
// Percent-decodes `text` ('+' as a space when `plus_is_space`, as in a
// query); nullopt for a malformed escape.
std::optional<std::string> percent_decode(std::string_view text,
                                          bool plus_is_space);

// A request body read as a JSON object: an empty body is {}. `problem` is
// the answer for a body that is not UTF-8, not JSON, nests deeper than
// `depth_max` or is not an object.
struct parsed_body {
  json value;
  std::optional<http_response> problem;
};
parsed_body parse_body(const std::string& body, std::size_t depth_max);

// 400 naming the first field of `body` (as `where` + its name, for a nested
// object) not in `allowed`, listed in the given order; none when all are.
std::optional<http_response> only_fields(
    const json& body, std::initializer_list<std::string_view> allowed,
    const std::string& where = {});

}  // namespace durin::gateway
