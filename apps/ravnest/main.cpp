// ravnest: the requester's command line. Thin: parses flags and calls the libraries.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "libs/graph/clusterize.h"

namespace {

int run_clusterize(const ravnest::graph::ClusterizeOptions& options) {
  auto result = ravnest::graph::clusterize(
      options, [](const std::string& line) { std::cout << line << '\n' << std::flush; });
  std::printf("\n%zu cluster(s), %zu node(s), estimated %.1f samples/s; plan written to %s\n",
              result.plan.clusters.size(), result.nodes.size(), result.plan.samples_per_second,
              options.out_dir.c_str());
  const auto& t = result.times;
  std::printf("phases: load %.2fs, profile %.2fs, plan %.2fs, cut %.2fs, save %.2fs", t.load,
              t.profile, t.plan, t.cut, t.save);
  if (options.verify) std::printf(", verify %.2fs", t.verify);
  std::printf("\n");
  if (options.verify) {
    std::printf("verify: largest absolute difference %.3g (tolerance %.0e)\n",
                result.verify_max_diff, options.verify_tolerance);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ravnest: train PyTorch models across many ordinary machines"};
  app.require_subcommand(1);

  ravnest::graph::ClusterizeOptions clusterize;
  auto* cmd = app.add_subcommand(
      "clusterize", "Profile a TorchScript model, group the nodes into clusters and cut the model "
                    "into one stage per node");
  cmd->add_option("model", clusterize.model_path, "TorchScript model (.pt) from torch.jit.script "
                                                  "or torch.jit.trace")
      ->required();
  cmd->add_option("--nodes", clusterize.nodes_path, "node pool, Ravnest's node_configs.json or "
                                                    "the same as TOML")
      ->capture_default_str();
  cmd->add_option("--example-input", clusterize.example_inputs,
                  "one per forward argument: SHAPE[:DTYPE[:HIGH]] such as 64x1x8x8:float32 or "
                  "64x11:int64, or a tensor saved with torch.save")
      ->take_all();
  cmd->add_option("--out", clusterize.out_dir, "output directory")->capture_default_str();
  cmd->add_option("--seed", clusterize.seed, "seed for example inputs and the planner")
      ->capture_default_str();
  cmd->add_flag("--verify", clusterize.verify,
                "chain the written stages in-process and compare with the whole model");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (cmd->parsed()) return run_clusterize(clusterize);
  } catch (const std::exception& e) {
    std::cerr << "ravnest: error: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
