#include "cluster/detail/etcd_wire.hpp"

#include <array>
#include <charconv>
#include <utility>

namespace durin::cluster::detail {

namespace {

constexpr std::string_view alphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// 0..63 for a letter of the alphabet, -1 for anything else ('=' included).
constexpr std::array<std::int8_t, 256> decoding_table() {
  std::array<std::int8_t, 256> table{};
  for (auto& entry : table) {
    entry = -1;
  }
  for (std::size_t i = 0; i < alphabet.size(); ++i) {
    table[static_cast<unsigned char>(alphabet[i])] =
        static_cast<std::int8_t>(i);
  }
  return table;
}

constexpr auto decoding = decoding_table();

// internal, not invalid-argument: the caller's arguments were fine, and a
// keep_alive's invalid-argument must keep meaning "the lease is gone".
error malformed(std::string what) {
  return make_error(errc::internal,
                    "etcd answered a malformed " + std::move(what));
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string text;
  text.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    std::uint32_t group = static_cast<unsigned char>(bytes[i]) << 16 |
                          static_cast<unsigned char>(bytes[i + 1]) << 8 |
                          static_cast<unsigned char>(bytes[i + 2]);
    text += alphabet[group >> 18 & 63];
    text += alphabet[group >> 12 & 63];
    text += alphabet[group >> 6 & 63];
    text += alphabet[group & 63];
  }
  auto left = bytes.size() - i;
  if (left > 0) {
    std::uint32_t group = static_cast<unsigned char>(bytes[i]) << 16;
    if (left == 2) {
      group |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    }
    text += alphabet[group >> 18 & 63];
    text += alphabet[group >> 12 & 63];
    text += left == 2 ? alphabet[group >> 6 & 63] : '=';
    text += '=';
  }
  return text;
}

result<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) {
    return malformed("base64 text (its length is not a multiple of 4)");
  }
  std::size_t padding = 0;
  if (!text.empty() && text.back() == '=') {
    padding = text.size() >= 2 && text[text.size() - 2] == '=' ? 2 : 1;
  }
  std::string bytes;
  bytes.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    bool last = i + 4 == text.size();
    std::uint32_t group = 0;
    for (std::size_t j = 0; j < 4; ++j) {
      bool pad = last && j >= 4 - padding;
      auto digit = decoding[static_cast<unsigned char>(text[i + j])];
      if (pad ? text[i + j] != '=' : digit < 0) {
        return malformed("base64 text");
      }
      group = group << 6 | static_cast<std::uint32_t>(pad ? 0 : digit);
    }
    bytes += static_cast<char>(group >> 16 & 0xff);
    if (!last || padding < 2) {
      bytes += static_cast<char>(group >> 8 & 0xff);
    }
    if (!last || padding < 1) {
      bytes += static_cast<char>(group & 0xff);
    }
  }
  return bytes;
}

result<std::int64_t> int64_field(const json& object, const char* name) {
  if (!object.is_object()) {
    return malformed(std::string("answer (no object around '") + name + "')");
  }
  auto found = object.find(name);
  if (found == object.end()) {
    return std::int64_t{0};
  }
  if (found->is_number_integer()) {
    return found->get<std::int64_t>();
  }
  if (!found->is_string()) {
    return malformed(std::string("'") + name + "'");
  }
  const auto& text = found->get_ref<const std::string&>();
  std::int64_t number = 0;
  auto [end, failure] =
      std::from_chars(text.data(), text.data() + text.size(), number);
  if (failure != std::errc{} || end != text.data() + text.size()) {
    return malformed(std::string("'") + name + "': '" + text + "'");
  }
  return number;
}

result<std::string> bytes_field(const json& object, const char* name) {
  auto found = object.find(name);
  if (found == object.end()) {
    return std::string();
  }
  if (!found->is_string()) {
    return malformed(std::string("'") + name + "'");
  }
  return base64_decode(found->get_ref<const std::string&>());
}

