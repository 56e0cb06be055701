// A latency histogram exported on /metrics in the Prometheus text format:
// fixed bucket bounds, lock-free counts. observe() may be called from any
// thread; render() reads each bucket once, so a scrape taken while
// observations land may miss the newest of them, but its buckets are
// cumulative and never decrease from one scrape to the next.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace durin {

class latency_histogram {
 public:
  // Upper bounds of the buckets in microseconds (the last bucket, +Inf,
  // takes the rest).
  static constexpr std::array<std::int64_t, 10> bounds_us = {
      100, 250, 500, 1'000, 2'500, 5'000, 10'000, 50'000, 250'000, 1'000'000};

  void observe(std::int64_t latency_us) {
    if (latency_us < 0) {
      latency_us = 0;  // a clock read on two threads, never a negative time
    }
    std::size_t bucket = 0;
    while (bucket < bounds_us.size() && latency_us > bounds_us[bucket]) {
      ++bucket;
    }
    counts_[bucket].fetch_add(1, std::memory_order_relaxed);
    sum_us_.fetch_add(static_cast<std::uint64_t>(latency_us),
                      std::memory_order_relaxed);
  }

  template <class Rep, class Period>
  void observe(std::chrono::duration<Rep, Period> latency) {
    observe(
        std::chrono::duration_cast<std::chrono::microseconds>(latency).count());
  }

  // Appends the series `name` (in seconds): HELP, TYPE, the cumulative
  // buckets, _sum and _count.
  void render(std::string& out, std::string_view name,
              std::string_view help) const {
    const std::string series(name);
    out += "# HELP " + series + " " + std::string(help) + "\n";
    out += "# TYPE " + series + " histogram\n";
    std::uint64_t cumulative = 0;
    for (std::size_t b = 0; b <= bounds_us.size(); ++b) {
      cumulative += counts_[b].load(std::memory_order_relaxed);
      const std::string le =
          b < bounds_us.size()
              ? std::to_string(static_cast<double>(bounds_us[b]) / 1e6)
              : "+Inf";
      out += series + "_bucket{le=\"" + le + "\"} " +
             std::to_string(cumulative) + "\n";
    }
    out += series + "_sum " +
           std::to_string(
               static_cast<double>(sum_us_.load(std::memory_order_relaxed)) /
               1e6) +
           "\n";
    out += series + "_count " + std::to_string(cumulative) + "\n";
  }

 private:
  std::array<std::atomic<std::uint64_t>, bounds_us.size() + 1> counts_{};
  std::atomic<std::uint64_t> sum_us_{0};
};

}  // namespace durin
