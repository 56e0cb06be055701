// Counters the gateway exports on GET /metrics in the Prometheus text format:
// requests by route and status, request latency, starts and idempotency
// outcomes. Lock-free counters; every method may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "base/latency_histogram.hpp"

namespace durin::gateway {

class metrics {
 public:
  // Route families the counters are labelled with.
  enum class route : std::uint8_t {
    health,
    metrics,
    start,
    get_run,
    list_runs,
    history,
    cancel,
    hooks,
    webhooks,
    api_keys,
    tenants,
    messages,
    other,
    count_
  };

  void observe(route which, unsigned status, std::int64_t latency_us);
  void count_replay() { replays_.fetch_add(1, std::memory_order_relaxed); }
  void count_refusal() { refusals_.fetch_add(1, std::memory_order_relaxed); }
  void count_start() { starts_.fetch_add(1, std::memory_order_relaxed); }
  // A waited start taken on the io thread that a worker answered after all.
  void count_hand_over() {
    hand_overs_.fetch_add(1, std::memory_order_relaxed);
  }
  void count_run_status(std::string_view status);
  // Long polls of a run (GET /v1/runs/{id}?waitMs=) parked now: one more
  // as each is parked, one less as it is answered.
  void run_wait_parked() { run_waits_.fetch_add(1, std::memory_order_relaxed); }
  void run_wait_answered() {
    run_waits_.fetch_sub(1, std::memory_order_relaxed);
  }

  // The text exposition; `extra` appends more lines (commit statistics).
  std::string render(const std::string& extra) const;

 private:
  static constexpr std::size_t route_count =
      static_cast<std::size_t>(route::count_);
  static constexpr std::size_t status_classes = 6;  // 0xx..5xx
  std::array<std::array<std::atomic<std::uint64_t>, status_classes>,
             route_count>
      requests_{};
  latency_histogram latency_;
  std::atomic<std::uint64_t> replays_{0};
  std::atomic<std::uint64_t> refusals_{0};
  std::atomic<std::uint64_t> starts_{0};
  std::atomic<std::uint64_t> hand_overs_{0};
  std::atomic<std::int64_t> run_waits_{0};
  std::array<std::atomic<std::uint64_t>, 8> run_status_{};
};

}  // namespace durin::gateway
