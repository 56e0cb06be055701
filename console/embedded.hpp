// The web console, served by `durin serve` at /console/ from files built
// into the binary (console/*.html, *.js, *.css; cmake/embed_files.cmake
// turns them into a table at build time, so there is nothing to deploy).
//
// serve() answers only targets under /console; anything else is left to the
// API. A file is found by its exact name in the table: nothing is decoded
// and nothing is read from disk, so no path can reach another file. The
// answers carry their Content-Type, an ETag (304 on If-None-Match), a
// Cache-Control that makes a browser ask again each time (the names do not
// change when the contents do), and headers that keep the page to itself
// (Content-Security-Policy, nosniff, no referrer, no framing).
//
// The console calls the JSON API with the user's API key, from the
// browser; these files are public and hold no secret.
//
// Thread-safety: serve() reads constant data only; call it from any thread.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "client/http_message.hpp"

namespace durin::console {

struct embedded_file {
  std::string_view name;  // "app.js": a plain file name, no directory
  std::string_view content_type;
  const unsigned char* data;
  std::size_t size;
  std::string_view etag;  // quoted, e.g. "\"3f2a...\""
};

// Generated at build time (console_files.cpp), sorted by name.
extern const embedded_file files[];
extern const std::size_t file_count;

// The file named `name`, or nullptr.
const embedded_file* find(std::string_view name);

// The answer for a request under /console (the path "/console" or one
// starting with "/console/"): a 308 from /console to /console/, index.html
// for /console/, a file, 304, 404 for any other name, 405 for methods other
// than GET and HEAD. nullopt for every other target.
std::optional<wire::http_response> serve(const wire::http_request& request);

}  // namespace durin::console
