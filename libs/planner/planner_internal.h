// Private to libs/planner: the cost model in the form the partitioner evaluates it, and the
// partitioning engine shared by partition() and plan_pool(). See docs/planner.md.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "libs/config/pool/node_pool.h"
#include "libs/planner/cluster_plan.h"
#include "libs/planner/model_profile.h"
#include "libs/planner/planning_options.h"

namespace ravnest::planner::detail {

inline constexpr double kHeadroom = 1.15;        // on a stage's training memory
inline constexpr double kComputeFactor = 3.0;    // forward + backward ~ 3 x forward
inline constexpr double kRelativeTolerance = 1e-9;  // bottlenecks this close count as equal
inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Throws std::invalid_argument when the profile's vectors disagree in size or hold negatives.
void validate_profile(const ModelProfile& profile);

// compute_seconds = kComputeFactor * forward_seconds * speed_factor.
double speed_factor(const config::NodeConfig& node, double reference_gflops);

// The mean gflops over nodes that report one; 0 when none do (then every node counts as equal).
double reference_gflops_of(const std::vector<config::NodeConfig>& pool);

// One unit's term of a stage's memory: its parameters, their gradients and Adam moments, its
// activations and `stash_versions` older copies of its trainable parameters, times its
// memory_scale.
int64_t unit_memory_bytes(const Unit& unit, int64_t stash_versions = 0);

// Unpadded training bytes of a stage [first, end): unit_memory_bytes of its units and the
// stage's inputs (the daemon's baseline not included). memory_bytes = (raw + baseline) * kHeadroom.
int64_t raw_stage_bytes(const ModelProfile& profile, size_t first, size_t end,
                        int64_t stash_versions = 0);

// The memory_scale that makes the units [first, end) of a stage, with its inputs unscaled, model
// `measured_bytes` (at least 0.1); 0 when the units model no bytes at all (nothing to scale).
double measured_memory_scale(const ModelProfile& profile, size_t first, size_t end,
                             int64_t measured_bytes, int64_t stash_versions);

// The largest raw byte count whose memory (raw * kHeadroom) fits in `ram_bytes`.
int64_t raw_capacity(double ram_bytes);

// Prefix sums over a profile; positions are 0..n (a cut "at p" sits between units p-1 and p).
struct Prepared {
  size_t n = 0;
  int64_t batch_size = 1;
  std::vector<double> forward;     // F[p]: forward seconds of units [0, p)
  std::vector<int64_t> memory;     // M[p]: raw bytes (params, grads, Adam, activations) of [0, p)
  std::vector<int64_t> start_bytes;  // m(s) = M[s] - bytes of the inputs of a stage starting at s
  std::vector<int64_t> grad_bytes;   // Bi(s): gradient bytes sent back by a stage starting at s
  std::vector<int64_t> send_bytes;   // Bo(e): activation bytes sent by a stage ending at e
  std::vector<char> cut_ok;          // cut_ok[p]: a stage may start or end at p (0 and n: yes)
  int64_t min_cut_bytes = 0;         // smallest boundary at an allowed cut (0 if none)
  size_t max_stages = 1;             // 1 + number of allowed cuts
  std::vector<std::pair<size_t, size_t>> segments;  // maximal uncuttable ranges, in order

  // `stash_versions` older copies of each stage's trainable parameters count in its memory.
  explicit Prepared(const ModelProfile& profile, int64_t stash_versions = 0);
};

// A node as the partitioner sees it: step(s, e) = g(e) - h(s) with
//   g(e) = alpha F[e] + beta Bo(e),  h(s) = alpha F[s] - beta Bi(s),
// and the stage fits when M[e] - m(s) <= capacity.
struct NodeModel {
  double alpha = 0;      // seconds of forward+backward on this node per profiled forward second
  double beta = 0;       // seconds per byte of activations sent (after the codec)
  double beta_back = 0;  // seconds per byte of gradients sent back (after the codec)
  int64_t capacity = 0;  // raw bytes: RAM / kHeadroom less the daemon's baseline

  static NodeModel of(const config::NodeConfig& node, double reference_gflops,
                      const PlanningOptions& options = {});
  bool same_as(const NodeModel& other) const {
    return alpha == other.alpha && beta == other.beta && beta_back == other.beta_back &&
           capacity == other.capacity;
  }
};

class Partitioner {
 public:
  explicit Partitioner(const Prepared& prepared) : p_(prepared) {}

  // The smallest bottleneck (max stage step) over partitions of the units across `order`
  // (one non-empty stage per node, in that order), to within kRelativeTolerance. Returns
  // kInfinity when no partition fits, or when none beats `beat` by more than the tolerance.
  double bottleneck(const std::vector<NodeModel>& order, double beat = kInfinity);

