// What the search knows of one set of nodes: its best pipeline order and bottleneck, or bounds
// on them, memoised by the set's kinds of node (cluster_search.h).
#include <algorithm>
#include <utility>

#include "libs/planner/cluster_search.h"

namespace ravnest::planner::detail {

std::vector<NodeModel> Search::models_of(const std::vector<int>& indices) const {
  std::vector<NodeModel> out;
  out.reserve(indices.size());
  for (int i : indices) out.push_back(models_[i]);
  return out;
}

Cluster Search::canonical(const Cluster& members) const {
  std::vector<size_t> count(kind_nodes_.size(), 0);
  for (int i : members) ++count[kind_of_[i]];
  Cluster out;
  for (size_t t = 0; t < count.size(); ++t) {
    for (size_t c = 0; c < count[t]; ++c) out.push_back(kind_nodes_[t][c]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::vector<int>> Search::heuristic_orders(const Cluster& members) const {
  std::vector<std::vector<int>> orders;
  auto add = [&](std::vector<int> order) {
    for (const auto& other : orders) {
      bool same = true;
      for (size_t i = 0; i < order.size() && same; ++i) {
        same = models_[order[i]].same_as(models_[other[i]]);
      }
      if (same) return;
    }
    orders.push_back(std::move(order));
  };
  add(members);  // by id
  // By the figures of the cost model, so that equal kinds always sort alike.
  auto by = [&](auto key) {
    std::vector<int> order = members;
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return key(models_[a]) > key(models_[b]); });
    add(order);
  };
  by([](const NodeModel& m) { return static_cast<double>(m.capacity); });  // RAM
  by([](const NodeModel& m) { return -m.beta; });                          // bandwidth
  by([](const NodeModel& m) { return -m.alpha; });                         // speed
  return orders;
}

std::vector<int> Search::order_of(const Cluster& members) {
  const SetInfo& set = evaluate(members);
  std::vector<std::vector<int>> by_kind(kind_nodes_.size());
  for (int i : members) by_kind[kind_of_[i]].push_back(i);
  std::vector<size_t> next(kind_nodes_.size(), 0);
  std::vector<int> order;
  for (int i : set.order) order.push_back(by_kind[kind_of_[i]][next[kind_of_[i]]++]);
  return order;
}

const SetInfo& Search::evaluate(const Cluster& given) {
  const Cluster members = canonical(given);
  SetInfo& set = sets_[members];
  if (set.evaluated) return set;
  set.evaluated = true;
  const std::vector<NodeModel> models = models_of(members);
  if (partitioner_.surely_infeasible(models)) return set;
  double best = kInfinity;
  std::vector<int> best_order;
  for (const auto& order : heuristic_orders(members)) {
    const double t = partitioner_.bottleneck(models_of(order), best);
    if (t < best) {
      best = t;
      best_order = order;
    }
  }
  if (exact_orders(models)) {
    // Every order at once: while some order beats the best so far, take it and optimise it.
    for (;;) {
      std::vector<int> positions;
      double worst = 0;
      const double target = best < kInfinity ? best * (1 - kRelativeTolerance) : kInfinity;
      if (!partitioner_.feasible_any_order(models, target, &positions, &worst)) break;
      std::vector<int> order;
      for (int p : positions) order.push_back(members[p]);
      const double t = partitioner_.bottleneck(models_of(order), best);
      if (!(t < best)) break;  // cannot happen: the witness itself beats `best`
      best = t;
      best_order = order;
    }
  }
  if (best < kInfinity) {
    set.feasible = true;
    set.bottleneck = best;
    set.order = best_order;
  }
  return set;
}

double Search::optimistic(const Cluster& given) {
  const Cluster members = canonical(given);
  SetInfo& set = sets_[members];
  if (set.evaluated) return set.feasible ? throughput(set.bottleneck, given.size()) : -1;
  const std::vector<NodeModel> models = models_of(members);
  if (partitioner_.surely_infeasible(models)) {
    set.evaluated = true;
    return -1;
  }
  const double bound = std::max(partitioner_.lower_bound(models), set.known_below);
  return throughput(bound, given.size());
}

bool Search::can_reach(const Cluster& given, double limit) {
  const Cluster members = canonical(given);
  SetInfo& set = sets_[members];
  if (!set.evaluated) {
    if (limit <= set.known_below) return false;
    const std::vector<NodeModel> models = models_of(members);
    if (partitioner_.surely_infeasible(models)) {
      set.evaluated = true;
      return false;
    }
    if (partitioner_.lower_bound(models) > limit) {
      set.known_below = std::max(set.known_below, limit);
      return false;
    }
    bool reachable = false;
    if (exact_orders(models)) {
      reachable = partitioner_.feasible_any_order(models, limit, nullptr, nullptr);
    } else {
      for (const auto& order : heuristic_orders(members)) {
        if (partitioner_.feasible(models_of(order), limit, nullptr)) {
          reachable = true;
          break;
        }
      }
    }
    if (!reachable) {
      set.known_below = std::max(set.known_below, limit);
      return false;
    }
  }
  const SetInfo& evaluated = evaluate(members);
  // The evaluated bottleneck is optimal to within the tolerance.
  return evaluated.feasible && evaluated.bottleneck <= limit * (1 + kRelativeTolerance);
}

void Search::normalise(Configuration* config) {
  for (auto& c : config->clusters) std::sort(c.begin(), c.end());
  std::sort(config->clusters.begin(), config->clusters.end());
  std::sort(config->unplaced.begin(), config->unplaced.end());
  config->value = total(config->clusters);
}

}  // namespace ravnest::planner::detail
