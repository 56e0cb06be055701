// Goal: a token has one owner even when the node is killed (SIGKILL) in the
// middle of 64 concurrent starts with that token, and after it restarts.
// Method: a child node races round after round (tests/process/race_child);
// it is killed at random moments, restarted on the same data directory to
// race the same tokens again, and killed again. Then the store is read
// directly: for every token, at most one run was admitted with it, and the
// token's owner is that run.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <random>
#include <thread>

#include "persistence/store.hpp"
#include "tests/support/shard_dirs.hpp"
#include "tests/support/temp_dir.hpp"

namespace durin {
namespace {

pid_t spawn_race_child(const std::string& dir, int first, int rounds) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int null_fd = ::open("/dev/null", O_WRONLY);
    ::dup2(null_fd, STDOUT_FILENO);
    ::dup2(null_fd, STDERR_FILENO);
    auto first_text = std::to_string(first);
    auto rounds_text = std::to_string(rounds);
    ::execl(DURIN_RACE_CHILD, DURIN_RACE_CHILD, dir.c_str(), first_text.c_str(),
            rounds_text.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

TEST(RaceKillTest, OneOwnerPerTokenAcrossKillsMidRace) {
  testing::temp_dir dir;
  std::uint64_t seed = std::random_device{}();
  if (const char* env = std::getenv("DURIN_RACE_SEED")) {
    seed = std::stoull(env);
  }
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int> delay_ms(300, 1500);
  constexpr int rounds = 400;
  for (int kill = 0; kill < 8; ++kill) {
    // Each child races on from the tokens its predecessor reached, and
    // again over a few that are already held.
    std::size_t held = 0;
    for (const auto& shard : testing::shard_dirs(dir.path())) {
      auto store = persistence::store::open(shard);
      ASSERT_TRUE(store.ok());
      auto scan = (*store)->scan_runs({}, std::nullopt, std::nullopt, 1000);
      ASSERT_TRUE(scan.ok());
      held += scan->runs.size();
    }
    int first = std::max(0, static_cast<int>(held) - 3);
    pid_t child = spawn_race_child(dir.path(), first, rounds);
    ASSERT_GT(child, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(random)));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
  }
  // A start token's runs live in that token's shard, with the token.
  std::size_t checked = 0;
  for (const auto& shard : testing::shard_dirs(dir.path())) {
    auto store = persistence::store::open(shard);
    ASSERT_TRUE(store.ok()) << store.error().to_string();
    std::map<std::string, std::vector<std::string>> admitted;  // token -> runs
    std::string before;
    for (;;) {
      auto scan = (*store)->scan_runs(before, std::nullopt, std::nullopt, 1000);
      ASSERT_TRUE(scan.ok());
      for (auto& run : scan->runs) {
        admitted[run.start_token].push_back(run.id);
      }
      if (scan->next_before_id.empty()) {
        break;
      }
      before = scan->next_before_id;
    }
    checked += admitted.size();
    for (auto& [token, runs] : admitted) {
      ASSERT_FALSE(token.empty()) << "a race run without its start token";
      EXPECT_EQ(runs.size(), 1u)
          << "token " << token << " has " << runs.size() << " runs";
      auto owner = (*store)->get_token("default", token);
      ASSERT_TRUE(owner.ok());
      ASSERT_TRUE(owner->has_value()) << "token " << token << " has no owner";
      EXPECT_EQ((*owner)->owner_run, runs.front()) << "token " << token;
    }
  }
  ASSERT_GT(checked, 0u) << "the child never admitted a run";
  std::printf("%zu tokens raced for and checked\n", checked);
}

}  // namespace
}  // namespace durin
