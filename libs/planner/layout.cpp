// plan_layout(): the clusters and stages the user asked for (docs/planner.md#layout-on-request).
// The sizes are fixed by the request; the search chooses the nodes (the strongest first, dealt
// in a snake so clusters start even), then swaps nodes between clusters, and with the nodes left
// out, while a swap makes a cluster feasible or the pool faster. Each cluster's order is the
// best of a few (by memory, bandwidth, speed, id), partitioned exactly.
#include <algorithm>
#include <utility>

#include "libs/base/byte_size.h"
#include "libs/planner/cluster_search.h"
#include "libs/planner/planner_internal.h"

namespace ravnest::planner::detail {
namespace {

using config::NodeConfig;

constexpr int kSwapPasses = 4;
constexpr size_t kSwapMaxNodes = 96;  // larger layouts keep the snake's choice

struct Layout {
  const ModelProfile& profile;
  const PlanningOptions& planning;
  const std::vector<NodeConfig>& nodes;  // strongest first
  double reference;

  // The best of a few orders of `members`; empty stages when none fits.
  ClusterPlan plan(const std::vector<int>& members) const {
    std::vector<std::vector<int>> orders(4, members);
    auto by = [&](std::vector<int>& o, auto key) {
      std::stable_sort(o.begin(), o.end(), [&](int a, int b) { return key(a) > key(b); });
    };
    by(orders[0], [&](int i) { return nodes[i].ram_gb; });
    by(orders[1], [&](int i) { return nodes[i].bandwidth_mbps; });
    by(orders[2], [&](int i) { return nodes[i].gflops; });
    by(orders[3], [&](int i) { return -nodes[i].id; });
    ClusterPlan best;
    for (const auto& order : orders) {
      std::vector<NodeConfig> ordered;
      for (int i : order) ordered.push_back(nodes[i]);
      ClusterPlan c;
      c.stages = partition(profile, ordered, reference, planning);
      if (c.stages.empty()) continue;
      double slowest = 0;
      for (const auto& s : c.stages) slowest = std::max(slowest, s.cost.step_seconds);
      c.samples_per_second = static_cast<double>(profile.batch_size) /
                             (std::max(slowest, kMinBottleneck) *
                              bubble_factor(planning, c.stages.size()));
      if (best.stages.empty() || c.samples_per_second > best.samples_per_second) best = c;
    }
    return best;
  }
  // Feasible clusters count first: a large bonus each.
  double score(const ClusterPlan& c) const {
    return c.stages.empty() ? 0 : 1e12 + c.samples_per_second;
  }
};

std::string layout_text(size_t clusters, size_t stages) {
  auto count = [](size_t k, const char* one, const char* many) {
    return std::to_string(k) + " " + (k == 1 ? one : many);
  };
  return count(clusters, "cluster", "clusters") + " of " + count(stages, "stage", "stages");
}

}  // namespace

PoolPlan plan_layout(const ModelProfile& profile, const std::vector<NodeConfig>& pool,
                     const PlanningOptions& planning) {
  if (pool.empty()) throw PoolTooSmall("the pool has no nodes");
  std::vector<NodeConfig> nodes = pool;
  // Strongest first: memory, then bandwidth, then speed; ids break ties.
  std::sort(nodes.begin(), nodes.end(), [](const NodeConfig& a, const NodeConfig& b) {
    if (a.ram_gb != b.ram_gb) return a.ram_gb > b.ram_gb;
    if (a.bandwidth_mbps != b.bandwidth_mbps) return a.bandwidth_mbps > b.bandwidth_mbps;
    if (a.gflops != b.gflops) return a.gflops > b.gflops;
    return a.id < b.id;
  });
  const Layout layout{profile, planning, nodes, reference_gflops_of(pool)};
  const size_t n = nodes.size();
  const Prepared prepared(profile);
  const size_t asked_stages = static_cast<size_t>(planning.stages);
  const size_t asked_clusters = static_cast<size_t>(planning.clusters);
  if (asked_stages > prepared.max_stages) {
    throw PoolTooSmall("the model can be cut into at most " + std::to_string(prepared.max_stages) +
                       " stages (where its graph allows a cut), not " +
                       std::to_string(asked_stages));
  }
  const size_t need_nodes = std::max<size_t>(asked_stages, 1) * std::max<size_t>(asked_clusters, 1);
  if (need_nodes > n) {
    throw PoolTooSmall(
        (asked_stages && asked_clusters ? layout_text(asked_clusters, asked_stages)
         : asked_stages                 ? std::to_string(asked_stages) + " stages"
                                        : std::to_string(asked_clusters) + " clusters") +
        " need " + std::to_string(need_nodes) + " nodes; the pool has " + std::to_string(n));
  }

  // Sizes of the clusters for a number of clusters.
  auto sizes_for = [&](size_t clusters) {
    std::vector<size_t> sizes(clusters, asked_stages);
    if (asked_stages == 0) {  // every node placed, sizes as even as they go
      for (size_t c = 0; c < clusters; ++c) sizes[c] = n / clusters + (c < n % clusters ? 1 : 0);
    }
    return sizes;
  };
  // The search for one set of sizes; false when some cluster stays infeasible.
  auto search = [&](const std::vector<size_t>& sizes, PoolPlan* out) {
    std::vector<std::vector<int>> clusters(sizes.size());
    size_t used = 0;
    for (size_t round = 0;; ++round) {  // the snake: 0..C-1, C-1..0, ...
      bool any = false;
      for (size_t k = 0; k < sizes.size(); ++k) {
        const size_t c = round % 2 == 0 ? k : sizes.size() - 1 - k;
        if (clusters[c].size() < sizes[c]) {
          clusters[c].push_back(static_cast<int>(used++));
          any = true;
        }
      }
      if (!any) break;
    }
    std::vector<int> spare;
    for (size_t i = used; i < n; ++i) spare.push_back(static_cast<int>(i));
    std::vector<ClusterPlan> plans;
    for (const auto& c : clusters) plans.push_back(layout.plan(c));
    if (used <= kSwapMaxNodes) {
      for (int pass = 0; pass < kSwapPasses; ++pass) {
        bool improved = false;
        for (size_t a = 0; a < clusters.size(); ++a) {
          // Swaps with another cluster (b > a), or with a spare node (b == clusters.size()).
          for (size_t b = a + 1; b <= clusters.size(); ++b) {
            const bool with_spare = b == clusters.size();
            auto& other = with_spare ? spare : clusters[b];
            for (size_t i = 0; i < clusters[a].size(); ++i) {
              for (size_t j = 0; j < other.size(); ++j) {
                const NodeConfig& x = nodes[clusters[a][i]];
                const NodeConfig& y = nodes[other[j]];
                if (x.ram_gb == y.ram_gb && x.bandwidth_mbps == y.bandwidth_mbps &&
                    x.gflops == y.gflops) {
                  continue;
                }
                std::swap(clusters[a][i], other[j]);
                ClusterPlan pa = layout.plan(clusters[a]);
                ClusterPlan pb = with_spare ? ClusterPlan{} : layout.plan(clusters[b]);
                const double before =
                    layout.score(plans[a]) + (with_spare ? 0 : layout.score(plans[b]));
                const double after = layout.score(pa) + (with_spare ? 0 : layout.score(pb));
                if (after > before * (1 + kRelativeTolerance)) {
                  plans[a] = std::move(pa);
                  if (!with_spare) plans[b] = std::move(pb);
                  improved = true;
                } else {
                  std::swap(clusters[a][i], other[j]);
                }
              }
            }
          }
        }
        if (!improved) break;
      }
    }
    for (const auto& p : plans) {
      if (p.stages.empty()) return false;
    }
    PoolPlan plan;
    for (auto& p : plans) plan.clusters.push_back(std::move(p));
    for (int i : spare) plan.unplaced_nodes.push_back(nodes[i].id);
    *out = std::move(plan);
    return true;
  };

  PoolPlan plan;
  bool found = false;
  if (asked_clusters > 0) {
    found = search(sizes_for(asked_clusters), &plan);
  } else {
    // --stages alone: as many clusters as hold the layout (each adds samples/s); feasibility
    // falls as clusters take weaker nodes, so bisect on the count.
    size_t lo = 1, hi = n / asked_stages;
    PoolPlan trial;
    while (lo <= hi) {
      const size_t mid = (lo + hi) / 2;
      if (search(sizes_for(mid), &trial)) {
        plan = std::move(trial);
        found = true;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
  }
  if (!found) {
    const size_t clusters = asked_clusters ? asked_clusters : 1;
    const size_t stages = asked_stages ? asked_stages : n / clusters;
    const NodeConfig& largest = nodes.front();
    const double baseline = static_cast<double>(std::max<int64_t>(planning.stage_baseline_bytes, 0));
    const double whole = (static_cast<double>(raw_stage_bytes(profile, 0, prepared.n)) + baseline) *
                         kHeadroom;
    const double per_stage =
        (static_cast<double>(raw_stage_bytes(profile, 0, prepared.n)) / static_cast<double>(stages) +
         baseline) * kHeadroom;
    std::string what = asked_stages ? layout_text(clusters, stages)
                                    : std::to_string(clusters) + " clusters";
    throw PoolTooSmall(
        "the pool cannot hold " + what + ": the model needs " +
        base::format_bytes(static_cast<uint64_t>(whole)) + " to train, at least " +
        base::format_bytes(static_cast<uint64_t>(per_stage)) + " a node over " +
        std::to_string(stages) + " stages; the largest node, " + largest.name + ", has " +
        base::format_bytes(static_cast<uint64_t>(largest.ram_bytes())));
  }
  std::sort(plan.clusters.begin(), plan.clusters.end(), [](const auto& a, const auto& b) {
    auto smallest = [](const ClusterPlan& c) {
      int m = c.stages.front().node_id;
      for (const auto& s : c.stages) m = std::min(m, s.node_id);
      return m;
    };
    return smallest(a) < smallest(b);
  });
  for (size_t c = 0; c < plan.clusters.size(); ++c) {
    plan.clusters[c].id = static_cast<int>(c);
    plan.samples_per_second += plan.clusters[c].samples_per_second;
  }
  std::sort(plan.unplaced_nodes.begin(), plan.unplaced_nodes.end());
  return plan;
}

}  // namespace ravnest::planner::detail
