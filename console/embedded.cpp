#include "console/embedded.hpp"

#include <string>

namespace durin::console {

namespace {

constexpr std::string_view prefix = "/console";

// The page loads its own scripts and styles and calls its own origin only.
constexpr std::string_view content_security_policy =
    "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'";

wire::http_response plain(unsigned status, std::string body) {
  wire::http_response response;
  response.status = status;
  response.content_type = "text/plain; charset=utf-8";
  response.body = std::move(body);
  response.headers.emplace_back("X-Content-Type-Options", "nosniff");
  return response;
}

}  // namespace

const embedded_file* find(std::string_view name) {
  for (std::size_t i = 0; i < file_count; ++i) {
    if (files[i].name == name) {
      return &files[i];
    }
  }
  return nullptr;
}

std::optional<wire::http_response> serve(const wire::http_request& request) {
  std::string_view target = request.target;
  std::string_view path = target.substr(0, target.find('?'));
  if (path != prefix && path.substr(0, prefix.size() + 1) != "/console/") {
    return std::nullopt;
  }
  if (request.method != "GET" && request.method != "HEAD") {
    auto refused = plain(
        405, request.method + " is not allowed on " + std::string(path) + "\n");
    refused.headers.emplace_back("Allow", "GET, HEAD");
    return refused;
  }
  if (path == prefix) {
    auto moved = plain(308, "the console is at /console/\n");
    moved.headers.emplace_back("Location", "/console/");
    return moved;
  }
  std::string_view name = path.substr(prefix.size() + 1);
  if (name.empty()) {
    name = "index.html";
  }
  const embedded_file* file = find(name);
  if (file == nullptr) {
    return plain(404, "no console file " + std::string(path) + "\n");
  }
  wire::http_response response;
  response.content_type = std::string(file->content_type);
  response.headers.emplace_back("ETag", std::string(file->etag));
  // Names stay while contents change: revalidate every time (a 304 is
  // cheap), and keep nothing in shared caches.
  response.headers.emplace_back("Cache-Control", "no-cache, private");
  response.headers.emplace_back("X-Content-Type-Options", "nosniff");
  response.headers.emplace_back("Referrer-Policy", "no-referrer");
  response.headers.emplace_back("X-Frame-Options", "DENY");
  response.headers.emplace_back("Content-Security-Policy",
                                std::string(content_security_policy));
  if (request.header("if-none-match") == file->etag) {
    response.status = 304;
    return response;
  }
  // A HEAD too: the server sends only its length, which must be the GET's.
  response.body.assign(reinterpret_cast<const char*>(file->data), file->size);
  return response;
}

}  // namespace durin::console
