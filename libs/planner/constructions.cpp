// The starting divisions the local search improves: clusters closed as soon as they can hold
// the model, along a sequence of nodes (by RAM, or random), or built minimal around the largest
// nodes. Leftover nodes go where they cost least.
#include <algorithm>
#include <utility>

#include "libs/planner/cluster_search.h"

namespace ravnest::planner::detail {


// Puts each leftover node where it costs least; a node no cluster can take stays unplaced.
void Search::place_leftovers(Configuration* config, const std::vector<int>& leftovers) {
  for (int x : leftovers) {
    double best_gain = -kInfinity;
    const int best = best_home(config->clusters, x, &best_gain);
    if (best < 0) {
      config->unplaced.push_back(x);
    } else {
      insert_sorted(config->clusters[best], x);
    }
  }
  normalise(config);
}

int Search::best_home(const std::vector<Cluster>& clusters, int x, double* best_gain) {
  int best = -1;
  for (size_t c = 0; c < clusters.size(); ++c) {
    Cluster grown = clusters[c];
    insert_sorted(grown, x);
    const double v = value(grown);
    if (v < 0) continue;
    const double gain = v - value(clusters[c]);
    if (gain > *best_gain) {
      *best_gain = gain;
      best = static_cast<int>(c);
    }
  }
  return best;
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

}  // namespace ravnest::planner::detail
