// The durin command line. `durin run FLOW` runs one flow on a node with an
// embedded store and prints the run and its history.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "bin/example_flows.hpp"
#include "durin/durin.hpp"

namespace {

int fail(const durin::error& err) {
  std::cerr << durin::to_code(err.code) << ": " << err.message << "\n";
  return 1;
}

int run_command(const std::string& data_dir, const std::string& flow,
                const std::string& input_text, int timeout_ms) {
  durin::json input;
  try {
    input = durin::json::parse(input_text);
  } catch (const durin::json::exception& e) {
    std::cerr << "invalid-input: --input is not JSON: " << e.what() << "\n";
    return 2;
  }
  durin::registry flows;
  durin::examples::register_examples(flows);
  auto rt = durin::runtime::open({.data_dir = data_dir}, flows);
  if (!rt) {
    return fail(rt.error());
  }
  auto started = (*rt)->start(flow, input);
  if (!started) {
    return fail(started.error());
  }
  auto done = (*rt)->wait(started->id, std::chrono::milliseconds(timeout_ms));
  if (!done) {
    return fail(done.error());
  }
  auto history = (*rt)->history(started->id);
  if (!history) {
    return fail(history.error());
  }
  durin::json events = durin::json::array();
  for (auto& event : *history) {
    events.push_back(event.to_json());
  }
  std::cout << durin::json{{"run", done->to_json()}, {"history", events}}.dump(
                   2)
            << "\n";
  return done->status == durin::run_status::completed ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"durin: durable workflows for C++"};
  app.require_subcommand(1);

  std::string data_dir = "./durin-data";
  std::string flow;
  std::string input = "{}";
  int timeout_ms = 60'000;
  auto* run = app.add_subcommand(
      "run", "run one flow on a local node and print the run and its history");
  run->add_option("flow", flow, "flow name, e.g. acme.review-order")
      ->required();
  run->add_option("--input", input, "the flow's input, as JSON");
  run->add_option("--data-dir", data_dir, "where the node keeps its store");
  run->add_option("--timeout-ms", timeout_ms, "how long to wait for the end");

  CLI11_PARSE(app, argc, argv);
  if (run->parsed()) {
    return run_command(data_dir, flow, input, timeout_ms);
  }
  return 2;
}
