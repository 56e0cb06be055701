// Goal: a node tells a copy of a shard that held the shard's history from
// one that did not (cluster/copy_marks.hpp): a directory a node made afresh
// (its data directory deleted) is unmarked, even once its store opened it
// behind a closed fence; a mark, durable, makes it a copy; a RocksDB made
// by a build from before marks counts as one. Real RocksDB in a temporary
// directory.
#include "cluster/copy_marks.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "persistence/fence.hpp"
#include "persistence/store.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin::testing {
namespace {

TEST(CopyMarkTest, AFreshDirectoryIsNoCopyUntilMarked) {
  temp_dir dir;
  const auto shard = dir.path() + "/shards/000";
  EXPECT_FALSE(cluster::copy_marked(shard));  // absent
  {
    // A node restarted on an empty data directory opens its shard's store
    // behind a closed fence: nothing of RocksDB is made yet.
    persistence::store_options options;
    options.fence = std::make_shared<persistence::fence>();
    auto opened = persistence::store::open(shard, options);
    ASSERT_TRUE(opened) << opened.error().to_string();
  }
  EXPECT_FALSE(cluster::copy_marked(shard));
  ASSERT_TRUE(cluster::mark_copy(shard));
  EXPECT_TRUE(cluster::copy_marked(shard));
  EXPECT_TRUE(cluster::mark_copy(shard));  // again: no change, no error
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(shard) /
                                      cluster::copy_mark_name));
  std::filesystem::remove_all(dir.path() + "/shards");
  EXPECT_FALSE(cluster::copy_marked(shard));  // deleted with its directory
}

TEST(CopyMarkTest, ADatabaseFromBeforeMarksCountsAsACopy) {
  temp_dir dir;
  {
    auto opened = persistence::store::open(dir.path(), {});
    ASSERT_TRUE(opened) << opened.error().to_string();
  }
  EXPECT_TRUE(cluster::copy_marked(dir.path()));
}

}  // namespace
}  // namespace durin::testing
