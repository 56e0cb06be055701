// Helpers shared by the persistence tests: a temporary directory removed
// afterwards, readable printing of durin's enums in GoogleTest messages, and
// the seed of randomized tests (printed, and taken from DURIN_TEST_SEED when
// set, so that any failing run can be repeated).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <ostream>
#include <random>
#include <string>

#include "durin/error.hpp"
#include "durin/run.hpp"
#include "persistence/store.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin {

inline void PrintTo(errc code, std::ostream* out) {
  *out << "errc(" << static_cast<int>(code) << ")";
}

inline void PrintTo(run_status status, std::ostream* out) {
  *out << "run_status(" << static_cast<int>(status) << ")";
}

}  // namespace durin

namespace durin::persistence::testing {

// A fresh directory under /tmp, removed with everything in it.
using durin::testing::temp_dir;

// The seed for a randomized test: DURIN_TEST_SEED if set, else random.
// Printed so that a failure can be replayed.
inline std::uint64_t test_seed() {
  std::uint64_t seed = 0;
  if (const char* text = std::getenv("DURIN_TEST_SEED"); text != nullptr) {
    seed = std::strtoull(text, nullptr, 10);
  } else {
    seed =
        (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  }
  std::cout << "[ seed     ] DURIN_TEST_SEED=" << seed << std::endl;
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  return seed;
}

// A real store on a fresh directory that a test may close and open again
// (reopen), as a restart would.
class reopenable_store : public ::testing::Test {
 protected:
  void SetUp() override { open(); }

  void open() {
    auto opened = store::open(dir_.path());
    ASSERT_TRUE(opened.ok()) << opened.error().message;
    store_ = std::move(*opened);
  }

  void reopen() {
    store_.reset();
    open();
  }

  temp_dir dir_;
  std::unique_ptr<store> store_;
};

}  // namespace durin::persistence::testing