  // The stage boundaries (k + 1 positions, 0 ... n) of the partition with every step <= limit
  // that sends the fewest bytes, then has the earliest cuts. Empty when none exists.
  std::vector<size_t> best_cuts(const std::vector<NodeModel>& order, double limit);

  // Order-independent lower bound of the bottleneck over `nodes` (ignores memory).
  double lower_bound(const std::vector<NodeModel>& nodes) const;

  // True when no partition of any order can fit: the nodes' capacity is short of the model's
  // raw bytes, or there are more nodes than possible stages.
  bool surely_infeasible(const std::vector<NodeModel>& nodes) const;

  // Is there a partition with every step <= limit? On success, *worst is the largest step of
  // the partition found (<= limit).
  bool feasible(const std::vector<NodeModel>& order, double limit, double* worst);

  // The same over every pipeline order of `nodes` at once, by a programme over the multisets of
  // nodes already placed (nodes equal in all three figures are interchangeable). On success
  // *order gets indices into `nodes` in pipeline order and *worst the largest step.
  bool feasible_any_order(const std::vector<NodeModel>& nodes, double limit,
                          std::vector<int>* order, double* worst);

  // How many multisets feasible_any_order() walks through for `nodes`.
  static size_t order_states(const std::vector<NodeModel>& nodes);

  long checks() const { return checks_; }

 private:
  // One stage on node x: from the starts marked in `from`, marks in `to` the ends it can reach
  // with step <= limit (cut positions <= e_max, or only n for the leaf). Ends marked already
  // are left alone; a newly marked end e records its start in pred_s[e] (and `tag` in
  // pred_t[e] when pred_t is given). Ends below e_min are not marked: the nodes after this one
  // could not finish from there. Returns whether it marked anything.
  // `span` holds the first and last marked position of `from` on entry; `to_span` those of
  // `to`, widened as ends are marked.
  struct Span {
    size_t first = 1, last = 0;  // empty
    void add(size_t p) {
      if (first > last) {
        first = last = p;
      } else {
        first = std::min(first, p);
        last = std::max(last, p);
      }
    }
  };
  bool sweep(const NodeModel& x, const char* from, Span span, char* to, Span* to_span,
             int* pred_s, int* pred_t, int tag, bool leaf, size_t e_min, size_t e_max,
             double limit);

  // The first end from which nodes of total 1/alpha `inverse_speed` and raw capacity
  // `capacity` could still take the rest of the model with steps <= limit (a necessary test).
  size_t first_useful_end(double inverse_speed, int64_t capacity, double limit) const;

  const Prepared& p_;
  std::vector<char> reach_a_, reach_b_;
  std::vector<int> pred_;  // pred_[j * (n + 1) + e]: start of stage j when it ends at e
  std::vector<char> state_reach_;
  std::vector<int> state_pred_s_, state_pred_t_;
  std::vector<std::pair<double, int>> heap_;
  std::vector<int64_t> best_;
  long checks_ = 0;
};

// plan_pool() with its search knobs exposed, for tests.
struct SearchOptions {
  bool exact_small_pools = true;  // divide pools of few node kinds exactly
  int random_restarts = 4;        // local search restarts from random constructions
  // Larger pools are planned from a sample of their node classes whose clusters are repeated
  // (docs/planner.md#large-pools); SIZE_MAX searches every pool whole, as before issue 26.
  size_t whole_pool_max_nodes = 128;
  size_t sample_nodes = 48;       // the sample's size
  // > 0: the compute reference instead of the pool's mean gflops (a sample keeps its pool's).
  double reference_gflops = 0;
};

// plan_pool() when planning.stages or planning.clusters asks for a layout (layout.cpp). Throws
// PoolTooSmall, one line naming the layout's need and the largest node, when the pool cannot
// hold it.
PoolPlan plan_layout(const ModelProfile& profile, const std::vector<config::NodeConfig>& pool,
                     const PlanningOptions& planning);

// Plans a pool larger than whole_pool_max_nodes: its nodes fall into classes (equal in the cost
// model, or within a ratio of 2^(1/4) of each other in RAM, bandwidth and gflops, each class read
// as its weakest figures), a sample of sample_nodes nodes in the classes'
// proportions is searched whole, and its clusters are repeated, cut at the same units, with the
// pool's own nodes of the same classes for as long as they last; the nodes left over are planned
// whole (or the same way again) and the few that form no cluster join the cluster that loses
// least by taking them. large_pool.cpp.
PoolPlan plan_large_pool(const ModelProfile& profile, const std::vector<config::NodeConfig>& pool,
                         uint64_t seed, const SearchOptions& options,
                         const PlanningOptions& planning);
PoolPlan plan_pool_with(const ModelProfile& profile, const std::vector<config::NodeConfig>& pool,
                        uint64_t seed, const SearchOptions& options,
                        const PlanningOptions& planning = {});

}  // namespace ravnest::planner::detail
