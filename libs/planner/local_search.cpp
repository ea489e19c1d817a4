// improve(): best-improvement local search over divisions of the pool.
#include <algorithm>
#include <utility>

#include "libs/planner/cluster_search.h"

namespace ravnest::planner::detail {
namespace {

constexpr size_t kSplitEnumerateMax = 10;  // clusters up to this size try every split in two
constexpr size_t kDissolveAssignments = 64;  // dissolving a cluster tries up to this many ways

}  // namespace

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

}  // namespace ravnest::planner::detail