result<kv> decode_kv(const json& object) {
  if (!object.is_object()) {
    return malformed("key-value (not an object)");
  }
  kv out;
  auto key = bytes_field(object, "key");
  auto value = bytes_field(object, "value");
  if (!key) {
    return key.error();
  }
  if (!value) {
    return value.error();
  }
  out.key = std::move(*key);
  out.value = std::move(*value);
  std::pair<const char*, std::int64_t*> numbers[] = {
      {"create_revision", &out.create_revision},
      {"mod_revision", &out.mod_revision},
      {"version", &out.version},
      {"lease", &out.lease}};
  for (auto [name, field] : numbers) {
    auto number = int64_field(object, name);
    if (!number) {
      return number.error();
    }
    *field = *number;
  }
  return out;
}

result<std::vector<kv>> decode_kvs(const json& answer) {
  std::vector<kv> kvs;
  if (!answer.is_object()) {
    return malformed("range answer (not an object)");
  }
  auto found = answer.find("kvs");
  if (found == answer.end()) {
    return kvs;
  }
  if (!found->is_array()) {
    return malformed("'kvs'");
  }
  for (const auto& item : *found) {
    auto one = decode_kv(item);
    if (!one) {
      return one.error();
    }
    kvs.push_back(std::move(*one));
  }
  return kvs;
}

namespace {

error grpc_error(std::string_view endpoint, std::int64_t code,
                 std::string message) {
  // gRPC status codes (google.golang.org/grpc/codes).
  constexpr std::int64_t invalid_argument = 3, deadline_exceeded = 4,
                         not_found = 5, failed_precondition = 9,
                         out_of_range = 11, unavailable = 14;
  errc mapped = errc::internal;
  switch (code) {
    case deadline_exceeded:
      mapped = errc::timeout;
      break;
    case unavailable:
      mapped = errc::shutting_down;
      break;
    case invalid_argument:
    case not_found:
    case failed_precondition:
    case out_of_range:
      mapped = errc::invalid_argument;
      break;
    default:
      break;
  }
  return make_error(mapped, "etcd " + std::string(endpoint) + ": " + message);
}

// The text and code of an error object; the code's name differs between
// unary answers ("code") and stream messages ("grpc_code").
std::pair<std::string, std::int64_t> message_and_code(const json& object,
                                                      const char* code_name) {
  std::string message;
  std::int64_t code = -1;
  if (object.is_object()) {
    auto text = object.find("message");
    if (text != object.end() && text->is_string()) {
      message = text->get<std::string>();
    }
    auto number = object.find(code_name);
    if (number != object.end() && number->is_number_integer()) {
      code = number->get<std::int64_t>();
    }
  }
  return {std::move(message), code};
}

}  // namespace

error gateway_error(std::string_view endpoint, unsigned http_status,
                    std::string_view body) {
  auto [message, code] =
      message_and_code(json::parse(body, nullptr, false), "code");
  if (message.empty()) {
    message = "HTTP " + std::to_string(http_status) + ": " +
              std::string(body.substr(0, 200));
  }
  return grpc_error(endpoint, code, std::move(message));
}

error stream_error(std::string_view endpoint, const json& error_object) {
  auto [message, code] = message_and_code(error_object, "grpc_code");
  if (message.empty()) {
    message = "an error on the stream: " + error_object.dump().substr(0, 200);
  }
  return grpc_error(endpoint, code, std::move(message));
}

result<std::vector<endpoint>> parse_endpoints(std::string_view list) {
  std::vector<endpoint> endpoints;
  while (!list.empty()) {
    auto comma = list.find(',');
    auto entry = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view()
                                           : list.substr(comma + 1);
    while (!entry.empty() && entry.front() == ' ') {
      entry.remove_prefix(1);
    }
    while (!entry.empty() && entry.back() == ' ') {
      entry.remove_suffix(1);
    }
    if (entry.substr(0, 7) != "http://") {
      return make_error(errc::invalid_argument,
                        "an etcd endpoint is http://host:port, got '" +
                            std::string(entry) + "'");
    }
    auto address = client::parse_server_url(entry);
    if (!address) {
      return address.error();
    }
    endpoints.push_back({std::string(entry), std::move(*address)});
  }
  if (endpoints.empty()) {
    return make_error(errc::invalid_argument, "no etcd endpoint given");
  }
  return endpoints;
}

}  // namespace durin::cluster::detail
