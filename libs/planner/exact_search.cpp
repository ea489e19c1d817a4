// exact_division(): pools whose nodes fall into few kinds, divided into clusters exactly.
#include <algorithm>

#include "libs/planner/cluster_search.h"

namespace ravnest::planner::detail {
namespace {

// Pools whose nodes fall into few kinds are divided into clusters exactly, by a programme over
// the multisets of node kinds, when it has at most this many states and (state, part) pairs.
constexpr size_t kExactPoolStates = 1024;
constexpr size_t kExactPoolPairs = 100000;

}  // namespace

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
          if (needed <= 0 || can_reach(members, limit_for(needed, members.size()))) {
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

}  // namespace ravnest::planner::detail
