// A node that races: round after round, 64 threads start a run with the same
// start token ("race:<round>"), until it is killed. Flow "hold" keeps its
// token by reading its start hook forever. Prints "ROUND <n>" as it goes.
//
// Usage: durin_race_child DATA_DIR FIRST_ROUND ROUNDS
#include <atomic>
#include <barrier>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "durin/durin.hpp"

namespace {

durin::flow<durin::json> hold(durin::context& ctx, durin::json input) {
  auto hook = ctx.create_hook<durin::json>({.token = input.at("token")});
  while (co_await hook.next()) {
  }
  co_return durin::json();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: durin_race_child DATA_DIR FIRST ROUNDS\n");
    return 2;
  }
  durin::registry flows;
  flows.flow("hold", hold);
  auto rt = durin::runtime::open({.data_dir = argv[1]}, flows);
  if (!rt) {
    std::fprintf(stderr, "%s\n", rt.error().to_string().c_str());
    return 1;
  }
  const int first = std::atoi(argv[2]);
  const int rounds = std::atoi(argv[3]);
  constexpr int racers = 64;
  std::string token;
  std::barrier start_line(racers + 1);
  std::barrier finish_line(racers + 1);
  std::vector<std::thread> threads;
  for (int i = 0; i < racers; ++i) {
    threads.emplace_back([&] {
      for (int round = 0; round < rounds; ++round) {
        start_line.arrive_and_wait();
        durin::start_options options;
        options.hook = durin::start_hook{token, nullptr, nullptr};
        (void)(*rt)->start("hold", {{"token", token}}, options);
        finish_line.arrive_and_wait();
      }
    });
  }
  for (int round = 0; round < rounds; ++round) {
    token = "race:" + std::to_string(first + round);
    start_line.arrive_and_wait();
    finish_line.arrive_and_wait();
    std::printf("ROUND %d\n", round);
    std::fflush(stdout);
  }
  for (auto& thread : threads) {
    thread.join();
  }
  std::printf("DONE\n");
  std::fflush(stdout);
  return 0;
}
