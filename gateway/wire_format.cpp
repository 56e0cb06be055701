#include "gateway/wire_format.hpp"

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <vector>

#include "base/json_text.hpp"

namespace durin::gateway {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

}  // namespace

// Percent-decodes `text`; nullopt for a malformed escape.
std::optional<std::string> percent_decode(std::string_view text,
                                          bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size()) {
        return std::nullopt;
      }
      int high = hex_value(text[i + 1]);
      int low = hex_value(text[i + 2]);
      if (high < 0 || low < 0) {
        return std::nullopt;
      }
      out.push_back(static_cast<char>(high * 16 + low));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

bool printable_ascii(std::string_view text) {
  for (char c : text) {
    if (c < 0x21 || c > 0x7e) {
      return false;
    }
  }
  return true;
}

parsed_body parse_body(const std::string& body, std::size_t depth_max) {
  if (body.empty()) {
    return {json::object(), std::nullopt};
  }
  if (!valid_utf8(body)) {
    return {json(),
            error_response(400, "invalid-json", "the body is not valid UTF-8")};
  }
  std::size_t depth = 0;
  bool too_deep = false;
  // The keys of each object open around the parser: a key given twice is
  // refused, not resolved by the last one winning, so that what a proxy or
  // a log reads of the body is what the node acts on.
  std::vector<std::vector<std::string>> open_objects;
  std::optional<std::string> repeated;
  json value;
  try {
    value =
        json::parse(body, [&](int, json::parse_event_t event, json& parsed) {
          if (event == json::parse_event_t::object_start ||
              event == json::parse_event_t::array_start) {
            if (++depth > depth_max) {
              too_deep = true;
              throw std::out_of_range("too deep");
            }
            if (event == json::parse_event_t::object_start) {
              open_objects.emplace_back();
            }
          } else if (event == json::parse_event_t::object_end ||
                     event == json::parse_event_t::array_end) {
            --depth;
            if (event == json::parse_event_t::object_end) {
              open_objects.pop_back();
            }
          } else if (event == json::parse_event_t::key) {
            auto& keys = open_objects.back();
            const auto& key = parsed.get_ref<const std::string&>();
            if (std::find(keys.begin(), keys.end(), key) != keys.end()) {
              repeated = key;
              throw std::invalid_argument("repeated key");
            }
            keys.push_back(key);
          }
          return true;
        });
  } catch (const std::invalid_argument&) {
    return {json(), error_response(400, "invalid-json",
                                   "the body has the key '" + *repeated +
                                       "' twice in one object")};
  } catch (const json::exception& e) {
    return {json(), error_response(400, "invalid-json",
                                   "the body is not JSON: " + json_problem(e))};
  } catch (const std::out_of_range&) {
    too_deep = true;
  }
  if (too_deep) {
    return {json(), error_response(400, "invalid-json",
                                   "the body nests deeper than " +
                                       std::to_string(depth_max) + " levels")};
  }
  if (!value.is_object()) {
    return {json(), error_response(400, "invalid-argument",
                                   "the body must be a JSON object")};
  }
  return {std::move(value), std::nullopt};
}

std::optional<http_response> only_fields(
    const json& body, std::initializer_list<std::string_view> allowed,
    const std::string& where) {
  if (auto problem = unknown_field(body, allowed, where)) {
    return bad_request(std::move(*problem));
  }
  return std::nullopt;
}

unsigned http_status_of(errc code) {
  switch (code) {
    case errc::invalid_argument:
    case errc::invalid_input:
      return 400;
    case errc::flow_not_found:
    case errc::step_not_found:
    case errc::run_not_found:
    case errc::hook_not_found:
    case errc::schedule_not_found:
    case errc::handler_not_found:
      return 404;
    case errc::update_rejected:
    case errc::query_refused:
      return 422;
    case errc::run_finished:
    case errc::hook_conflict:
    case errc::schedule_exists:
    case errc::nondeterministic_replay:
    case errc::cancelled:
      return 409;
    case errc::timeout:
      return 504;
    case errc::storage_error:
    case errc::shutting_down:
    case errc::start_outcome_unknown:
    case errc::unavailable:
      return 503;
    case errc::step_failed:
    case errc::flow_error:
      return 422;
    case errc::corrupt_record:
    case errc::internal:
      return 500;
  }
  return 500;
}

http_response json_response(unsigned status, const json& body) {
  http_response response;
  response.status = status;
  response.body = json_text(body);
  return response;
}

http_response bad_request(std::string_view message) {
  return error_response(400, "invalid-argument", message);
}

single_header header_once(const http_request& request, std::string_view name) {
  // The request's names are lower-case; `name` is as documented.
  auto is_name = [name](std::string_view field) {
    return std::ranges::equal(field, name, [](char lower, char spelled) {
      return lower == std::tolower(static_cast<unsigned char>(spelled));
    });
  };
  single_header found;
  std::size_t count = 0;
  for (const auto& [field, value] : request.headers) {
    if (is_name(field)) {
      found.value = value;
      ++count;
    }
  }
  found.sent = count > 0;
  if (count > 1) {
    found.value = {};
    found.problem =
        bad_request("send one " + std::string(name) +
                    " header; this request has " + std::to_string(count));
  }
  return found;
}

std::optional<std::uint64_t> query_number(std::string_view value,
                                          std::uint64_t min, std::uint64_t max,
                                          std::size_t digits_max) {
  if (value.empty() || value.size() > digits_max) {
    return std::nullopt;
  }
  std::uint64_t number = 0;
  for (char c : value) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    number = number * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (number < min || number > max) {
    return std::nullopt;
  }
  return number;
}

http_response error_response(const error& err) {
  json body = {{"code", to_code(err.code)}, {"message", err.message}};
  if (err.code == errc::hook_conflict && !err.run_id.empty()) {
    body["conflictingRunId"] = err.run_id;
  }
  if (err.code == errc::start_outcome_unknown && !err.run_id.empty()) {
    body["runId"] = err.run_id;
  }
  return json_response(http_status_of(err.code), body);
}

http_response error_response(unsigned status, std::string_view code,
                             std::string_view message) {
  http_response response;
  response.status = status;
  response.body = json_text(json{{"code", code}, {"message", message}});
  return response;
}

}  // namespace durin::gateway
