// Private to libs/planner: the search behind plan_pool(), which divides a pool into clusters.
// docs/planner.md describes the objective and the search. Its parts, one file each:
//   cluster_plan.cpp    plan_pool() and Search::run(): the recipe, and the message when the
//                       pool is too small
//   cluster_sets.cpp    what the search knows of one set of nodes (best order, bottleneck,
//                       bounds), memoised by the set's kinds of node
//   constructions.cpp   starting divisions: filling clusters in a sequence, minimal clusters
//   local_search.cpp    improve(): best-improvement moves from a starting division
//   exact_search.cpp    exact_division(): pools of few kinds of node, divided exactly
// and beside the search: large_pool.cpp (pools over 128 nodes, from a sample of their classes)
// and layout.cpp (the stages and clusters a user asked for).
// A Search is used once, by one thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "libs/config/pool/node_pool.h"
#include "libs/planner/cluster_plan.h"
#include "libs/planner/model_profile.h"
#include "libs/planner/planner_internal.h"

namespace ravnest::planner::detail {

// Pipeline orders are searched exhaustively (over distinct nodes) when the number of multisets
// the order programme walks stays this small: every cluster of up to 6 nodes, and larger ones
// made of few kinds of node.
inline constexpr size_t kExactOrderStates = 64;
// Seconds; keeps samples/s finite for empty profiles.
inline constexpr double kMinBottleneck = 1e-12;

using Cluster = std::vector<int>;  // indices into Search::nodes_, ascending

inline void insert_sorted(Cluster& cluster, int x) {
  cluster.insert(std::upper_bound(cluster.begin(), cluster.end(), x), x);
}

// What the search knows of one set of nodes.
struct SetInfo {
  bool evaluated = false;
  bool feasible = false;
  double bottleneck = kInfinity;  // when evaluated and feasible
  std::vector<int> order;         // node indices, pipeline order
  double known_below = 0;         // no order tried reaches a bottleneck <= this
};

struct Configuration {
  std::vector<Cluster> clusters;  // sorted by first member
  std::vector<int> unplaced;      // ascending
  double value = 0;               // sum of the clusters' samples/s
};

// One round of improve(): the clusters as the round found them, their values, and the best
// move seen so far (clusters `removed` replaced by `added`, gaining `gain`).
struct Round {
  const std::vector<Cluster>& clusters;
  std::vector<double> values;
  double gain = 0;
  std::vector<size_t> removed;
  std::vector<Cluster> added;
};

class Search {
 public:
  // Throws std::invalid_argument when a node id appears twice in `pool`.
  // An asynchronous `planning` names its max_in_flight (plan_pool() settles it otherwise).
  Search(const ModelProfile& profile, const std::vector<config::NodeConfig>& pool, uint64_t seed,
         const SearchOptions& options, const PlanningOptions& planning);

  // Throws PoolTooSmall when no cluster can be formed.
  PoolPlan run();

 private:
  // cluster_sets.cpp
  std::vector<NodeModel> models_of(const std::vector<int>& indices) const;
  // The set of the same kinds made of the first nodes of each kind: what sets_ is keyed by.
  Cluster canonical(const Cluster& members) const;
  // The best pipeline order of `members` (their canonical set's, node for node of each kind).
  std::vector<int> order_of(const Cluster& members);
  bool exact_orders(const std::vector<NodeModel>& models) const {
    return models.size() >= 2 && Partitioner::order_states(models) <= kExactOrderStates;
  }
  std::vector<std::vector<int>> heuristic_orders(const Cluster& members) const;
  const SetInfo& evaluate(const Cluster& members);
  double value(const Cluster& members) {
    const SetInfo& set = evaluate(members);
    return set.feasible ? throughput(set.bottleneck, members.size()) : -1;
  }
  // Samples/s of a cluster of `stages` stages whose slowest step is `bottleneck`.
  double throughput(double bottleneck, size_t stages) const {
    return static_cast<double>(prepared_.batch_size) /
           (std::max(bottleneck, kMinBottleneck) * bubble_factor(planning_, stages));
  }
  // The bottleneck a cluster of `stages` stages must reach to make `samples_per_second`.
  double limit_for(double samples_per_second, size_t stages) const {
    return static_cast<double>(prepared_.batch_size) /
           (samples_per_second * bubble_factor(planning_, stages));
  }
  // An upper bound of value(members), or -1 when the set surely cannot hold the model.
  double optimistic(const Cluster& members);
  // Could `members` reach a bottleneck <= limit? Cheap when it cannot; evaluates it when it can.
  bool can_reach(const Cluster& members, double limit);
  double total(const std::vector<Cluster>& clusters) {
    double sum = 0;
    for (const auto& c : clusters) sum += value(c);
    return sum;
  }
  void normalise(Configuration* config);

  // exact_search.cpp
  bool exact_division(Configuration* config);

  // constructions.cpp
  Configuration fill(const std::vector<int>& sequence);
  Configuration minimal_clusters();
  void place_leftovers(Configuration* config, const std::vector<int>& leftovers);
  // The cluster that gains most by taking node x, when that beats *best_gain (then updated);
  // -1 when none does.
  int best_home(const std::vector<Cluster>& clusters, int x, double* best_gain);
  std::vector<int> random_sequence();

  // local_search.cpp
  void improve(Configuration* config);
  bool place_one_unplaced(Configuration* config);
  void consider(Round& round, std::vector<size_t> removed, std::vector<Cluster> added);
  void try_moves(Round& round);
  void try_swaps(Round& round);
  void try_merges(Round& round);
  void try_new_pairs(Round& round);
  void try_dissolves(Round& round);
  void dissolve_every_way(Round& round, size_t a, const std::vector<size_t>& others,
                          size_t assignments);
  void dissolve_greedily(Round& round, size_t a, const std::vector<size_t>& others);
  void try_splits(Round& round);

  // cluster_plan.cpp
  // The best of improve() from the constructions and from random restarts.
  Configuration best_local_search();
  PoolPlan plan_of(Configuration best);
  [[noreturn]] void pool_too_small();

  const ModelProfile& profile_;
  PlanningOptions planning_;
  Prepared prepared_;
  Partitioner partitioner_;
  std::mt19937_64 rng_;
  SearchOptions options_;
  std::vector<config::NodeConfig> nodes_;     // sorted by id
  std::vector<NodeModel> models_;
  std::vector<int> kind_of_;                  // node -> kind
  std::vector<std::vector<int>> kind_nodes_;  // kind -> nodes, ascending
  double reference_gflops_ = 0;
  std::map<Cluster, SetInfo> sets_;
};

}  // namespace ravnest::planner::detail
