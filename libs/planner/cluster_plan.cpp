// plan_pool(): cluster formation. docs/planner.md describes the objective and the search;
// cluster_search.h lists the files the search is made of.
#include "libs/planner/cluster_plan.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <utility>

#include "libs/planner/cluster_search.h"
#include "libs/planner/planner_internal.h"

namespace ravnest::planner {
namespace detail {
namespace {

using config::NodeConfig;

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

}  // namespace

Search::Search(const ModelProfile& profile, const std::vector<NodeConfig>& pool, uint64_t seed,
               const SearchOptions& options, const PlanningOptions& planning)
    : profile_(profile), planning_(planning),
      prepared_(profile, stashed_versions(planning, 0)), partitioner_(prepared_), rng_(seed),
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
  reference_gflops_ =
      options_.reference_gflops > 0 ? options_.reference_gflops : reference_gflops_of(nodes_);
  for (const auto& node : nodes_) models_.push_back(NodeModel::of(node, reference_gflops_, planning_));
  // Nodes equal in the cost model are interchangeable: sets are evaluated by kind.
  for (size_t i = 0; i < models_.size(); ++i) {
    size_t t = 0;
    while (t < kind_nodes_.size() && !models_[kind_nodes_[t][0]].same_as(models_[i])) ++t;
    if (t == kind_nodes_.size()) kind_nodes_.emplace_back();
    kind_nodes_[t].push_back(static_cast<int>(i));
    kind_of_.push_back(static_cast<int>(t));
  }
}

void Search::pool_too_small() {
  const size_t n = prepared_.n;
  const double baseline = static_cast<double>(std::max<int64_t>(planning_.stage_baseline_bytes, 0));
  const double need = (static_cast<double>(raw_stage_bytes(profile_, 0, n)) + baseline) * kHeadroom;
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
          (static_cast<double>(raw_stage_bytes(profile_, first, end)) + baseline) * kHeadroom;
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

Configuration Search::best_local_search() {
  std::vector<int> by_ram(nodes_.size());
  for (size_t i = 0; i < by_ram.size(); ++i) by_ram[i] = static_cast<int>(i);
  std::stable_sort(by_ram.begin(), by_ram.end(),
                   [&](int a, int b) { return nodes_[a].ram_gb > nodes_[b].ram_gb; });

  std::vector<Configuration> starts;
  starts.push_back(fill(by_ram));
  if (starts.front().clusters.empty()) pool_too_small();
  starts.push_back(minimal_clusters());
  Configuration best;
  bool have_best = false;
  // More nodes placed first, then a clearly higher throughput.
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
  return best;
}

PoolPlan Search::plan_of(Configuration best) {
  // Cluster ids follow the clusters' smallest node ids.
  std::sort(best.clusters.begin(), best.clusters.end());
  PoolPlan plan;
  for (const auto& members : best.clusters) {
    std::vector<NodeConfig> ordered;
    for (int i : order_of(members)) ordered.push_back(nodes_[i]);
    ClusterPlan cluster;
    cluster.id = static_cast<int>(plan.clusters.size());
    cluster.stages = partition(profile_, ordered, reference_gflops_, planning_);
    if (cluster.stages.empty()) {
      throw std::logic_error("plan_pool: a cluster found feasible did not partition");
    }
    double slowest = 0;
    for (const auto& stage : cluster.stages) slowest = std::max(slowest, stage.cost.step_seconds);
    cluster.samples_per_second = throughput(slowest, cluster.stages.size());
    plan.samples_per_second += cluster.samples_per_second;
    plan.clusters.push_back(std::move(cluster));
  }
  for (int i : best.unplaced) plan.unplaced_nodes.push_back(nodes_[i].id);
  return plan;
}

PoolPlan Search::run() {
  if (nodes_.empty()) throw PoolTooSmall("the pool has no nodes");
  Configuration best;
  if (!(options_.exact_small_pools && exact_division(&best))) best = best_local_search();
  return plan_of(std::move(best));
}

PoolPlan plan_pool_with(const ModelProfile& profile, const std::vector<config::NodeConfig>& pool,
                        uint64_t seed, const SearchOptions& options,
                        const PlanningOptions& planning) {
  validate_profile(profile);
  const bool async = planning.schedule == config::PipelineSchedule::kAsync;
  if (planning.stages < 0 || planning.clusters < 0) {
    throw std::invalid_argument("plan_pool: stages and clusters must be 0 (the planner's choice) "
                                "or positive");
  }
  auto search_pool = [&](const PlanningOptions& settled) {
    if (settled.stages > 0 || settled.clusters > 0) return plan_layout(profile, pool, settled);
    if (pool.size() > options.whole_pool_max_nodes) {
      return plan_large_pool(profile, pool, seed, options, settled);
    }
    Search search(profile, pool, seed, options, settled);
    return search.run();
  };
  if (!async || planning.max_in_flight > 0) return search_pool(planning);
  // max_in_flight 0 is the cluster's stages, which the plan decides: plan with the longest
  // cluster's stash for every cluster until the longest cluster stops changing.
  PlanningOptions settled = planning;
  settled.max_in_flight = 1;
  PoolPlan plan;
  for (int round = 0; round < 4; ++round) {
    plan = search_pool(settled);
    size_t longest = 1;
    for (const auto& cluster : plan.clusters) longest = std::max(longest, cluster.stages.size());
    if (static_cast<int>(longest) <= settled.max_in_flight) break;
    settled.max_in_flight = static_cast<int>(longest);
  }
  // Each stage's figures with its own cluster's stash.
  const double reference =
      options.reference_gflops > 0 ? options.reference_gflops : reference_gflops_of(pool);
  std::map<int, NodeConfig> by_id;
  for (const auto& node : pool) by_id[node.id] = node;
  for (auto& cluster : plan.clusters) {
    for (auto& stage : cluster.stages) {
      stage.cost = stage_cost(profile, stage.first_unit, stage.end_unit, by_id.at(stage.node_id),
                              reference, planning, cluster.stages.size());
    }
  }
  return plan;
}

}  // namespace detail

PoolPlan plan_pool(const ModelProfile& profile, const std::vector<config::NodeConfig>& pool,
                   uint64_t seed, const PlanningOptions& options) {
  return detail::plan_pool_with(profile, pool, seed, detail::SearchOptions{}, options);
}

}  // namespace ravnest::planner
