// A fixture for tests of the runtime: a real store in a fresh temp dir, a
// manual clock (move time with clock_->advance_ms), and a registry the test
// fills before open().
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "durin/durin.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin::testing {

class runtime_fixture : public ::testing::Test {
 protected:
  std::unique_ptr<runtime> open(
      std::chrono::milliseconds passivate_after = std::chrono::seconds(2)) {
    runtime_options options;
    options.data_dir = dir_.path();
    options.clock = clock_;
    options.passivate_after = passivate_after;
    auto opened = runtime::open(options, flows_);
    EXPECT_TRUE(opened.ok()) << (opened ? "" : opened.error().to_string());
    return opened ? std::move(*opened) : nullptr;
  }

  static bool status_is(runtime& rt, const std::string& id, run_status s) {
    auto now = rt.get(id);
    return now && now->status == s;
  }

  // Events of `kind` ("hook-payload", ...) in the run's history.
  static std::size_t count_events(runtime& rt, const std::string& id,
                                  std::string_view kind) {
    std::size_t n = 0;
    auto events = rt.history(id);
    for (auto& event : *events) {
      n += event.kind == kind ? 1 : 0;
    }
    return n;
  }

  temp_dir dir_;
  std::shared_ptr<manual_clock> clock_ =
      std::make_shared<manual_clock>(1'800'000'000'000);
  registry flows_;
};

}  // namespace durin::testing
