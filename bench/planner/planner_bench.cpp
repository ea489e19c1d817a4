// bench_planner: plan_pool() on simulated pools (bench/planner/simulated_pool.h), timed, side by
// side with the search as it was before issue 26 (every pool searched whole) where that finishes.
//   bench_planner [--sizes 16,128,1000,10000] [--seed S] [--old-max N] [--continuous]
//                 [--stages K] [--clusters C] [--write-pool SIZE FILE]
// One line per pool size and algorithm: nodes, algorithm, seconds, clusters, samples/s.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "bench/planner/simulated_pool.h"
#include "libs/planner/cluster_plan.h"
#include "libs/planner/planner_internal.h"

using namespace ravnest;

namespace {

planner::PlanningOptions layout;  // --stages, --clusters

void run(const char* name, const planner::ModelProfile& profile,
         const std::vector<config::NodeConfig>& pool, uint64_t seed,
         const planner::detail::SearchOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const auto plan = planner::detail::plan_pool_with(profile, pool, seed, options, layout);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%6zu  %-8s %8.2f s  %5zu clusters  %10.1f samples/s  %zu unplaced\n", pool.size(),
              name, seconds, plan.clusters.size(), plan.samples_per_second,
              plan.unplaced_nodes.size());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes{16, 128, 1000, 10000};
  uint64_t seed = 1;
  size_t old_max = 128;
  bench::PoolSpec spec;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_planner: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--sizes") {
      sizes.clear();
      std::stringstream list(next());
      for (std::string item; std::getline(list, item, ',');) sizes.push_back(std::stoul(item));
    } else if (arg == "--seed") {
      seed = std::stoull(next());
    } else if (arg == "--old-max") {
      old_max = std::stoul(next());
    } else if (arg == "--stages") {
      layout.stages = std::stoi(next());
    } else if (arg == "--clusters") {
      layout.clusters = std::stoi(next());
    } else if (arg == "--continuous") {
      spec.continuous = true;
    } else if (arg == "--write-pool") {
      spec.nodes = std::stoul(next());
      spec.seed = seed;
      std::ofstream(next()) << bench::pool_json(bench::simulated_pool(spec));
      return 0;
    } else {
      std::fprintf(stderr, "bench_planner: unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  const auto profile = bench::resnet18_like_profile();
  for (size_t size : sizes) {
    spec.nodes = size;
    spec.seed = seed;
    const auto pool = bench::simulated_pool(spec);
    run("now", profile, pool, seed, planner::detail::SearchOptions{});
    if (size <= old_max) {
      planner::detail::SearchOptions old;
      old.whole_pool_max_nodes = std::numeric_limits<size_t>::max();
      run("before", profile, pool, seed, old);
    }
  }
  return 0;
}
