// improve(): best-improvement local search over divisions of the pool. Each round first places
// an unplaced node if any cluster (or the node alone) can take it; otherwise it scans every move
// below, keeps the one that gains most, and applies it; it stops when no move gains.
#include <algorithm>
#include <utility>

#include "libs/planner/cluster_search.h"

namespace ravnest::planner::detail {
namespace {

constexpr size_t kSplitEnumerateMax = 10;    // clusters up to this size try every split in two
constexpr size_t kDissolveAssignments = 64;  // dissolving a cluster tries up to this many ways

Cluster without(const Cluster& cluster, int x) {
  Cluster out;
  for (int y : cluster) {
    if (y != x) out.push_back(y);
  }
  return out;
}

}  // namespace

void Search::improve(Configuration* config) {
  normalise(config);
  for (;;) {
    // Placing a node first: a placed node outranks any throughput.
    if (place_one_unplaced(config)) continue;

    Round round{config->clusters, {}, kRelativeTolerance * config->value, {}, {}};
    for (const auto& cluster : config->clusters) round.values.push_back(value(cluster));
    try_moves(round);
    try_swaps(round);
    try_merges(round);
    try_new_pairs(round);
    try_dissolves(round);
    try_splits(round);
    if (round.added.empty()) return;

    auto& clusters = config->clusters;
    std::sort(round.removed.rbegin(), round.removed.rend());
    for (size_t r : round.removed) clusters.erase(clusters.begin() + static_cast<long>(r));
    for (auto& c : round.added) clusters.push_back(std::move(c));
    normalise(config);
  }
}

// The unplaced node that can stand alone (the first such), else the one whose placement gains
// most; false when no cluster can take any.
bool Search::place_one_unplaced(Configuration* config) {
  if (config->unplaced.empty()) return false;
  auto& clusters = config->clusters;
  int best_cluster = -2, best_node = -1;  // best_cluster -1: on its own
  double best_gain = -kInfinity;
  for (int x : config->unplaced) {
    if (value(Cluster{x}) >= 0) {
      best_cluster = -1;
      best_node = x;
      break;
    }
    const int home = best_home(clusters, x, &best_gain);
    if (home >= 0) {
      best_cluster = home;
      best_node = x;
    }
  }
  if (best_cluster == -2) return false;
  config->unplaced.erase(std::find(config->unplaced.begin(), config->unplaced.end(), best_node));
  if (best_cluster == -1) {
    clusters.push_back(Cluster{best_node});
  } else {
    insert_sorted(clusters[best_cluster], best_node);
  }
  normalise(config);
  return true;
}

// Replaces clusters `removed` by `added` in the round's best move if that gains more than it.
// Bounds first: each added set must reach the throughput the others leave it to make up, which
// is cheap to refute and spares evaluating most sets.
void Search::consider(Round& round, std::vector<size_t> removed, std::vector<Cluster> added) {
  double old = 0;
  for (size_t r : removed) old += round.values[r];
  std::vector<double> bounds(added.size());
  double bound_sum = 0;
  for (size_t i = 0; i < added.size(); ++i) {
    bounds[i] = optimistic(added[i]);
    if (bounds[i] < 0) return;
    bound_sum += bounds[i];
  }
  if (bound_sum - old <= round.gain) return;
  double sum = 0;
  for (size_t i = 0; i < added.size(); ++i) {
    double others = sum;
    for (size_t j = i + 1; j < added.size(); ++j) others += bounds[j];
    const double needed = old + round.gain - others;
    if (needed > 0) {
      const double limit = limit_for(needed, added[i].size());
      if (!can_reach(added[i], limit)) return;
    }
    const double v = value(added[i]);
    if (v < 0) return;
    sum += v;
  }
  if (sum - old > round.gain) {
    round.gain = sum - old;
    round.removed = std::move(removed);
    round.added = std::move(added);
  }
}

// A node moved to another cluster, or on its own.
void Search::try_moves(Round& round) {
  const auto& clusters = round.clusters;
  const size_t count = clusters.size();
  for (size_t a = 0; a < count; ++a) {
    if (clusters[a].size() < 2) continue;
    for (int x : clusters[a]) {
      const Cluster rest = without(clusters[a], x);
      for (size_t b = 0; b < count; ++b) {
        if (b == a) continue;
        Cluster grown = clusters[b];
        insert_sorted(grown, x);
        consider(round, {a, b}, {rest, grown});
      }
      consider(round, {a}, {rest, Cluster{x}});
    }
  }
}

// Two nodes of different kinds swapped between two clusters.
void Search::try_swaps(Round& round) {
  const auto& clusters = round.clusters;
  const size_t count = clusters.size();
  for (size_t a = 0; a < count; ++a) {
    for (size_t b = a + 1; b < count; ++b) {
      for (int x : clusters[a]) {
        for (int y : clusters[b]) {
          if (models_[x].same_as(models_[y])) continue;
          Cluster na, nb;
          for (int z : clusters[a]) na.push_back(z == x ? y : z);
          for (int z : clusters[b]) nb.push_back(z == y ? x : z);
          std::sort(na.begin(), na.end());
          std::sort(nb.begin(), nb.end());
          consider(round, {a, b}, {na, nb});
        }
      }
    }
  }
}

void Search::try_merges(Round& round) {
  const auto& clusters = round.clusters;
  const size_t count = clusters.size();
  for (size_t a = 0; a < count; ++a) {
    for (size_t b = a + 1; b < count; ++b) {
      Cluster merged = clusters[a];
      merged.insert(merged.end(), clusters[b].begin(), clusters[b].end());
      std::sort(merged.begin(), merged.end());
      consider(round, {a, b}, {merged});
    }
  }
}

// Two nodes taken from two clusters start a new one.
void Search::try_new_pairs(Round& round) {
  const auto& clusters = round.clusters;
  const size_t count = clusters.size();
  for (size_t a = 0; a < count; ++a) {
    if (clusters[a].size() < 2) continue;
    for (size_t b = a + 1; b < count; ++b) {
      if (clusters[b].size() < 2) continue;
      for (int x : clusters[a]) {
        for (int y : clusters[b]) {
          consider(round, {a, b},
                   {without(clusters[a], x), without(clusters[b], y),
                    Cluster{std::min(x, y), std::max(x, y)}});
        }
      }
    }
  }
}

// A cluster dissolved into the others: every assignment of its nodes when there are few, else
// each node where it gains most.
void Search::try_dissolves(Round& round) {
  const size_t count = round.clusters.size();
  if (count < 2) return;
  for (size_t a = 0; a < count; ++a) {
    const Cluster& gone = round.clusters[a];
    std::vector<size_t> others;
    for (size_t b = 0; b < count; ++b) {
      if (b != a) others.push_back(b);
    }
    size_t assignments = 1;
    for (size_t i = 0; i < gone.size() && assignments <= kDissolveAssignments; ++i) {
      assignments *= others.size();
    }
    if (assignments <= kDissolveAssignments) {
      dissolve_every_way(round, a, others, assignments);
    } else {
      dissolve_greedily(round, a, others);
    }
  }
}

// Each of the `assignments` ways to give cluster a's nodes to the `others` (numbered in base
// others.size()).
void Search::dissolve_every_way(Round& round, size_t a, const std::vector<size_t>& others,
                                size_t assignments) {
  const Cluster& gone = round.clusters[a];
  std::vector<size_t> removed = others;
  removed.push_back(a);
  std::vector<size_t> target(gone.size(), 0);
  for (size_t code = 0; code < assignments; ++code) {
    size_t rest = code;
    for (size_t i = 0; i < gone.size(); ++i) {
      target[i] = rest % others.size();
      rest /= others.size();
    }
    std::vector<Cluster> grown;
    for (size_t o = 0; o < others.size(); ++o) {
      Cluster c = round.clusters[others[o]];
      for (size_t i = 0; i < gone.size(); ++i) {
        if (target[i] == o) c.push_back(gone[i]);
      }
      std::sort(c.begin(), c.end());
      grown.push_back(std::move(c));
    }
    consider(round, removed, grown);
  }
}

// Cluster a's nodes one by one, each into the other cluster where it gains most; nothing when
// some node fits nowhere.
void Search::dissolve_greedily(Round& round, size_t a, const std::vector<size_t>& others) {
  std::vector<size_t> removed = others;
  removed.push_back(a);
  std::vector<Cluster> grown;
  for (size_t b : others) grown.push_back(round.clusters[b]);
  for (int x : round.clusters[a]) {
    double best_o_gain = -kInfinity;
    const int best_o = best_home(grown, x, &best_o_gain);
    if (best_o < 0) return;
    insert_sorted(grown[best_o], x);
  }
  consider(round, removed, grown);
}

// A cluster split in two: every way for small clusters, else by RAM (the largest nodes apart
// from the rest at every cut, and alternately).
void Search::try_splits(Round& round) {
  const auto& clusters = round.clusters;
  for (size_t a = 0; a < clusters.size(); ++a) {
    const Cluster& c = clusters[a];
    const size_t m = c.size();
    if (m < 2) continue;
    if (m <= kSplitEnumerateMax) {
      const uint32_t masks = 1u << (m - 1);
      for (uint32_t mask = 0; mask + 1 < masks; ++mask) {
        Cluster first{c[0]}, second;
        for (size_t i = 1; i < m; ++i) ((mask >> (i - 1)) & 1u ? first : second).push_back(c[i]);
        consider(round, {a}, {first, second});
      }
      continue;
    }
    std::vector<int> by_ram = c;
    std::stable_sort(by_ram.begin(), by_ram.end(),
                     [&](int x, int y) { return nodes_[x].ram_gb > nodes_[y].ram_gb; });
    for (size_t cut = 1; cut < m; ++cut) {
      Cluster first(by_ram.begin(), by_ram.begin() + static_cast<long>(cut));
      Cluster second(by_ram.begin() + static_cast<long>(cut), by_ram.end());
      std::sort(first.begin(), first.end());
      std::sort(second.begin(), second.end());
      consider(round, {a}, {first, second});
    }
    Cluster first, second;
    for (size_t i = 0; i < m; ++i) (i % 2 ? second : first).push_back(by_ram[i]);
    std::sort(first.begin(), first.end());
    std::sort(second.begin(), second.end());
    consider(round, {a}, {first, second});
  }
}

}  // namespace ravnest::planner::detail
