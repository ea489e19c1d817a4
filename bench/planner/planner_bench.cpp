// bench_planner: plan_pool() on simulated pools (bench/planner/simulated_pool.h), timed, side by
// side with the search as it was before issue 26 (every pool searched whole) where that finishes.
//   bench_planner [--sizes 16,128,1000,10000] [--seed S] [--old-max N] [--continuous]
//                 [--stages K] [--clusters C] [--write-pool SIZE FILE]
//                 [--ravnest-model-mb] [--training-need-mb] [--seconds S]
//                 [--score-clusters SIZE FILE]
// One line per pool size and algorithm: nodes, algorithm, seconds, clusters, samples/s.
// --ravnest-model-mb: the profile's size as Ravnest's get_memory_reqs() counts it (MB);
// --training-need-mb: what this cost model says training it whole takes, in the units Ravnest
// reads a pool's RAM in (GB x 1024); either is the L of bench/planner/ravnest_ga.py. --score-clusters: another algorithm's clusters (FILE: a JSON list
// of lists of node ids of the simulated pool of SIZE) scored with this cost model, each cluster's
// pipeline chosen and cut by plan_pool() asked for one cluster; --seconds (before it) is the time
// that algorithm took, printed in its line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <fstream>
#include <iterator>
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

// Ravnest's get_memory_reqs(model, input_size): one sample's input, the outputs of every layer
// for the batch, and the parameters, in MB of 10^6 bytes, rounded up.
int64_t ravnest_model_mb(const planner::ModelProfile& profile) {
  double bytes = static_cast<double>(profile.input_bytes) / profile.batch_size +
                 static_cast<double>(profile.total_parameter_bytes());
  for (const auto& unit : profile.units) bytes += static_cast<double>(unit.activation_bytes);
  return static_cast<int64_t>(std::ceil(bytes / 1e6));
}

// A JSON list of lists of node ids; exits 2 naming the file on anything else.
std::vector<std::vector<int>> read_clusters(const std::string& path, size_t pool_size) {
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto fail = [&](const char* what) {
    std::fprintf(stderr, "bench_planner: %s: %s\n", path.c_str(), what);
    std::exit(2);
  };
  if (!in && text.empty()) fail("cannot read");
  std::vector<std::vector<int>> clusters;
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '[') {
      if (++depth > 2) fail("not a list of lists of node ids");
      if (depth == 2) clusters.emplace_back();
    } else if (c == ']') {
      if (--depth < 0) fail("unbalanced ]");
    } else if (c >= '0' && c <= '9') {
      if (depth != 2) fail("a node id outside a cluster's list");
      size_t end = i;
      while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
      const unsigned long id = std::stoul(text.substr(i, end - i));
      if (id >= pool_size) fail("a node id beyond the pool");
      clusters.back().push_back(static_cast<int>(id));
      i = end - 1;
    } else if (c != ',' && c != ' ' && c != '\n' && c != '\t' && c != '\r') {
      fail("not a list of lists of node ids");
    }
  }
  if (depth != 0 || clusters.empty()) fail("not a list of lists of node ids");
  return clusters;
}

// Each given cluster scored as its best single pipeline: for every stage count K the cluster can
// take, plan_pool() asked for one cluster of K stages picks K of its nodes and cuts the model (the
// nodes left out idle); the fastest counts. A cluster that cannot hold the model counts 0.
void score_clusters(const planner::ModelProfile& profile,
                    const std::vector<config::NodeConfig>& pool,
                    const std::vector<std::vector<int>>& clusters, uint64_t seed,
                    const std::string& seconds_taken) {
  const auto start = std::chrono::steady_clock::now();
  const size_t max_stages = planner::detail::Prepared(profile).max_stages;
  double total = 0;
  size_t feasible = 0, staged = 0;
  for (const auto& ids : clusters) {
    std::vector<config::NodeConfig> members;
    for (int id : ids) members.push_back(pool[id]);
    double best = 0;
    size_t best_stages = 0;
    for (size_t k = 1; k <= std::min(members.size(), max_stages); ++k) {
      planner::PlanningOptions one;
      one.clusters = 1;
      one.stages = static_cast<int>(k);
      try {
        const auto plan = planner::detail::plan_pool_with(profile, members, seed,
                                                          planner::detail::SearchOptions{}, one);
        if (!plan.clusters.empty() && plan.samples_per_second > best) {
          best = plan.samples_per_second;
          best_stages = k;
        }
      } catch (const planner::PoolTooSmall& e) {
        if (std::getenv("RAVNEST_BENCH_VERBOSE")) std::fprintf(stderr, "cluster: %s\n", e.what());
      }
    }
    if (best_stages == 0) continue;
    total += best;
    ++feasible;
    staged += best_stages;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%6zu  %-8s %8s s  %5zu clusters  %10.1f samples/s  %zu feasible, %zu nodes staged"
              " (scored in %.2f s)\n",
              pool.size(), "ga", seconds_taken.c_str(), clusters.size(), total, feasible, staged,
              seconds);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes{16, 128, 1000, 10000};
  uint64_t seed = 1;
  size_t old_max = 128;
  std::string seconds_taken = "?";  // --seconds: the other algorithm's time, for its line
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
    } else if (arg == "--ravnest-model-mb") {
      std::printf("%lld\n", static_cast<long long>(ravnest_model_mb(bench::resnet18_like_profile())));
      return 0;
    } else if (arg == "--seconds") {
      seconds_taken = next();
    } else if (arg == "--training-need-mb") {
      const auto profile = bench::resnet18_like_profile();
      config::NodeConfig big;
      big.ram_gb = 1e6;
      big.bandwidth_mbps = 1000;
      const double bytes =
          planner::stage_cost(profile, 0, profile.units.size(), big, 0).memory_bytes;
      std::printf("%lld\n", static_cast<long long>(std::ceil(bytes / 1e9 * 1024)));
      return 0;
    } else if (arg == "--score-clusters") {
      spec.nodes = std::stoul(next());
      spec.seed = seed;
      const auto pool = bench::simulated_pool(spec);
      const std::string file = next();
      score_clusters(bench::resnet18_like_profile(), pool, read_clusters(file, pool.size()), seed,
                     seconds_taken);
      return 0;
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
