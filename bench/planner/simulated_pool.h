// Simulated node pools and a resnet18-like profile for bench/planner.sh: what issue 26 measured
// (RAM 20-160 MB, bandwidth 10-1000 Mbps, drawn with a seeded RNG), without LibTorch, so the
// planner alone is timed. Deterministic for a seed (a plain std::mt19937_64, no <random>
// distributions, whose algorithms differ between standard libraries).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "libs/config/pool/node_pool.h"
#include "libs/planner/model_profile.h"

namespace ravnest::bench {

struct PoolSpec {
  size_t nodes = 16;
  std::vector<double> ram_gb{0.02, 0.04, 0.08, 0.16};  // each node draws one, uniformly
  std::vector<double> bandwidth_mbps{10, 50, 100, 1000};
  // > 0: RAM drawn uniformly in [min, max] of ram_gb instead (every node its own kind).
  bool continuous = false;
  uint64_t seed = 1;
};

std::vector<config::NodeConfig> simulated_pool(const PoolSpec& spec);

// The pool as node_configs.json text, for `ravnest clusterize --nodes`.
std::string pool_json(const std::vector<config::NodeConfig>& pool);

// resnet18's shape on an 8x3x64x64 batch: 11.7M parameters growing with depth, activations
// shrinking, a cut allowed between residual blocks only.
planner::ModelProfile resnet18_like_profile();

}  // namespace ravnest::bench
