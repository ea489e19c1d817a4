// plan_pool(): cluster formation. docs/planner.md describes the objective and the search.
#include "libs/planner/cluster_plan.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <stdexcept>
#include <utility>

#include "libs/planner/planner_internal.h"

namespace ravnest::planner {
namespace {

using config::NodeConfig;
using detail::kInfinity;
using detail::kRelativeTolerance;
using detail::NodeModel;
using detail::Partitioner;
using detail::Prepared;

// Pipeline orders are searched exhaustively (over distinct nodes) when the number of multisets
// the order programme walks stays this small: every cluster of up to 6 nodes, and larger ones
// made of few kinds of node.
constexpr size_t kExactOrderStates = 64;
// Pools whose nodes fall into few kinds are divided into clusters exactly, by a programme over
// the multisets of node kinds, when it has at most this many states and (state, part) pairs.
constexpr size_t kExactPoolStates = 1024;
constexpr size_t kExactPoolPairs = 100000;
constexpr size_t kSplitEnumerateMax = 10;  // clusters up to this size try every split in two
constexpr size_t kDissolveAssignments = 64;  // dissolving a cluster tries up to this many ways
constexpr double kMinBottleneck = 1e-12;   // seconds; keeps samples/s finite for empty profiles

using Cluster = std::vector<int>;  // indices into Search::nodes_, ascending

std::string format_bytes(double bytes) {
  char text[64];
  if (bytes >= 1e9) {
    std::snprintf(text, sizeof text, "%.1f GB", bytes / 1e9);
  } else if (bytes >= 1e6) {
    std::snprintf(text, sizeof text, "%.1f MB", bytes / 1e6);
  } else if (bytes >= 1e3) {
    std::snprintf(text, sizeof text, "%.1f kB", bytes / 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.0f bytes", bytes);
  }
  return text;
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

class Search {
 public:
  Search(const ModelProfile& profile, const std::vector<NodeConfig>& pool, uint64_t seed,
         const detail::SearchOptions& options)
      : profile_(profile), prepared_(profile), partitioner_(prepared_), rng_(seed),
        options_(options) {
    nodes_ = pool;
    std::sort(nodes_.begin(), nodes_.end(),
              [](const NodeConfig& a, const NodeConfig& b) { return a.id < b.id; });
    for (size_t i = 1; i < nodes_.size(); ++i) {
      if (nodes_[i].id == nodes_[i - 1].id) {
        throw std::invalid_argument("plan_pool: node id " + std::to_string(nodes_[i].id) +
                                    " appears twice in the pool");
      }
    }
    reference_gflops_ = detail::reference_gflops_of(nodes_);
    for (const auto& node : nodes_) models_.push_back(NodeModel::of(node, reference_gflops_));
    // Nodes equal in the cost model are interchangeable: sets are evaluated by kind.
    for (size_t i = 0; i < models_.size(); ++i) {
      size_t t = 0;
      while (t < kind_nodes_.size() && !models_[kind_nodes_[t][0]].same_as(models_[i])) ++t;
      if (t == kind_nodes_.size()) kind_nodes_.emplace_back();
      kind_nodes_[t].push_back(static_cast<int>(i));
      kind_of_.push_back(static_cast<int>(t));
    }
  }

  PoolPlan run();

 private:
  std::vector<NodeModel> models_of(const std::vector<int>& indices) const {
    std::vector<NodeModel> out;
    out.reserve(indices.size());
    for (int i : indices) out.push_back(models_[i]);
    return out;
  }

  // The set of the same kinds made of the first nodes of each kind: what sets_ is keyed by.
  Cluster canonical(const Cluster& members) const {
    std::vector<size_t> count(kind_nodes_.size(), 0);
    for (int i : members) ++count[kind_of_[i]];
    Cluster out;
    for (size_t t = 0; t < count.size(); ++t) {
      for (size_t c = 0; c < count[t]; ++c) out.push_back(kind_nodes_[t][c]);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  // The best pipeline order of `members` (their canonical set's, node for node of each kind).
  std::vector<int> order_of(const Cluster& members);
  bool exact_orders(const std::vector<NodeModel>& models) const {
    return models.size() >= 2 && Partitioner::order_states(models) <= kExactOrderStates;
  }
  std::vector<std::vector<int>> heuristic_orders(const Cluster& members) const;
  const SetInfo& evaluate(const Cluster& members);
  double value(const Cluster& members) {
    const SetInfo& set = evaluate(members);
    return set.feasible ? throughput(set.bottleneck) : -1;
  }
  double throughput(double bottleneck) const {
    return static_cast<double>(prepared_.batch_size) / std::max(bottleneck, kMinBottleneck);
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

  bool exact_division(Configuration* config);
  Configuration fill(const std::vector<int>& sequence);
  Configuration minimal_clusters();
  void place_leftovers(Configuration* config, const std::vector<int>& leftovers);
  void improve(Configuration* config);
  void normalise(Configuration* config);
  std::vector<int> random_sequence();
  [[noreturn]] void pool_too_small();

  const ModelProfile& profile_;
  Prepared prepared_;
  Partitioner partitioner_;
  std::mt19937_64 rng_;
  detail::SearchOptions options_;
  std::vector<NodeConfig> nodes_;  // sorted by id
  std::vector<NodeModel> models_;
  std::vector<int> kind_of_;                  // node -> kind
  std::vector<std::vector<int>> kind_nodes_;  // kind -> nodes, ascending
  double reference_gflops_ = 0;
  std::map<Cluster, SetInfo> sets_;
};

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
  if (set.evaluated) return set.feasible ? throughput(set.bottleneck) : -1;
  const std::vector<NodeModel> models = models_of(members);
  if (partitioner_.surely_infeasible(models)) {
    set.evaluated = true;
    return -1;
  }
  const double bound = std::max(partitioner_.lower_bound(models), set.known_below);
  return throughput(bound);
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

// The best division of the whole pool into feasible clusters, by a programme over multisets of
// node kinds: best[S] = max over parts P of S (holding one of S's first kind) of
// value(P) + best[S - P]. False when the pool has too many kinds for it, or no division
// places every node.
bool Search::exact_division(Configuration* config) {
  const size_t kinds = kind_nodes_.size();
  std::vector<size_t> stride(kinds);
  size_t states = 1, pairs = 1;
  for (size_t t = 0; t < kinds; ++t) {
    const size_t c = kind_nodes_[t].size();
    stride[t] = states;
    states *= c + 1;
    pairs *= (c + 1) * (c + 2) / 2;
    if (states > kExactPoolStates || pairs > kExactPoolPairs) return false;
  }
  auto decode = [&](size_t state) {
    std::vector<size_t> used(kinds);
    for (size_t t = kinds; t-- > 0;) {
      used[t] = state / stride[t];
      state %= stride[t];
    }
    return used;
  };
  auto set_of = [&](const std::vector<size_t>& used) {
    Cluster out;
    for (size_t t = 0; t < kinds; ++t) {
      for (size_t c = 0; c < used[t]; ++c) out.push_back(kind_nodes_[t][c]);
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  const double batch = static_cast<double>(prepared_.batch_size);
  std::vector<double> best(states, -1);
  std::vector<size_t> choice(states, 0);
  best[0] = 0;
  for (size_t state = 1; state < states; ++state) {
    const std::vector<size_t> used = decode(state);
    size_t first = 0;
    while (used[first] == 0) ++first;
    std::vector<size_t> part(kinds, 0);
    part[first] = 1;
    for (;;) {
      size_t code = 0;
      for (size_t t = 0; t < kinds; ++t) code += part[t] * stride[t];
      const double rest = best[state - code];
      if (rest >= 0) {
        const Cluster members = set_of(part);
        const double bound = optimistic(members);
        const double bar = best[state] < 0 ? -1 : best[state] * (1 + kRelativeTolerance);
        if (bound >= 0 && bound + rest > bar) {
          const double needed = bar - rest;
          if (needed <= 0 || can_reach(members, batch / needed)) {
            const double v = value(members);
            if (v >= 0 && v + rest > bar) {
              best[state] = v + rest;
              choice[state] = code;
            }
          }
        }
      }
      // Next part: an odometer over 0..used[t], with the first kind from 1.
      size_t t = 0;
      for (; t < kinds; ++t) {
        if (part[t] < used[t]) {
          ++part[t];
          break;
        }
        part[t] = t == first ? 1 : 0;
      }
      if (t == kinds) break;
    }
  }
  if (best[states - 1] < 0) return false;
  config->clusters.clear();
  config->unplaced.clear();
  std::vector<size_t> handed(kinds, 0);
  for (size_t state = states - 1; state > 0; state -= choice[state]) {
    const std::vector<size_t> part = decode(choice[state]);
    Cluster cluster;
    for (size_t t = 0; t < kinds; ++t) {
      for (size_t c = 0; c < part[t]; ++c) cluster.push_back(kind_nodes_[t][handed[t]++]);
    }
    config->clusters.push_back(cluster);
  }
  normalise(config);
  return true;
}

// Puts each leftover node where it costs least; a node no cluster can take stays unplaced.
void Search::place_leftovers(Configuration* config, const std::vector<int>& leftovers) {
  for (int x : leftovers) {
    int best = -1;
    double best_gain = -kInfinity;
    for (size_t c = 0; c < config->clusters.size(); ++c) {
      Cluster grown = config->clusters[c];
      grown.insert(std::upper_bound(grown.begin(), grown.end(), x), x);
      const double v = value(grown);
      if (v < 0) continue;
      const double gain = v - value(config->clusters[c]);
      if (gain > best_gain) {
        best_gain = gain;
        best = static_cast<int>(c);
      }
    }
    if (best < 0) {
      config->unplaced.push_back(x);
    } else {
      Cluster& c = config->clusters[best];
      c.insert(std::upper_bound(c.begin(), c.end(), x), x);
    }
  }
  normalise(config);
}

// Walks `sequence`, closing a cluster as soon as the nodes gathered can hold the model.
Configuration Search::fill(const std::vector<int>& sequence) {
  Configuration config;
  Cluster pending;
  for (int x : sequence) {
    pending.insert(std::upper_bound(pending.begin(), pending.end(), x), x);
    if (evaluate(pending).feasible) {
      config.clusters.push_back(pending);
      pending.clear();
    }
  }
  std::vector<int> leftovers;
  for (int x : sequence) {
    if (std::binary_search(pending.begin(), pending.end(), x)) leftovers.push_back(x);
  }
  place_leftovers(&config, leftovers);
  return config;
}

// Largest node first; completes each cluster with the smallest single node that makes it
// feasible, else adds the largest remaining node and tries again.
Configuration Search::minimal_clusters() {
  std::vector<int> remaining(nodes_.size());
  for (size_t i = 0; i < remaining.size(); ++i) remaining[i] = static_cast<int>(i);
  std::stable_sort(remaining.begin(), remaining.end(),
                   [&](int a, int b) { return nodes_[a].ram_gb > nodes_[b].ram_gb; });
  Configuration config;
  std::vector<int> leftovers;
  while (!remaining.empty()) {
    Cluster cluster{remaining.front()};
    remaining.erase(remaining.begin());
    bool feasible = evaluate(cluster).feasible;
    while (!feasible && !remaining.empty()) {
      for (size_t i = remaining.size(); i-- > 0;) {  // smallest first
        Cluster trial = cluster;
        trial.insert(std::upper_bound(trial.begin(), trial.end(), remaining[i]), remaining[i]);
        if (evaluate(trial).feasible) {
          cluster = trial;
          remaining.erase(remaining.begin() + static_cast<long>(i));
          feasible = true;
          break;
        }
      }
      if (feasible) break;
      const int x = remaining.front();
      remaining.erase(remaining.begin());
      cluster.insert(std::upper_bound(cluster.begin(), cluster.end(), x), x);
      feasible = evaluate(cluster).feasible;
    }
    if (feasible) {
      config.clusters.push_back(cluster);
    } else {
      leftovers.insert(leftovers.end(), cluster.begin(), cluster.end());
    }
  }
  place_leftovers(&config, leftovers);
  return config;
}

std::vector<int> Search::random_sequence() {
  std::vector<int> sequence(nodes_.size());
  for (size_t i = 0; i < sequence.size(); ++i) sequence[i] = static_cast<int>(i);
  // Fisher-Yates with plain modulo: std::shuffle's algorithm differs between libraries.
  for (size_t i = sequence.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng_() % i);
    std::swap(sequence[i - 1], sequence[j]);
  }
  return sequence;
}

// Best-improvement local search over: placing an unplaced node, moving a node to another or a
// new cluster, swapping two nodes, merging two clusters, splitting one in two.
void Search::improve(Configuration* config) {
  normalise(config);
  for (;;) {
    auto& clusters = config->clusters;
    // Placing a node first: a placed node outranks any throughput.
    if (!config->unplaced.empty()) {
      int best_cluster = -2, best_node = -1;
      double best_gain = -kInfinity;
      for (int x : config->unplaced) {
        if (value(Cluster{x}) >= 0) {
          best_cluster = -1;
          best_node = x;
          break;
        }
        for (size_t c = 0; c < clusters.size(); ++c) {
          Cluster grown = clusters[c];
          grown.insert(std::upper_bound(grown.begin(), grown.end(), x), x);
          const double v = value(grown);
          if (v >= 0 && v - value(clusters[c]) > best_gain) {
            best_gain = v - value(clusters[c]);
            best_cluster = static_cast<int>(c);
            best_node = x;
          }
        }
      }
      if (best_cluster != -2) {
        config->unplaced.erase(
            std::find(config->unplaced.begin(), config->unplaced.end(), best_node));
        if (best_cluster == -1) {
          clusters.push_back(Cluster{best_node});
        } else {
          Cluster& c = clusters[best_cluster];
          c.insert(std::upper_bound(c.begin(), c.end(), best_node), best_node);
        }
        normalise(config);
        continue;
      }
    }

    const double current = config->value;
    double best_gain = kRelativeTolerance * current;
    std::vector<size_t> best_removed;
    std::vector<Cluster> best_added;
    std::vector<double> values(clusters.size());
    for (size_t c = 0; c < clusters.size(); ++c) values[c] = value(clusters[c]);

    // Replaces clusters `removed` by `added` if that gains more than the best move so far.
    auto consider = [&](std::vector<size_t> removed, std::vector<Cluster> added) {
      double old = 0;
      for (size_t r : removed) old += values[r];
      std::vector<double> bounds(added.size());
      double bound_sum = 0;
      for (size_t i = 0; i < added.size(); ++i) {
        bounds[i] = optimistic(added[i]);
        if (bounds[i] < 0) return;
        bound_sum += bounds[i];
      }
      if (bound_sum - old <= best_gain) return;
      // One set at a time: each must reach the throughput the others leave it to make up.
      double sum = 0;
      for (size_t i = 0; i < added.size(); ++i) {
        double others = sum;
        for (size_t j = i + 1; j < added.size(); ++j) others += bounds[j];
        const double needed = old + best_gain - others;
        if (needed > 0) {
          const double limit = static_cast<double>(prepared_.batch_size) / needed;
          if (!can_reach(added[i], limit)) return;
        }
        const double v = value(added[i]);
        if (v < 0) return;
        sum += v;
      }
      if (sum - old > best_gain) {
        best_gain = sum - old;
        best_removed = std::move(removed);
        best_added = std::move(added);
      }
    };

    const size_t count = clusters.size();
    for (size_t a = 0; a < count; ++a) {
      if (clusters[a].size() < 2) continue;
      for (int x : clusters[a]) {
        Cluster rest;
        for (int y : clusters[a]) {
          if (y != x) rest.push_back(y);
        }
        for (size_t b = 0; b < count; ++b) {  // move x to cluster b
          if (b == a) continue;
          Cluster grown = clusters[b];
          grown.insert(std::upper_bound(grown.begin(), grown.end(), x), x);
          consider({a, b}, {rest, grown});
        }
        consider({a}, {rest, Cluster{x}});  // x on its own
      }
    }
    for (size_t a = 0; a < count; ++a) {  // swaps
      for (size_t b = a + 1; b < count; ++b) {
        for (int x : clusters[a]) {
          for (int y : clusters[b]) {
            if (models_[x].same_as(models_[y])) continue;
            Cluster na, nb;
            for (int z : clusters[a]) na.push_back(z == x ? y : z);
            for (int z : clusters[b]) nb.push_back(z == y ? x : z);
            std::sort(na.begin(), na.end());
            std::sort(nb.begin(), nb.end());
            consider({a, b}, {na, nb});
          }
        }
      }
    }
    for (size_t a = 0; a < count; ++a) {  // merges
      for (size_t b = a + 1; b < count; ++b) {
        Cluster merged = clusters[a];
        merged.insert(merged.end(), clusters[b].begin(), clusters[b].end());
        std::sort(merged.begin(), merged.end());
        consider({a, b}, {merged});
      }
    }
    // Two nodes taken from two clusters start a new one.
    for (size_t a = 0; a < count; ++a) {
      if (clusters[a].size() < 2) continue;
      for (size_t b = a + 1; b < count; ++b) {
        if (clusters[b].size() < 2) continue;
        for (int x : clusters[a]) {
          for (int y : clusters[b]) {
            Cluster na, nb;
            for (int z : clusters[a]) {
              if (z != x) na.push_back(z);
            }
            for (int z : clusters[b]) {
              if (z != y) nb.push_back(z);
            }
            consider({a, b}, {na, nb, Cluster{std::min(x, y), std::max(x, y)}});
          }
        }
      }
    }
    // A cluster dissolved into the others: every assignment of its nodes when there are few,
    // else each node where it gains most.
    if (count >= 2) {
      for (size_t a = 0; a < count; ++a) {
        const Cluster& gone = clusters[a];
        std::vector<size_t> others;
        for (size_t b = 0; b < count; ++b) {
          if (b != a) others.push_back(b);
        }
        size_t assignments = 1;
        for (size_t i = 0; i < gone.size() && assignments <= kDissolveAssignments; ++i) {
          assignments *= others.size();
        }
        std::vector<size_t> removed = others;
        removed.push_back(a);
        if (assignments <= kDissolveAssignments) {
          std::vector<size_t> target(gone.size(), 0);
          for (size_t code = 0; code < assignments; ++code) {
            size_t rest = code;
            for (size_t i = 0; i < gone.size(); ++i) {
              target[i] = rest % others.size();
              rest /= others.size();
            }
            std::vector<Cluster> grown;
            for (size_t o = 0; o < others.size(); ++o) {
              Cluster c = clusters[others[o]];
              for (size_t i = 0; i < gone.size(); ++i) {
                if (target[i] == o) c.push_back(gone[i]);
              }
              std::sort(c.begin(), c.end());
              grown.push_back(std::move(c));
            }
            consider(removed, grown);
          }
        } else {
          std::vector<Cluster> grown;
          for (size_t b : others) grown.push_back(clusters[b]);
          bool placed_all = true;
          for (int x : gone) {
            int best_o = -1;
            double best_o_gain = -kInfinity;
            for (size_t o = 0; o < grown.size(); ++o) {
              Cluster c = grown[o];
              c.insert(std::upper_bound(c.begin(), c.end(), x), x);
              const double v = value(c);
              if (v >= 0 && v - value(grown[o]) > best_o_gain) {
                best_o_gain = v - value(grown[o]);
                best_o = static_cast<int>(o);
              }
            }
            if (best_o < 0) {
              placed_all = false;
              break;
            }
            Cluster& c = grown[best_o];
            c.insert(std::upper_bound(c.begin(), c.end(), x), x);
          }
          if (placed_all) consider(removed, grown);
        }
      }
    }
    for (size_t a = 0; a < count; ++a) {  // splits
      const Cluster& c = clusters[a];
      const size_t m = c.size();
      if (m < 2) continue;
      if (m <= kSplitEnumerateMax) {
        const uint32_t masks = 1u << (m - 1);
        for (uint32_t mask = 0; mask + 1 < masks; ++mask) {
          Cluster first{c[0]}, second;
          for (size_t i = 1; i < m; ++i) ((mask >> (i - 1)) & 1u ? first : second).push_back(c[i]);
          consider({a}, {first, second});
        }
      } else {
        std::vector<int> by_ram = c;
        std::stable_sort(by_ram.begin(), by_ram.end(),
                         [&](int x, int y) { return nodes_[x].ram_gb > nodes_[y].ram_gb; });
        for (size_t cut = 1; cut < m; ++cut) {
          Cluster first(by_ram.begin(), by_ram.begin() + static_cast<long>(cut));
          Cluster second(by_ram.begin() + static_cast<long>(cut), by_ram.end());
          std::sort(first.begin(), first.end());
          std::sort(second.begin(), second.end());
          consider({a}, {first, second});
        }
        Cluster first, second;
        for (size_t i = 0; i < m; ++i) (i % 2 ? second : first).push_back(by_ram[i]);
        std::sort(first.begin(), first.end());
        std::sort(second.begin(), second.end());
        consider({a}, {first, second});
      }
    }

    if (best_added.empty()) return;
    std::sort(best_removed.rbegin(), best_removed.rend());
    for (size_t r : best_removed) clusters.erase(clusters.begin() + static_cast<long>(r));
    for (auto& c : best_added) clusters.push_back(std::move(c));
    normalise(config);
  }
}

void Search::pool_too_small() {
  const size_t n = prepared_.n;
  const double need =
      static_cast<double>(detail::raw_stage_bytes(profile_, 0, n)) * detail::kHeadroom;
  double total = 0;
  size_t largest = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    total += nodes_[i].ram_bytes();
    if (nodes_[i].ram_bytes() > nodes_[largest].ram_bytes()) largest = i;
  }
  std::string message = "model needs " + format_bytes(need) +
                        " to train (parameters, gradients, Adam state, activations of one batch)"
                        "; the pool has " + format_bytes(total) + " in all (" +
                        std::to_string(nodes_.size()) +
                        (nodes_.size() == 1 ? " node)" : " nodes)");
  if (need <= total) {
    const NodeConfig& big = nodes_[largest];
    const std::string largest_text =
        "the largest node, " + big.name + ", has " + format_bytes(big.ram_bytes());
    // The largest piece that cannot be cut.
    double worst = -1;
    std::pair<size_t, size_t> piece{0, 0};
    for (const auto& [first, end] : prepared_.segments) {
      const double bytes =
          static_cast<double>(detail::raw_stage_bytes(profile_, first, end)) * detail::kHeadroom;
      if (bytes > worst) {
        worst = bytes;
        piece = {first, end};
      }
    }
    if (worst > big.ram_bytes()) {
      const auto& units = profile_.units;
      if (piece.second - piece.first == 1) {
        message += ", but unit " + std::to_string(piece.first) + " (" + units[piece.first].label +
                   ") alone needs " + format_bytes(worst) + " on one node and " + largest_text;
      } else {
        message += ", but units " + std::to_string(piece.first) + ".." +
                   std::to_string(piece.second - 1) + " (" + units[piece.first].label + " .. " +
                   units[piece.second - 1].label +
                   ") cannot be cut apart and need " + format_bytes(worst) + " on one node; " +
                   largest_text;
      }
    } else {
      message += ", but no split of the model into contiguous stages fits the nodes' memory "
                 "(each stage also holds its inputs, and units do not divide evenly); " +
                 largest_text;
    }
  }
  throw PoolTooSmall(message);
}

PoolPlan Search::run() {
  if (nodes_.empty()) throw PoolTooSmall("the pool has no nodes");

  std::vector<int> by_ram(nodes_.size());
  for (size_t i = 0; i < by_ram.size(); ++i) by_ram[i] = static_cast<int>(i);
  std::stable_sort(by_ram.begin(), by_ram.end(),
                   [&](int a, int b) { return nodes_[a].ram_gb > nodes_[b].ram_gb; });

  Configuration best;
  if (!(options_.exact_small_pools && exact_division(&best))) {
    std::vector<Configuration> starts;
    starts.push_back(fill(by_ram));
    if (starts.front().clusters.empty()) pool_too_small();
    starts.push_back(minimal_clusters());
    bool have_best = false;
    auto better = [&](const Configuration& a, const Configuration& b) {
      if (a.unplaced.size() != b.unplaced.size()) return a.unplaced.size() < b.unplaced.size();
      return a.value > b.value * (1 + kRelativeTolerance);
    };
    for (int restart = 0; restart < 2 + options_.random_restarts; ++restart) {
      Configuration config =
          restart < static_cast<int>(starts.size()) ? starts[restart] : fill(random_sequence());
      if (config.clusters.empty()) continue;
      improve(&config);
      if (!have_best || better(config, best)) {
        best = config;
        have_best = true;
      }
    }
  }

  // Cluster ids follow the clusters' smallest node ids.
  std::sort(best.clusters.begin(), best.clusters.end());
  PoolPlan plan;
  for (const auto& members : best.clusters) {
    std::vector<NodeConfig> ordered;
    for (int i : order_of(members)) ordered.push_back(nodes_[i]);
    ClusterPlan cluster;
    cluster.id = static_cast<int>(plan.clusters.size());
    cluster.stages = partition(profile_, ordered, reference_gflops_);
    if (cluster.stages.empty()) {
      throw std::logic_error("plan_pool: a cluster found feasible did not partition");
    }
    double slowest = 0;
    for (const auto& stage : cluster.stages) slowest = std::max(slowest, stage.cost.step_seconds);
    cluster.samples_per_second = throughput(slowest);
    plan.samples_per_second += cluster.samples_per_second;
    plan.clusters.push_back(std::move(cluster));
  }
  for (int i : best.unplaced) plan.unplaced_nodes.push_back(nodes_[i].id);
  return plan;
}

}  // namespace

namespace detail {

PoolPlan plan_pool_with(const ModelProfile& profile, const std::vector<config::NodeConfig>& pool,
                        uint64_t seed, const SearchOptions& options) {
  validate_profile(profile);
  Search search(profile, pool, seed, options);
  return search.run();
}

}  // namespace detail

PoolPlan plan_pool(const ModelProfile& profile, const std::vector<config::NodeConfig>& pool,
                   uint64_t seed) {
  return detail::plan_pool_with(profile, pool, seed, detail::SearchOptions{});
}

}  // namespace ravnest::planner
