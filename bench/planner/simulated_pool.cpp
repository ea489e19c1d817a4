#include "bench/planner/simulated_pool.h"

#include <algorithm>
#include <random>

namespace ravnest::bench {

std::vector<config::NodeConfig> simulated_pool(const PoolSpec& spec) {
  std::mt19937_64 rng(spec.seed);
  const double lo = *std::min_element(spec.ram_gb.begin(), spec.ram_gb.end());
  const double hi = *std::max_element(spec.ram_gb.begin(), spec.ram_gb.end());
  std::vector<config::NodeConfig> pool;
  for (size_t i = 0; i < spec.nodes; ++i) {
    config::NodeConfig n;
    n.id = static_cast<int>(i);
    n.name = "node_" + std::to_string(i);
    n.host = "10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1);
    n.port = 8080;
    n.address = n.host + ":8080";
    if (spec.continuous) {
      const double u = static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
      n.ram_gb = lo + (hi - lo) * u;
    } else {
      n.ram_gb = spec.ram_gb[rng() % spec.ram_gb.size()];
    }
    n.bandwidth_mbps = spec.bandwidth_mbps[rng() % spec.bandwidth_mbps.size()];
    pool.push_back(n);
  }
  return pool;
}

std::string pool_json(const std::vector<config::NodeConfig>& pool) {
  std::string out = "{";
  for (size_t i = 0; i < pool.size(); ++i) {
    const auto& n = pool[i];
    out += (i ? ",\n" : "\n") + std::string("\"") + std::to_string(n.id) + "\": {\"IP\": \"" +
           n.address + "\", \"benchmarks\": {\"ram\": " + std::to_string(n.ram_gb) +
           ", \"bandwidth\": " + std::to_string(n.bandwidth_mbps) + "}}";
  }
  return out + "\n}\n";
}

planner::ModelProfile resnet18_like_profile() {
  planner::ModelProfile p;
  p.batch_size = 8;
  p.input_bytes = 8 * 3 * 64 * 64 * 4;
  p.output_bytes = 8 * 1000 * 4;
  // stem, 4 layers of 2 blocks (3 units each: conv, conv, add), head.
  struct Piece { int channels; int side; int64_t params; };
  std::vector<planner::Unit> units;
  auto add = [&](const std::string& label, double seconds, int64_t params, int64_t act) {
    planner::Unit u;
    u.label = label;
    u.forward_seconds = seconds;
    u.parameter_bytes = params;
    u.trainable_bytes = params;
    u.activation_bytes = act;
    p.units.push_back(u);
  };
  add("aten::conv2d conv1", 0.004, 9408 * 4, 8 * 64 * 32 * 32 * 4);
  add("aten::max_pool2d maxpool", 0.001, 0, 8 * 64 * 16 * 16 * 4);
  const int channels[] = {64, 128, 256, 512};
  int side = 16;
  for (int layer = 0; layer < 4; ++layer) {
    const int c = channels[layer];
    if (layer > 0) side /= 2;
    const int64_t act = int64_t{8} * c * side * side * 4;
    for (int block = 0; block < 2; ++block) {
      const std::string name = "layer" + std::to_string(layer + 1) + "." + std::to_string(block);
      const int64_t conv = int64_t{c} * c * 9 * 4;
      add("aten::conv2d " + name + ".conv1", 0.003, conv, act);
      add("aten::conv2d " + name + ".conv2", 0.003, conv, act);
      add("aten::add " + name, 0.0002, 0, act);
    }
  }
  add("aten::adaptive_avg_pool2d avgpool", 0.0002, 0, 8 * 512 * 4);
  add("aten::linear fc", 0.0005, 513 * 1000 * 4, 8 * 1000 * 4);
  const size_t n = p.units.size();
  p.boundary_bytes.resize(n - 1);
  p.cut_allowed.resize(n - 1);
  for (size_t i = 0; i + 1 < n; ++i) {
    // A block's inside carries its residual input too; cuts only after an add (or the stem,
    // the pool and the head's pieces).
    const bool after_add = p.units[i].label.rfind("aten::add", 0) == 0;
    p.cut_allowed[i] = after_add || i < 2 || i + 3 >= n;
    p.boundary_bytes[i] = p.units[i].activation_bytes * (after_add || i < 2 ? 1 : 2);
  }
  return p;
}

}  // namespace ravnest::bench
