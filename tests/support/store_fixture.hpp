// A fixture with a real store and its committer on a fresh temp dir, for
// tests of the parts built on them. Derived fixtures call SetUp() first and
// build on store_ and writer_; their own members go before these.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "persistence/committer.hpp"
#include "persistence/store.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin::testing {

class store_fixture : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = persistence::store::open(dir_.path());
    ASSERT_TRUE(opened.ok()) << opened.error().to_string();
    store_ = std::move(opened.value());
    writer_ = std::make_unique<persistence::committer>(*store_);
  }

  temp_dir dir_;
  std::unique_ptr<persistence::store> store_;
  std::unique_ptr<persistence::committer> writer_;
};

}  // namespace durin::testing
