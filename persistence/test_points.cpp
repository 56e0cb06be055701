// Kill and fault points for crash tests; see test_points.hpp. Built only with
// DURIN_TEST_POINTS, so release builds carry none of this.
#include "persistence/test_points.hpp"

#if defined(DURIN_TEST_POINTS)

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace durin::test_points {

namespace {

// Longest point name DURIN_KILL_AT may name; points are short literals.
constexpr std::size_t name_bytes_max = 127;

// A parsed DURIN_KILL_AT, DURIN_FAIL_AT or DURIN_SLOW_AT: which point, at
// which hit (for a slow point: how many milliseconds). Fixed
// storage, so parsing cannot throw inside the noexcept reach().
struct kill_plan {
  bool armed = false;
  char name[name_bytes_max + 1] = {};
  std::uint64_t at_hit = 0;
  std::atomic<std::uint64_t> hits{0};
};

// Parses "name:N" (N >= 1). Anything else disarms, with one warning, so a
// typo in a crash test shows up instead of silently never killing.
void parse(const char* variable, const char* text, kill_plan& plan) {
  const char* colon = std::strrchr(text, ':');
  const std::size_t name_bytes =
      colon != nullptr ? static_cast<std::size_t>(colon - text) : 0;
  char* end = nullptr;
  const unsigned long long at_hit =
      colon != nullptr ? std::strtoull(colon + 1, &end, 10) : 0;
  const bool valid = name_bytes > 0 && name_bytes <= name_bytes_max &&
                     end != nullptr && end != colon + 1 && *end == '\0' &&
                     at_hit >= 1 && colon[1] != '-';
  if (!valid) {
    std::fprintf(stderr, "durin: ignoring %s='%s' (expected name:N, N >= 1)\n",
                 variable, text);
    return;
  }
  std::memcpy(plan.name, text, name_bytes);
  plan.name[name_bytes] = '\0';
  plan.at_hit = at_hit;
  plan.armed = true;
}

// Read once, on first use; thread-safe static initialisation.
kill_plan& read_plan(const char* variable, kill_plan& parsed) {
  if (const char* text = std::getenv(variable); text != nullptr) {
    parse(variable, text, parsed);
  }
  return parsed;
}

kill_plan& kill_at() {
  static kill_plan parsed;
  static kill_plan& read = read_plan("DURIN_KILL_AT", parsed);
  return read;
}

kill_plan& fail_at() {
  static kill_plan parsed;
  static kill_plan& read = read_plan("DURIN_FAIL_AT", parsed);
  return read;
}

kill_plan& slow_at() {
  static kill_plan parsed;
  static kill_plan& read = read_plan("DURIN_SLOW_AT", parsed);
  return read;
}

// Whether this reach of `name` is the planned hit.
bool planned_hit(kill_plan& current, const char* name) noexcept {
  // The common case: nothing planned, one predictable branch.
  if (!current.armed || std::strcmp(name, current.name) != 0) {
    return false;
  }
  return current.hits.fetch_add(1, std::memory_order_relaxed) + 1 ==
         current.at_hit;
}

}  // namespace

void reach(const char* name) noexcept {
  if (planned_hit(kill_at(), name)) {
    std::raise(SIGKILL);
  }
}

bool fails(const char* name) noexcept {
  return planned_hit(fail_at(), name);
}

void slow(const char* name) noexcept {
  const kill_plan& plan = slow_at();
  if (plan.armed && std::strcmp(name, plan.name) == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(plan.at_hit));
  }
}

}  // namespace durin::test_points

#endif  // DURIN_TEST_POINTS
