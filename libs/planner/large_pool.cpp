// plan_large_pool(): pools of thousands of nodes (docs/planner.md#large-pools). The whole-pool
// search grows about as the cube of the pool (rounds of best-improvement moves over every pair of
// clusters); here only a sample of the pool's node classes is searched, and its clusters are
// repeated. Identical clusters are cut at the same units, so their stages are the same files.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <tuple>
#include <utility>

#include "libs/planner/cluster_search.h"
#include "libs/planner/planner_internal.h"

namespace ravnest::planner::detail {
namespace {

using config::NodeConfig;

// Classes are within this ratio of each other in each figure (when the pool has more distinct
// nodes than kExactClasses).
constexpr double kClassStepsPerDoubling = 4;
constexpr size_t kExactClasses = 64;

// The largest grid value 2^(k/4) at or below x (0 stays 0).
double round_down(double x) {
  if (x <= 0) return x;
  const double k = std::floor(std::log2(x) * kClassStepsPerDoubling + 1e-9);
  return std::min(x, std::exp2(k / kClassStepsPerDoubling));
}

struct NodeClass {
  NodeConfig figures;        // the weakest figures of the class
  std::vector<size_t> members;  // indices into the pool, ascending id
};

std::vector<NodeClass> classes_of(const std::vector<NodeConfig>& pool) {
  using Key = std::tuple<double, double, double, double>;
  auto exact = [](const NodeConfig& n) {
    return Key{n.ram_gb, n.bandwidth_mbps, n.gflops, n.gpu_memory_gb};
  };
  std::map<Key, size_t> distinct;
  for (const auto& n : pool) {
    distinct.emplace(exact(n), 0);
    if (distinct.size() > kExactClasses) break;
  }
  const bool rounded = distinct.size() > kExactClasses;
  std::map<Key, size_t> index;
  std::vector<NodeClass> classes;
  for (size_t i = 0; i < pool.size(); ++i) {
    const NodeConfig& n = pool[i];
    Key key = exact(n);
    if (rounded) {
      key = Key{round_down(n.ram_gb), round_down(n.bandwidth_mbps), round_down(n.gflops),
                round_down(n.gpu_memory_gb)};
    }
    auto [it, added] = index.emplace(key, classes.size());
    if (added) {
      NodeClass c;
      c.figures = n;
      std::tie(c.figures.ram_gb, c.figures.bandwidth_mbps, c.figures.gflops,
               c.figures.gpu_memory_gb) = key;
      classes.push_back(c);
    }
    classes[it->second].members.push_back(i);
  }
  return classes;
}

// How many of each class the sample holds: the classes' shares of `size`, by largest remainder.
std::vector<size_t> sample_counts(const std::vector<NodeClass>& classes, size_t pool_size,
                                  size_t size) {
  std::vector<size_t> counts(classes.size());
  std::vector<std::pair<double, size_t>> remainders;
  size_t taken = 0;
  for (size_t c = 0; c < classes.size(); ++c) {
    const double share = static_cast<double>(classes[c].members.size()) *
                         static_cast<double>(size) / static_cast<double>(pool_size);
    counts[c] = static_cast<size_t>(std::floor(share));
    taken += counts[c];
    remainders.emplace_back(-(share - std::floor(share)), c);
  }
  std::sort(remainders.begin(), remainders.end());
  for (size_t r = 0; r < remainders.size() && taken < size; ++r, ++taken) {
    ++counts[remainders[r].second];
  }
  return counts;
}

double slowest_step(const ClusterPlan& cluster) {
  double slowest = 0;
  for (const auto& s : cluster.stages) slowest = std::max(slowest, s.cost.step_seconds);
  return slowest;
}

double samples_per_second(const ModelProfile& profile, const PlanningOptions& planning,
                          double slowest, size_t stages) {
  return static_cast<double>(profile.batch_size) /
         (std::max(slowest, kMinBottleneck) * bubble_factor(planning, stages));
}

}  // namespace

PoolPlan plan_large_pool(const ModelProfile& profile, const std::vector<NodeConfig>& pool,
                         uint64_t seed, const SearchOptions& options,
                         const PlanningOptions& planning) {
  SearchOptions whole = options;
  if (whole.reference_gflops <= 0) whole.reference_gflops = reference_gflops_of(pool);
  const double reference = whole.reference_gflops;
  std::vector<NodeConfig> nodes = pool;
  std::sort(nodes.begin(), nodes.end(),
            [](const NodeConfig& a, const NodeConfig& b) { return a.id < b.id; });
  const std::vector<NodeClass> classes = classes_of(nodes);

  // The sample, with its class's figures; a sample node's id is its class.
  const std::vector<size_t> counts =
      sample_counts(classes, nodes.size(), std::min(options.sample_nodes, nodes.size()));
  std::vector<NodeConfig> sample;
  std::vector<size_t> class_of_sample;
  for (size_t c = 0; c < classes.size(); ++c) {
    for (size_t k = 0; k < counts[c]; ++k) {
      NodeConfig n = classes[c].figures;
      n.id = static_cast<int>(sample.size());
      n.name = "node_" + std::to_string(n.id);
      sample.push_back(n);
      class_of_sample.push_back(c);
    }
  }
  PoolPlan sample_plan;
  try {
    Search search(profile, sample, seed, whole, planning);
    sample_plan = search.run();
  } catch (const PoolTooSmall&) {
    // The sample's classes hold no cluster (say the pool's few large nodes fell out of it):
    // plan the pool whole.
    Search search(profile, nodes, seed, whole, planning);
    return search.run();
  }

  // Repeat the sample's clusters, one of each per round, while their classes last.
  std::vector<size_t> next(classes.size(), 0);  // the next unused member of each class
  PoolPlan plan;
  for (bool placed = true; placed;) {
    placed = false;
    for (const auto& shape : sample_plan.clusters) {
      std::map<size_t, size_t> need;
      for (const auto& s : shape.stages) ++need[class_of_sample[s.node_id]];
      bool available = true;
      for (auto [c, k] : need) available = available && next[c] + k <= classes[c].members.size();
      if (!available) continue;
      ClusterPlan cluster;
      for (const auto& s : shape.stages) {
        const size_t c = class_of_sample[s.node_id];
        const NodeConfig& node = nodes[classes[c].members[next[c]++]];
        StagePlan stage = s;
        stage.node_id = node.id;
        // A node is at least as strong as its class: the cut still fits, and is no slower.
        stage.cost = stage_cost(profile, s.first_unit, s.end_unit, node, reference, planning,
                                shape.stages.size());
        cluster.stages.push_back(stage);
      }
      cluster.samples_per_second =
          samples_per_second(profile, planning, slowest_step(cluster), cluster.stages.size());
      plan.clusters.push_back(std::move(cluster));
      placed = true;
    }
  }

  // The nodes left over: planned whole when no more than a sample, else the same way again.
  std::vector<NodeConfig> leftovers;
  for (size_t c = 0; c < classes.size(); ++c) {
    for (size_t k = next[c]; k < classes[c].members.size(); ++k) {
      leftovers.push_back(nodes[classes[c].members[k]]);
    }
  }
  std::vector<int> unplaced;
  if (!leftovers.empty()) {
    PoolPlan rest;
    try {
      // More than a sample's worth: the same way again (each round places at least the
      // sample's clusters), which keeps a pool of many classes from a long whole search.
      if (leftovers.size() > options.sample_nodes && !plan.clusters.empty()) {
        rest = plan_large_pool(profile, leftovers, seed, whole, planning);
      } else {
        Search search(profile, leftovers, seed, whole, planning);
        rest = search.run();
      }
    } catch (const PoolTooSmall&) {
      for (const auto& n : leftovers) rest.unplaced_nodes.push_back(n.id);
    }
    for (auto& cluster : rest.clusters) plan.clusters.push_back(std::move(cluster));
    unplaced = rest.unplaced_nodes;
  }
  if (plan.clusters.empty()) {
    Search search(profile, nodes, seed, whole, planning);
    return search.run();  // throws PoolTooSmall with the pool's own figures
  }

  // A node that formed no cluster joins the cluster that loses least by taking it, at the
  // pipeline position that suits it best (every node is placed when it can be).
  std::map<int, const NodeConfig*> by_id;
  for (const auto& n : nodes) by_id[n.id] = &n;
  for (int id : unplaced) {
    const NodeConfig& x = *by_id.at(id);
    double best_gain = -kInfinity;
    ClusterPlan best;
    size_t best_index = 0;
    std::map<std::vector<std::pair<double, double>>, bool> tried;  // clusters alike in figures
    for (size_t c = 0; c < plan.clusters.size(); ++c) {
      const ClusterPlan& cluster = plan.clusters[c];
      std::vector<std::pair<double, double>> figures;
      for (const auto& s : cluster.stages) {
        figures.emplace_back(by_id.at(s.node_id)->ram_gb, by_id.at(s.node_id)->bandwidth_mbps);
      }
      if (!tried.emplace(figures, true).second) continue;
      for (size_t at = 0; at <= cluster.stages.size(); ++at) {
        std::vector<NodeConfig> ordered;
        for (const auto& s : cluster.stages) ordered.push_back(*by_id.at(s.node_id));
        ordered.insert(ordered.begin() + static_cast<long>(at), x);
        ClusterPlan grown;
        grown.stages = partition(profile, ordered, reference, planning);
        if (grown.stages.empty()) continue;
        grown.samples_per_second =
            samples_per_second(profile, planning, slowest_step(grown), grown.stages.size());
        const double gain = grown.samples_per_second - cluster.samples_per_second;
        if (gain > best_gain) {
          best_gain = gain;
          best = std::move(grown);
          best_index = c;
        }
      }
    }
    if (best.stages.empty()) {
      plan.unplaced_nodes.push_back(id);
    } else {
      plan.clusters[best_index] = std::move(best);
    }
  }

  // Clusters numbered by their smallest node id, as the whole-pool search numbers them.
  auto smallest = [](const ClusterPlan& c) {
    int m = c.stages.front().node_id;
    for (const auto& s : c.stages) m = std::min(m, s.node_id);
    return m;
  };
  std::sort(plan.clusters.begin(), plan.clusters.end(),
            [&](const ClusterPlan& a, const ClusterPlan& b) { return smallest(a) < smallest(b); });
  plan.samples_per_second = 0;
  for (size_t c = 0; c < plan.clusters.size(); ++c) {
    plan.clusters[c].id = static_cast<int>(c);
    plan.samples_per_second += plan.clusters[c].samples_per_second;
  }
  std::sort(plan.unplaced_nodes.begin(), plan.unplaced_nodes.end());
  return plan;
}

}  // namespace ravnest::planner::detail
