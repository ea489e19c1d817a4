// Partitioning one pipeline: the bottleneck by bisection over a feasibility sweep, then the
// tie-breaks by an exact dynamic programme. docs/planner.md explains the method.
#include <algorithm>

#include "libs/planner/cluster_plan.h"
#include "libs/planner/planner_internal.h"

namespace ravnest::planner {
namespace detail {
namespace {

// The two halves of a stage's step, step(s, e) = g(e) - h(s). Every comparison of a step with
// a limit is computed as g - h <= limit from these, so that the feasibility sweep and the
// tie-break programme agree to the last bit.
inline double g_of(const Prepared& p, const NodeModel& x, size_t e) {
  return x.alpha * p.forward[e] + x.beta * static_cast<double>(p.send_bytes[e]);
}
inline double h_of(const Prepared& p, const NodeModel& x, size_t s) {
  return x.alpha * p.forward[s] - x.beta_back * static_cast<double>(p.grad_bytes[s]);
}
inline bool fits(const Prepared& p, const NodeModel& x, size_t s, size_t e) {
  return p.memory[e] - p.start_bytes[s] <= x.capacity;
}

constexpr int64_t kNoBytes = std::numeric_limits<int64_t>::max();

}  // namespace

bool Partitioner::surely_infeasible(const std::vector<NodeModel>& nodes) const {
  const size_t k = nodes.size();
  if (k == 0 || k > p_.n || k > p_.max_stages) return true;
  int64_t capacity = 0;
  for (const auto& x : nodes) {
    if (x.capacity < 0) return true;
    capacity += x.capacity;
  }
  return capacity < p_.memory[p_.n];
}

double Partitioner::lower_bound(const std::vector<NodeModel>& nodes) const {
  if (nodes.empty()) return kInfinity;
  // Every stage of a pipeline of two or more sends at least the smallest allowed cut's bytes,
  // and the compute splits at best in proportion to the nodes' speeds.
  const double min_bytes = nodes.size() >= 2 ? static_cast<double>(p_.min_cut_bytes) : 0.0;
  double inverse_speed = 0, extra = 0, max_transfer = 0;
  for (const auto& x : nodes) {
    const double c = min_bytes * std::min(x.beta, x.beta_back);
    inverse_speed += 1.0 / x.alpha;
    extra += c / x.alpha;
    max_transfer = std::max(max_transfer, c);
  }
  const double balanced = (p_.forward[p_.n] + extra) / inverse_speed;
  return std::max(balanced, max_transfer) * (1 - 1e-12);
}

size_t Partitioner::first_useful_end(double inverse_speed, int64_t capacity, double limit) const {
  const size_t n = p_.n;
  size_t e = 0;
  if (limit < kInfinity) {
    // Slack for rounding: this test must never drop an end that could work.
    const double rest = limit * inverse_speed * (1 + 1e-9) + 1e-12;
    e = static_cast<size_t>(
        std::lower_bound(p_.forward.begin(), p_.forward.end(), p_.forward[n] - rest) -
        p_.forward.begin());
  }
  const size_t by_memory = static_cast<size_t>(
      std::lower_bound(p_.memory.begin(), p_.memory.end(), p_.memory[n] - capacity) -
      p_.memory.begin());
  return std::max(e, by_memory);
}

bool Partitioner::sweep(const NodeModel& x, const char* from, Span span, char* to, Span* to_span,
                        int* pred_s, int* pred_t, int tag, bool leaf, size_t e_min, size_t e_max,
                        double limit) {
  const size_t n = p_.n;
  if (span.first > span.last) return false;
  if (leaf) {  // the leaf ends at n: one scan over its possible starts
    if (to[n]) return false;
    int chosen = -1;
    double chosen_h = -kInfinity;
    for (size_t s = span.first; s <= span.last && s < n; ++s) {
      if (!from[s] || !fits(p_, x, s, n)) continue;
      const double h = h_of(p_, x, s);
      if (chosen < 0 || h > chosen_h) {
        chosen_h = h;
        chosen = static_cast<int>(s);
      }
    }
    if (chosen < 0 || g_of(p_, x, n) - chosen_h > limit) return false;
    to[n] = 1;
    to_span->add(n);
    pred_s[n] = chosen;
    if (pred_t) pred_t[n] = tag;
    return true;
  }
  // Sweep the end e upwards keeping every reachable start s < e in a max-heap on h(s): the
  // best start for e is the one with the largest h among those whose memory still fits.
  const size_t first = span.first, last = span.last;
  if (first >= e_max) return false;
  heap_.clear();
  int64_t heap_max_m = 0;  // the largest m(s) in the heap, or more
  bool any = false;
  for (size_t e = first + 1; e <= e_max; ++e) {
    const size_t s = e - 1;
    if (s <= last && from[s]) {
      const double h = h_of(p_, x, s);
      const int64_t m = p_.start_bytes[s];
      // A start with the largest h and the largest m is the answer for as long as anything
      // in the heap is: the others can go. This keeps the heap tiny on most profiles.
      if (!heap_.empty() && h >= heap_.front().first && m >= heap_max_m) heap_.clear();
      if (heap_.empty() || m > heap_max_m) heap_max_m = m;
      heap_.emplace_back(h, static_cast<int>(s));
      std::push_heap(heap_.begin(), heap_.end());
    }
    if (heap_.empty()) {
      if (s >= last) break;  // no start left to come
      continue;
    }
    // Past the last start, the compute alone of the best start only grows with e.
    if (s >= last && x.alpha * p_.forward[e] - heap_.front().first > limit) break;
    if (e < e_min || !p_.cut_ok[e] || to[e]) continue;
    // A start s stays usable while M[e] - m(s) <= capacity; M only grows with e, so once
    // unusable it stays so and can be dropped for good.
    const int64_t need = p_.memory[e] - x.capacity;
    while (!heap_.empty() && p_.start_bytes[heap_.front().second] < need) {
      std::pop_heap(heap_.begin(), heap_.end());
      heap_.pop_back();
    }
    if (heap_.empty()) continue;
    if (g_of(p_, x, e) - heap_.front().first <= limit) {
      to[e] = 1;
      to_span->add(e);
      pred_s[e] = heap_.front().second;
      if (pred_t) pred_t[e] = tag;
      any = true;
    }
  }
  return any;
}

bool Partitioner::feasible(const std::vector<NodeModel>& order, double limit, double* worst) {
  ++checks_;
  const size_t n = p_.n;
  const size_t k = order.size();
  if (k == 0 || k > n || k > p_.max_stages) return false;
  reach_a_.assign(n + 1, 0);
  reach_a_[0] = 1;
  pred_.resize(k * (n + 1));
  std::vector<double> inverse_speed(k + 1, 0.0);  // of the nodes after stage j
  std::vector<int64_t> capacity(k + 1, 0);
  for (size_t j = k; j-- > 1;) {
    inverse_speed[j - 1] = inverse_speed[j] + 1.0 / order[j].alpha;
    capacity[j - 1] = capacity[j] + order[j].capacity;
  }
  Span span;
  span.add(0);
  for (size_t j = 0; j < k; ++j) {
    reach_b_.assign(n + 1, 0);
    Span next;
    const size_t e_min = first_useful_end(inverse_speed[j], capacity[j], limit);
    if (!sweep(order[j], reach_a_.data(), span, reach_b_.data(), &next, &pred_[j * (n + 1)],
               nullptr, 0, j + 1 == k, e_min, n - (k - 1 - j), limit)) {
      return false;
    }
    reach_a_.swap(reach_b_);
    span = next;
  }
  if (worst) {
    double w = 0;
    size_t e = n;
    for (size_t j = k; j-- > 0;) {
      const size_t s = static_cast<size_t>(pred_[j * (n + 1) + e]);
      w = std::max(w, g_of(p_, order[j], e) - h_of(p_, order[j], s));
      e = s;
    }
    *worst = w;
  }
  return true;
}

size_t Partitioner::order_states(const std::vector<NodeModel>& nodes) {
  std::vector<size_t> counts;
  std::vector<const NodeModel*> types;
  for (const auto& x : nodes) {
    size_t t = 0;
    while (t < types.size() && !types[t]->same_as(x)) ++t;
    if (t == types.size()) {
      types.push_back(&x);
      counts.push_back(0);
    }
    ++counts[t];
  }
  size_t states = 1;
  for (size_t c : counts) states *= c + 1;
  return states;
}

bool Partitioner::feasible_any_order(const std::vector<NodeModel>& nodes, double limit,
                                     std::vector<int>* order, double* worst) {
  ++checks_;
  const size_t n = p_.n;
  const size_t k = nodes.size();
  if (k == 0 || k > n || k > p_.max_stages) return false;
  // Group interchangeable nodes; a state counts how many of each group are placed, in
  // mixed radix, so adding a node always moves to a larger state index.
  std::vector<int> type_of(k);
  std::vector<std::vector<int>> members;
  for (size_t i = 0; i < k; ++i) {
    size_t t = 0;
    while (t < members.size() && !nodes[members[t][0]].same_as(nodes[i])) ++t;
    if (t == members.size()) members.emplace_back();
    members[t].push_back(static_cast<int>(i));
    type_of[i] = static_cast<int>(t);
  }
  const size_t types = members.size();
  std::vector<size_t> stride(types);
  size_t states = 1;
  for (size_t t = 0; t < types; ++t) {
    stride[t] = states;
    states *= members[t].size() + 1;
  }
  const size_t width = n + 1;
  state_reach_.assign(states * width, 0);
  state_pred_s_.resize(states * width);
  state_pred_t_.resize(states * width);
  std::vector<Span> spans(states);
  state_reach_[0] = 1;
  spans[0].add(0);
  std::vector<size_t> used(types);
  for (size_t state = 0; state + 1 < states; ++state) {
    if (spans[state].first > spans[state].last) continue;
    size_t rest = state, placed = 0;
    for (size_t t = types; t-- > 0;) {
      used[t] = rest / stride[t];
      rest %= stride[t];
      placed += used[t];
    }
    for (size_t t = 0; t < types; ++t) {
      if (used[t] == members[t].size()) continue;
      const NodeModel& x = nodes[members[t][0]];
      const size_t next = state + stride[t];
      double rest_inverse_speed = 0;  // of the nodes still to place after this one
      int64_t rest_capacity = 0;
      for (size_t u = 0; u < types; ++u) {
        const size_t left = members[u].size() - used[u] - (u == t ? 1 : 0);
        rest_inverse_speed += static_cast<double>(left) / nodes[members[u][0]].alpha;
        rest_capacity += static_cast<int64_t>(left) * nodes[members[u][0]].capacity;
      }
      const size_t e_min = first_useful_end(rest_inverse_speed, rest_capacity, limit);
      sweep(x, &state_reach_[state * width], spans[state], &state_reach_[next * width],
            &spans[next], &state_pred_s_[next * width], &state_pred_t_[next * width],
            static_cast<int>(t), placed + 1 == k, e_min, n - (k - 1 - placed), limit);
    }
  }
  const size_t last = states - 1;
  if (!state_reach_[last * width + n]) return false;
  std::vector<int> type_sequence(k);
  double w = 0;
  size_t state = last, e = n;
  for (size_t j = k; j-- > 0;) {
    const int t = state_pred_t_[state * width + e];
    const size_t s = static_cast<size_t>(state_pred_s_[state * width + e]);
    const NodeModel& x = nodes[members[t][0]];
    w = std::max(w, g_of(p_, x, e) - h_of(p_, x, s));
    type_sequence[j] = t;
    state -= stride[t];
    e = s;
  }
  if (worst) *worst = w;
  if (order) {
    std::vector<size_t> next_member(types, 0);
    order->clear();
    for (int t : type_sequence) order->push_back(members[t][next_member[t]++]);
  }
  return true;
}

double Partitioner::bottleneck(const std::vector<NodeModel>& order, double beat) {
  if (surely_infeasible(order)) return kInfinity;
  double hi = 0;
  const double first = beat < kInfinity ? beat * (1 - kRelativeTolerance) : kInfinity;
  if (!feasible(order, first, &hi)) return kInfinity;
  double lo = lower_bound(order);
  if (hi - lo > kRelativeTolerance * hi) {
    // The first partition found is often already the best: try just below it first.
    const double probe = hi * (1 - kRelativeTolerance);
    double worst = 0;
    if (!feasible(order, probe, &worst)) return hi;
    hi = worst;
  }
  while (hi - lo > kRelativeTolerance * hi) {
    const double mid = lo + (hi - lo) / 2;
    double worst = 0;
    if (feasible(order, mid, &worst)) {
      hi = worst;
    } else {
      lo = mid;
    }
  }
  return hi;
}

std::vector<size_t> Partitioner::best_cuts(const std::vector<NodeModel>& order, double limit) {
  const size_t n = p_.n;
  const size_t k = order.size();
  if (k == 0 || k > n) return {};
  const size_t width = n + 1;
  best_.assign((k + 1) * width, kNoBytes);
  best_[k * width + n] = 0;
  // best_[j][s]: fewest bytes over the cuts from s on, with stages j..k-1 covering [s, n).
  auto valid_end = [&](size_t j, size_t s, size_t e, const NodeModel& x, double h) {
    return p_.cut_ok[e] && best_[(j + 1) * width + e] != kNoBytes && fits(p_, x, s, e) &&
           g_of(p_, x, e) - h <= limit;
  };
  for (size_t j = k; j-- > 0;) {
    const NodeModel& x = order[j];
    const size_t s_min = j;
    const size_t s_max = j == 0 ? 0 : n - (k - j);
    const size_t e_max = n - (k - 1 - j);
    for (size_t s = s_min; s <= s_max; ++s) {
      if (!p_.cut_ok[s]) continue;
      const double h = h_of(p_, x, s);
      int64_t best = kNoBytes;
      if (j + 1 == k) {
        if (valid_end(j, s, n, x, h)) best = 0;
      } else {
        for (size_t e = s + 1; e <= e_max; ++e) {
          // Both bounds only grow with e: past them no later end can fit either.
          if (p_.memory[e] - p_.start_bytes[s] > x.capacity) break;
          if (x.alpha * p_.forward[e] - h > limit) break;
          if (!valid_end(j, s, e, x, h)) continue;
          best = std::min(best, p_.send_bytes[e] + best_[(j + 1) * width + e]);
        }
      }
      best_[j * width + s] = best;
    }
  }
  if (best_[0] == kNoBytes) return {};
  std::vector<size_t> cuts{0};
  size_t s = 0;
  for (size_t j = 0; j < k; ++j) {
    const NodeModel& x = order[j];
    const double h = h_of(p_, x, s);
    const int64_t target = best_[j * width + s];
    size_t chosen = 0;
    for (size_t e = s + 1; e <= n; ++e) {
      if (j + 1 == k && e != n) continue;
      if (valid_end(j, s, e, x, h) &&
          (e == n ? 0 : p_.send_bytes[e]) + best_[(j + 1) * width + e] == target) {
        chosen = e;
        break;
      }
    }
    if (chosen == 0) return {};  // cannot happen: best_ said there is one
    cuts.push_back(chosen);
    s = chosen;
  }
  return cuts;
}

}  // namespace detail

std::vector<StagePlan> partition(const ModelProfile& profile,
                                 const std::vector<config::NodeConfig>& ordered_nodes,
                                 double reference_gflops, const PlanningOptions& options) {
  const detail::Prepared prepared(profile, stashed_versions(options, ordered_nodes.size()));
  std::vector<detail::NodeModel> models;
  models.reserve(ordered_nodes.size());
  for (const auto& node : ordered_nodes) {
    models.push_back(detail::NodeModel::of(node, reference_gflops, options));
  }
  detail::Partitioner partitioner(prepared);
  const double limit = partitioner.bottleneck(models);
  if (!(limit < detail::kInfinity)) return {};
  const std::vector<size_t> cuts = partitioner.best_cuts(models, limit);
  if (cuts.empty()) return {};
  std::vector<StagePlan> stages;
  for (size_t j = 0; j < ordered_nodes.size(); ++j) {
    StagePlan stage;
    stage.node_id = ordered_nodes[j].id;
    stage.first_unit = cuts[j];
    stage.end_unit = cuts[j + 1];
    stage.cost = stage_cost(profile, stage.first_unit, stage.end_unit, ordered_nodes[j],
                            reference_gflops, options, ordered_nodes.size());
    stages.push_back(stage);
  }
  return stages;
}

}  // namespace ravnest::planner
