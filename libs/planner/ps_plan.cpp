// plan_parameter_servers(): roles, shards and the per-step estimate of docs/planner.md.
#include "libs/planner/ps_plan.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <stdexcept>
#include <tuple>

#include "libs/planner/planner_internal.h"

namespace ravnest::planner {

namespace {

// Bytes pushed and pulled per update over a link of `bandwidth` bytes/s.
double exchange_seconds(double bytes, double bandwidth) {
  if (bytes <= 0) return 0;
  return bandwidth > 0 ? bytes / bandwidth : detail::kInfinity;
}

double server_memory(int64_t model_bytes, int64_t shard_bytes) {
  // The daemon loads the whole model's stage and keeps the shard's gradient sum and Adam's moments.
  return detail::kHeadroom * static_cast<double>(model_bytes + 3 * shard_bytes);
}

double inference_memory(const ModelProfile& profile) {
  int64_t largest_activation = 0;
  for (const auto& unit : profile.units) {
    largest_activation = std::max(largest_activation, unit.activation_bytes);
  }
  return detail::kHeadroom * static_cast<double>(profile.total_parameter_bytes() +
                                                 profile.input_bytes + largest_activation);
}

std::string gb(double bytes) { return std::to_string(bytes / 1e9).substr(0, 6) + " GB"; }

}  // namespace

PsPoolPlan plan_parameter_servers(const ModelProfile& profile, const std::vector<StateTensor>& state,
                                  const std::vector<config::NodeConfig>& pool,
                                  const PsRequest& request) {
  detail::validate_profile(profile);
  if (request.servers < 1) {
    throw std::invalid_argument("--servers must be at least 1, got " +
                                std::to_string(request.servers));
  }
  if (state.empty()) {
    throw std::invalid_argument("the model has no parameters or buffers for a server to hold");
  }
  const int needed = request.servers + (request.evaluator ? 1 : 0) + 1;
  if (static_cast<int>(pool.size()) < needed) {
    throw PoolTooSmall(std::to_string(request.servers) + " server(s)" +
                       (request.evaluator ? ", an evaluator" : "") +
                       " and at least one worker need " + std::to_string(needed) +
                       " nodes; the pool has " + std::to_string(pool.size()));
  }
  int64_t model_bytes = 0;
  for (const auto& t : state) {
    if (t.bytes < 0) throw std::invalid_argument("tensor " + t.name + " has negative bytes");
    model_bytes += t.bytes;
  }
  const double reference = detail::reference_gflops_of(pool);
  const auto effective_gflops = [&](const config::NodeConfig& n) {
    return n.gflops > 0 ? n.gflops : reference;
  };
  const size_t units = profile.units.size();
  std::map<int, StageCost> training;  // the whole model on each node
  for (const auto& node : pool) training[node.id] = stage_cost(profile, 0, units, node, reference);
  const auto can_train = [&](const config::NodeConfig& n) {
    return training.at(n.id).memory_bytes <= n.ram_bytes();
  };

  // Servers: most bandwidth first among nodes that could hold an even shard.
  const double even_shard_memory = server_memory(
      model_bytes, (model_bytes + request.servers - 1) / request.servers);
  std::vector<const config::NodeConfig*> candidates;
  for (const auto& node : pool) {
    if (even_shard_memory <= node.ram_bytes()) candidates.push_back(&node);
  }
  std::sort(candidates.begin(), candidates.end(), [&](const auto* a, const auto* b) {
    if (a->bandwidth_mbps != b->bandwidth_mbps) return a->bandwidth_mbps > b->bandwidth_mbps;
    if (effective_gflops(*a) != effective_gflops(*b)) return effective_gflops(*a) < effective_gflops(*b);
    return a->id < b->id;
  });
  if (static_cast<int>(candidates.size()) < request.servers) {
    throw PoolTooSmall(std::to_string(request.servers) + " server(s) need " + gb(even_shard_memory) +
                       " of memory each (the model and a shard's optimizer state); " +
                       std::to_string(candidates.size()) + " node(s) of the pool have it");
  }
  std::vector<const config::NodeConfig*> servers(candidates.begin(),
                                                 candidates.begin() + request.servers);
  std::sort(servers.begin(), servers.end(), [](const auto* a, const auto* b) { return a->id < b->id; });
  std::map<int, bool> taken;
  for (const auto* s : servers) taken[s->id] = true;

  // Evaluator: a node that cannot train first, then the fewest gflops.
  PsPoolPlan plan;
  if (request.evaluator) {
    const double needs = inference_memory(profile);
    const config::NodeConfig* best = nullptr;
    const auto key = [&](const config::NodeConfig& n) {
      return std::make_tuple(can_train(n) ? 1 : 0, effective_gflops(n), n.bandwidth_mbps, n.id);
    };
    for (const auto& node : pool) {
      if (taken.count(node.id) || needs > node.ram_bytes()) continue;
      if (best == nullptr || key(node) < key(*best)) best = &node;
    }
    if (best == nullptr) {
      throw PoolTooSmall("no node left for the evaluator can hold the model for inference (" +
                         gb(needs) + ")");
    }
    plan.evaluator = best->id;
    plan.evaluator_memory_bytes = needs;
    taken[best->id] = true;
  }

  for (const auto& node : pool) {
    if (taken.count(node.id)) continue;
    if (can_train(node)) {
      plan.workers.push_back({node.id, training.at(node.id),
                              exchange_seconds(2.0 * static_cast<double>(model_bytes),
                                               node.bandwidth_bytes_per_second())});
    } else {
      plan.unplaced_nodes.push_back(node.id);
    }
  }
  std::sort(plan.workers.begin(), plan.workers.end(),
            [](const auto& a, const auto& b) { return a.node_id < b.node_id; });
  std::sort(plan.unplaced_nodes.begin(), plan.unplaced_nodes.end());
  if (plan.workers.empty()) {
    throw PoolTooSmall("no node left for a worker can train the whole model (" +
                       gb(training.begin()->second.memory_bytes) + " of memory)");
  }
  const double workers = static_cast<double>(plan.workers.size());

  // Shards: largest tensor first, to the server whose exchange would end earliest with it.
  std::vector<size_t> order(state.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return state[a].bytes > state[b].bytes; });
  std::vector<int64_t> load(servers.size(), 0);
  std::vector<size_t> owner(state.size(), 0);
  for (size_t i : order) {
    size_t best = 0;
    double best_end = detail::kInfinity;
    for (size_t s = 0; s < servers.size(); ++s) {
      const double end = exchange_seconds(static_cast<double>(load[s] + state[i].bytes),
                                          servers[s]->bandwidth_bytes_per_second());
      if (end < best_end) {
        best_end = end;
        best = s;
      }
    }
    owner[i] = best;
    load[best] += state[i].bytes;
  }
  for (size_t s = 0; s < servers.size(); ++s) {
    PsServerPlan server;
    server.node_id = servers[s]->id;
    for (size_t i = 0; i < state.size(); ++i) {
      if (owner[i] == s) server.tensors.push_back(state[i].name);
    }
    server.shard_bytes = load[s];
    server.memory_bytes = server_memory(model_bytes, load[s]);
    server.exchange_seconds = exchange_seconds(2.0 * workers * static_cast<double>(load[s]),
                                               servers[s]->bandwidth_bytes_per_second());
    if (server.memory_bytes > servers[s]->ram_bytes()) {
      throw PoolTooSmall("node " + std::to_string(server.node_id) + " would serve " +
                         gb(static_cast<double>(load[s])) + " and needs " +
                         gb(server.memory_bytes) + " of memory; it has " +
                         gb(servers[s]->ram_bytes()));
    }
    plan.servers.push_back(std::move(server));
  }

  double compute = 0, exchange = 0;
  for (const auto& w : plan.workers) {
    compute = std::max(compute, w.cost.compute_seconds);
    exchange = std::max(exchange, w.exchange_seconds);
  }
  for (const auto& s : plan.servers) exchange = std::max(exchange, s.exchange_seconds);
  plan.step_seconds = compute + exchange;
  plan.samples_per_second =
      plan.step_seconds > 0 ? workers * static_cast<double>(profile.batch_size) / plan.step_seconds
                            : 0;
  return plan;
}

}  // namespace ravnest::planner
