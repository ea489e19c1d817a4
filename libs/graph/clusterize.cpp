#include "libs/graph/clusterize.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_map>


#include "libs/base/atomic_file.h"
#include "libs/base/config_error.h"
#include "libs/config/daemon/daemon_config.h"
#include "libs/config/pool/node_pool.h"
#include "libs/config/plan/plan_layout.h"
#include "libs/graph/example_input.h"
#include "libs/graph/cut_model.h"
#include "libs/graph/memory_planning.h"
#include "libs/graph/model_graph.h"
#include "libs/graph/plan_report.h"
#include "libs/graph/profiler.h"
#include "libs/graph/ps_plan_writer.h"
#include "libs/graph/stage_writer.h"
#include "libs/graph/stage_chain.h"
#include "libs/torch_support/torch_errors.h"

namespace ravnest::graph {

namespace fs = std::filesystem;

namespace {

// Whether the daemons train on a GPU; throws std::invalid_argument for a name that is no device.
bool planned_on_gpu(const std::string& device) {
  const auto parsed = config::parse_device(device);
  if (!parsed) throw std::invalid_argument("--device: \"" + device + "\" is not cpu, cuda or cuda:N");
  return parsed->cuda;
}

// The pool as memory planning sees it. On a GPU a stage needs its host memory and the card's, so
// a node offers the smaller of its ram and its gpu_memory, which every node must declare.
std::vector<config::NodeConfig> memory_pool(std::vector<config::NodeConfig> pool, bool on_gpu,
                                            const std::string& nodes_path,
                                            const std::string& device) {
  if (!on_gpu) return pool;
  for (auto& node : pool) {
    if (node.gpu_memory_gb <= 0) {
      throw base::ConfigError(nodes_path + ": node \"" + std::to_string(node.id) +
                                "\": benchmarks.gpu_memory (GB) is needed to plan for --device " +
                                device);
    }
    node.ram_gb = std::min(node.ram_gb, node.gpu_memory_gb);
  }
  return pool;
}

// The probe on the daemons' device. On a GPU its figures for planning are, phase by phase, the
// larger of the host's and the card's (each against the smaller of ram and gpu_memory: both fit);
// the card's own stay in the device_ fields.
MemoryProbe probe_on(const std::string& device, bool on_gpu, MemoryProbe probe) {
  return [device, on_gpu, probe = std::move(probe)](const StageProbe& request) {
    StageProbe on_device = request;
    on_device.device = device;
    StageMemory memory = probe(on_device);
    if (!on_gpu) return memory;
    memory.host_peak_bytes = memory.peak_bytes;
    memory.host_baseline_bytes = memory.baseline_bytes;
    memory.peak_bytes = std::max(memory.peak_bytes, memory.device_peak_bytes);
    memory.baseline_bytes = std::max(memory.baseline_bytes, memory.device_baseline_bytes);
    for (auto& [name, bytes] : memory.phases) {
      for (const auto& [device_name, device_bytes] : memory.device_phases) {
        if (device_name == name) bytes = std::max(bytes, device_bytes);
      }
    }
    return memory;
  };
}

// Tells options.progress, when set, of one phase at a time (clusterize_progress.h).
class PhaseReporter {
 public:
  explicit PhaseReporter(const ClusterizeProgressFn& progress) : progress_(progress) {}
  void start(const std::string& phase, uint64_t total = 0) {
    current_ = {phase, 0, total, false};
    tell();
  }
  void advance(uint64_t done) {
    current_.done = done;
    tell();
  }
  void finish() {
    current_.finished = true;
    if (current_.total && current_.done < current_.total) current_.done = current_.total;
    tell();
  }

 private:
  void tell() const {
    if (progress_) progress_(current_);
  }
  const ClusterizeProgressFn& progress_;
  ClusterizeProgress current_;
};

class Stopwatch {
 public:
  double lap() {
    auto now = std::chrono::steady_clock::now();
    double s = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return s;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};



// The temporary plan directory: removed on every exit but a successful commit.
class StagingDirectory {
 public:
  explicit StagingDirectory(const fs::path& out) : out_(out) {
    created_out_ = !fs::exists(out_);
    fs::create_directories(out_);
    path_ = out_ / (".clusterize.tmp." + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(layout().nodes_dir());
    fs::create_directories(layout().stages_dir());
  }
  ~StagingDirectory() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
    if (!committed_ && created_out_) fs::remove(out_, ignored);
  }
  const fs::path& path() const { return path_; }
  config::PlanLayout layout() const { return config::PlanLayout(path_.string()); }

  // Moves nodes/, stages/ and plan.json into the output directory, replacing an older plan.
  // Its files were written without a fsync each: one syncfs makes them durable first.
  void commit() {
    base::sync_filesystem_of(path_.string());
    for (const char* sub : {config::PlanLayout::kNodesDir, config::PlanLayout::kStagesDir}) {
      fs::path final_path = out_ / sub;
      if (fs::exists(final_path)) fs::rename(final_path, path_ / (std::string("old.") + sub));
      fs::rename(path_ / sub, final_path);
    }
    fs::rename(layout().plan_file(), config::PlanLayout(out_.string()).plan_file());
    committed_ = true;
  }

 private:
  fs::path out_;
  fs::path path_;
  bool created_out_ = false;
  bool committed_ = false;
};

using Log = std::function<void(const std::string&)>;

// What every mode plans from: the pool, the model with its example inputs, and its profile.
struct PlanInputs {
  std::vector<config::NodeConfig> pool;
  bool on_gpu = false;
  std::unique_ptr<CutModel> model;
  std::vector<at::Tensor> inputs;
  int64_t static_batch = 0;  // > 0: a .pt2 exported for this batch only
  planner::ModelProfile profile;
};

// --mode pipeline: clusters of pipelines (docs/planner.md), with what the probes measured.
struct PipelinePlan {
  planner::PoolPlan plan;
  planner::PlanningOptions planning;      // the header's: the probes set the measured baseline
  std::map<int, StageMemory> measured;    // by node; empty without probes
};

// --mode ps and --mode hybrid: servers holding shards, workers (hybrid: trainers) and, for
// hybrid, the embedding tables the servers hold.
struct ServerPlan {
  planner::PsPoolPlan plan;
  std::vector<SparseTableUse> tables;
};

// A model that runs at one batch size only (a .pt2 exported without a batch Dim) cannot take
// micro-batches of another: refused here, not on the daemons. Returns that batch, 0 if none.
int64_t check_static_batch(const ClusterizeOptions& options, const CutModel& model,
                           const std::vector<at::Tensor>& inputs, const Log& log) {
  const int64_t example_batch = inputs.empty() || inputs[0].dim() == 0 ? 0 : inputs[0].size(0);
  const int64_t static_batch = model.static_batch();
  if (static_batch <= 0) return static_batch;
  const std::string fix =
      "export with dynamic_shapes giving dim 0 of every input a batch Dim "
      "(torch.export.Dim(\"batch\"))";
  if (example_batch != static_batch) {
    throw std::invalid_argument(options.model_path + ": exported with batch " +
                                std::to_string(static_batch) + "; the example input has " +
                                std::to_string(example_batch) + " samples: " + fix +
                                ", or give --example-input a batch of " +
                                std::to_string(static_batch));
  }
  if (options.planning.micro_batches > 1) {
    throw std::invalid_argument(
        options.model_path + ": exported with batch " + std::to_string(static_batch) +
        "; micro-batches of " + std::to_string(static_batch / options.planning.micro_batches) +
        " need dynamic_shapes with a batch Dim: " + fix);
  }
  log(options.model_path + ": exported with a static batch of " + std::to_string(static_batch) +
      ": every micro-batch must hold " + std::to_string(static_batch) +
      " samples (train.batch_size = " + std::to_string(static_batch) +
      " x train.micro_batches); " + fix + " to train with any batch");
  return static_batch;
}

// The "load" and "profile" phases: the pool, the model, its example inputs and its profile.
PlanInputs load_and_profile(const ClusterizeOptions& options, const Log& log, PhaseReporter& phase,
                            Stopwatch& watch, PhaseTimes& times) {
  PlanInputs in;
  phase.start("load");
  in.pool = config::load_node_pool(options.nodes_path);
  in.on_gpu = planned_on_gpu(options.device);
  in.model = load_cut_model(options.model_path);
  if (options.mode == PlanMode::kHybrid && !dynamic_cast<const ModelGraph*>(in.model.get())) {
    // Its embedding tables are found and emptied as TorchScript attributes (sparse_tables.h).
    throw std::invalid_argument(options.model_path + ": --mode hybrid takes a TorchScript model; a " +
                                in.model->format() + " model trains as a pipeline or with --mode ps");
  }
  if (options.example_inputs.empty()) {
    throw std::invalid_argument("clusterize needs --example-input, one per forward argument of " +
                                options.model_path);
  }
  in.inputs = make_example_inputs(options.example_inputs, options.seed);
  in.model->check_inputs(in.inputs.size());
  times.load = watch.lap();
  phase.finish();
  log("model " + options.model_path + ": " + std::to_string(in.model->unit_count()) +
      " units, " + std::to_string(in.pool.size()) + " nodes in " + options.nodes_path);
  in.static_batch = check_static_batch(options, *in.model, in.inputs, log);

  phase.start("profile");
  in.profile = in.model->profile(in.inputs);
  times.profile = watch.lap();
  phase.finish();
  return in;
}

// "planned for schedule ..., activations ..., gradients ...", when any of them was asked for.
void log_pipeline_schedule(const planner::PlanningOptions& p, const Log& log) {
  if (!p.schedule && p.activations == config::WireCodec::kNone &&
      p.gradients == config::WireCodec::kNone) {
    return;
  }
  std::string line = "planned for ";
  if (p.schedule == config::PipelineSchedule::kAsync) {
    line += "schedule async (no bubble; a stash of max_in_flight - 1 versions, max_in_flight " +
            (p.max_in_flight > 0 ? std::to_string(p.max_in_flight) : std::string("= stages")) +
            ")";
  } else if (p.schedule) {
    line += std::string("schedule ") + config::to_string(*p.schedule) + " over " +
            std::to_string(p.micro_batches) + " micro-batch(es) (bubble (M + S - 1) / M)";
  } else {
    line += "no schedule (no bubble modelled)";
  }
  line += std::string(", activations ") + config::to_string(p.activations) + ", gradients " +
          config::to_string(p.gradients);
  log(line);
}

// The pipeline plan with each stage's peak measured by options.memory_probe on the daemons'
// device (memory_planning.h); the probes' files go under probes_dir.
PipelinePlan plan_pipeline_measured(const ClusterizeOptions& options, const PlanInputs& in,
                                    const PlanHeader& header, const fs::path& probes_dir,
                                    const Log& log) {
  // The probes are most of a measured plan's time (each trains a stage in a child process);
  // how many rounds they take is not known beforehand.
  PhaseReporter probes(options.progress);
  uint64_t probed = 0;
  MemoryProbe counted = [&, probe = probe_on(options.device, in.on_gpu, options.memory_probe)](
                            const StageProbe& request) {
    if (probed == 0) probes.start("memory probes");
    StageMemory memory = probe(request);
    probes.advance(++probed);
    return memory;
  };
  MeasuredPlan planned;
  try {
    planned = plan_with_measured_memory(
        *in.model, in.profile, in.inputs,
        memory_pool(in.pool, in.on_gpu, options.nodes_path, options.device), header, counted,
        probes_dir.string(), log);
  } catch (const planner::PoolTooSmall& e) {
    if (!in.on_gpu) throw;
    throw planner::PoolTooSmall(std::string(e.what()) +
                                " (on a GPU a node's RAM here is the smaller of its ram and "
                                "its gpu_memory)");
  }
  if (probed) probes.finish();
  return {std::move(planned.plan), planned.planning, std::move(planned.by_node)};
}

// --mode pipeline's plan: measured when a probe is set, else the cost model's formula alone.
PipelinePlan plan_pipeline(const ClusterizeOptions& options, const PlanInputs& in,
                           const PlanHeader& header, const fs::path& probes_dir, const Log& log) {
  PipelinePlan planned =
      options.memory_probe
          ? plan_pipeline_measured(options, in, header, probes_dir, log)
          : PipelinePlan{planner::plan_pool(in.profile, in.pool, options.seed, options.planning),
                         header.planning,
                         {}};
  log_pipeline_schedule(options.planning, log);
  return planned;
}

// --mode ps's plan: the model's whole state sharded over the servers.
ServerPlan plan_parameter_server(const ClusterizeOptions& options, const PlanInputs& in) {
  const auto state = state_tensors_for_servers(*in.model);
  return {planner::plan_parameter_servers(in.profile, state, in.pool, options.parameter_servers),
          {}};
}

// --mode hybrid's plan: the --on-server embedding tables on the servers.
ServerPlan plan_hybrid(const ClusterizeOptions& options, PlanInputs& in) {
  if (options.on_server.empty()) {
    throw std::invalid_argument("--mode hybrid needs --on-server, the embeddings the servers hold");
  }
  if (options.parameter_servers.evaluator) {
    throw std::invalid_argument("--evaluator: a hybrid plan has none (the trainers validate)");
  }
  ServerPlan planned;
  planned.tables = find_sparse_tables(dynamic_cast<ModelGraph&>(*in.model), options.on_server);
  std::vector<planner::StateTensor> state;
  for (const auto& table : planned.tables) state.push_back({table.weight, table.bytes});
  planned.plan = planner::plan_parameter_servers(in.profile, state, in.pool,
                                                 options.parameter_servers);
  return planned;
}

// What a node's metadata says of its memory: its pool entry's ram (and gpu_memory on a GPU) and,
// when probed, its stage's peak as measured.
void set_memory_estimates(config::NodeMetadata& node, const PlanInputs& in,
                          const std::map<int, StageMemory>& measured) {
  for (const auto& entry : in.pool) {
    if (entry.id != node.node_id) continue;
    node.estimates.node_ram_bytes = static_cast<int64_t>(entry.ram_bytes());
    if (in.on_gpu) node.estimates.node_gpu_memory_bytes = static_cast<int64_t>(entry.gpu_memory_bytes());
  }
  const auto it = measured.find(node.node_id);
  if (it == measured.end()) return;
  // What the host holds, which a daemon checks against its memory budget; on a GPU the card's
  // peak beside it.
  const StageMemory& m = it->second;
  const bool split = m.host_peak_bytes > 0;
  const int64_t peak = split ? m.host_peak_bytes : m.peak_bytes;
  node.estimates.peak_memory_bytes = peak;
  node.estimates.daemon_baseline_bytes =
      std::min(split ? m.host_baseline_bytes : m.baseline_bytes, peak);
  node.estimates.device_peak_memory_bytes = m.device_peak_bytes;
}

// The "cut" and "save" phases of a pipeline plan: its stages, then each node's metadata.
std::vector<config::NodeMetadata> write_pipeline(const PipelinePlan& planned,
                                                 const PlanInputs& in, const PlanHeader& header,
                                                 const StagingDirectory& staging,
                                                 PhaseReporter& phase, Stopwatch& watch,
                                                 PhaseTimes& times) {
  auto nodes = write_plan(*in.model, planned.plan, in.pool, header, staging.path().string());
  times.cut = watch.lap();
  phase.finish();
  phase.start("save", nodes.size());
  uint64_t saved = 0;
  for (auto& node : nodes) {
    set_memory_estimates(node, in, planned.measured);
    base::write_file_unsynced(staging.layout().node_file(node.node_id), config::to_json(node));
    phase.advance(++saved);
  }
  times.save = watch.lap();
  return nodes;
}

// The "cut" phase of a server plan: its writer cuts and saves in one call.
std::vector<config::NodeMetadata> write_servers(PlanMode mode, const ServerPlan& planned,
                                                const PlanInputs& in, const PlanHeader& header,
                                                const StagingDirectory& staging) {
  return mode == PlanMode::kHybrid
             ? write_hybrid_plan(dynamic_cast<const ModelGraph&>(*in.model), planned.plan,
                                 planned.tables, in.pool, header, staging.path().string())
             : write_parameter_server_plan(*in.model, planned.plan, in.pool, header,
                                           staging.path().string());
}

// The clusters --verify chains for a server plan. Every node's stage is cut from the whole model
// alike: checking one checks them all (a hybrid trainer's is a server's with the tables emptied,
// which only rows can fill).
planner::PoolPlan chains_to_verify(PlanMode mode, const planner::PsPoolPlan& ps,
                                   size_t unit_count) {
  planner::PoolPlan plan;
  planner::ClusterPlan first;
  first.id = 0;
  const int checked = mode == PlanMode::kHybrid ? ps.servers.front().node_id
                                                : ps.workers.front().node_id;
  first.stages.push_back({checked, 0, unit_count, {}});
  plan.clusters = {first};
  plan.samples_per_second = ps.samples_per_second;
  plan.unplaced_nodes = ps.unplaced_nodes;
  return plan;
}

// One --verify comparison of a cluster's written stages with the whole model, over
// `micro_batches`; false when it was skipped (and said why).
bool verify_cluster_once(const ClusterizeOptions& options, const PlanInputs& in,
                         const StagingDirectory& staging, const planner::ClusterPlan& cluster,
                         const std::vector<config::NodeMetadata>& chain_nodes, int micro_batches,
                         ClusterizeResult& result, const Log& log) {
  const int64_t batch_samples =
      in.inputs.empty() || in.inputs[0].dim() == 0 ? 0 : in.inputs[0].size(0);
  const std::string what = "cluster " + std::to_string(cluster.id) +
                           (micro_batches == 1 ? std::string()
                                               : " over " + std::to_string(micro_batches) +
                                                     " micro-batches");
  if (micro_batches > 1 && in.static_batch > 0) {
    log("verify " + what + ": skipped, the model runs at its exported batch of " +
        std::to_string(in.static_batch) + " only");
    return false;
  }
  if (micro_batches > 1 && batch_samples < micro_batches) {
    log("verify " + what + ": skipped, the example batch has " + std::to_string(batch_samples) +
        " sample(s)");
    return false;
  }
  // A fresh chain each time: a comparison leaves gradients and BatchNorm statistics behind.
  auto chain = StageChain::load(staging.path().string(), chain_nodes);
  ChainComparison comparison;
  try {
    comparison = compare_with_model(options.model_path, chain, in.inputs, options.seed,
                                    micro_batches);
  } catch (const WholeModelFailure& e) {
    // The model itself cannot train on parts of the example this small (BatchNorm on one
    // sample per channel): the example batch was checked whole; say so, and go on.
    if (micro_batches == 1) throw;
    log("verify " + what + ": skipped, the whole model cannot train on micro-batches of " +
        std::to_string(batch_samples / micro_batches) + " sample(s) (" + e.reason +
        "); an example batch of " + std::to_string(2 * micro_batches) +
        " or more checks the daemons' order");
    return false;
  }
  if (!comparison.failure.empty()) {
    throw std::runtime_error("verify failed for " + what + ": " + comparison.failure +
                             "; nothing written");
  }
  log("verify " + what + ": largest absolute difference " + std::to_string(comparison.max()) +
      " (outputs " + std::to_string(comparison.output_diff) + ", gradients " +
      std::to_string(comparison.grad_diff) + ", buffers " +
      std::to_string(comparison.buffer_diff) + ")" +
      (comparison.worst.empty() ? "" : ", most in " + comparison.worst));
  if (comparison.max() > result.verify_max_diff) {
    result.verify_max_diff = comparison.max();
    result.verify_worst = comparison.worst;
  }
  if (!(comparison.max() <= options.verify_tolerance)) {
    throw std::runtime_error("verify failed for " + what +
                             ": stages differ from the whole model by " +
                             std::to_string(comparison.max()) + " in " + comparison.worst +
                             " (tolerance " + std::to_string(options.verify_tolerance) +
                             "); nothing written");
  }
  return true;
}

// The "verify" phase: each cluster of result.plan chained from the written files, once on the
// whole batch, then over two micro-batches in the GPipe order of the daemons, which catches a
// stage overwriting what an earlier micro-batch's backward still needs.
void verify_written_plan(const ClusterizeOptions& options, const PlanInputs& in,
                         const StagingDirectory& staging, PhaseReporter& phase,
                         ClusterizeResult& result, const Log& log) {
  result.verify_max_diff = 0;
  uint64_t compared = 0;
  phase.start("verify", 2 * result.plan.clusters.size());
  for (const auto& cluster : result.plan.clusters) {
    std::vector<config::NodeMetadata> chain_nodes;
    for (const auto& stage : cluster.stages) {
      chain_nodes.push_back(config::load_node_metadata(staging.layout().node_file(stage.node_id)));
    }
    for (int micro_batches : {1, 2}) {
      if (micro_batches == 2) phase.advance(++compared);
      verify_cluster_once(options, in, staging, cluster, chain_nodes, micro_batches, result, log);
    }
    compared = 2 * (&cluster - result.plan.clusters.data() + 1);
    phase.advance(compared);
  }
  phase.finish();
}

// A server plan's lines after the table: each server's shard, each sparse table, the totals.
void log_server_plan(PlanMode mode, const planner::PsPoolPlan& ps,
                     const std::vector<SparseTableUse>& tables, const Log& log) {
  char line[256];
  for (const auto& server : ps.servers) {
    std::snprintf(line, sizeof line, "server %s: %zu tensors, %s, exchange %.1f ms a step",
                  config::node_name(server.node_id).c_str(), server.tensors.size(),
                  human_bytes(static_cast<double>(server.shard_bytes)).c_str(),
                  server.exchange_seconds * 1e3);
    log(line);
  }
  for (const auto& table : tables) {
    log("sparse table " + table.weight + " (input " + std::to_string(table.index_input) +
        ") on the server that holds it; the trainers look up rows");
  }
  std::snprintf(line, sizeof line,
                "parameter servers: %zu server(s), %zu %s%s; estimated step %.1f ms",
                ps.servers.size(), ps.workers.size(),
                mode == PlanMode::kHybrid ? "trainer(s)" : "worker(s)",
                ps.evaluator ? (", evaluator node_" + std::to_string(*ps.evaluator)).c_str() : "",
                ps.step_seconds * 1e3);
  log(line);
}

// The nodes the plan leaves out, and why.
void log_unplaced(const planner::PoolPlan& plan, const planner::PlanningOptions& planning,
                  const Log& log) {
  if (plan.unplaced_nodes.empty()) return;
  std::string names;
  for (int id : plan.unplaced_nodes) names += " node_" + std::to_string(id);
  const bool layout = planning.stages > 0 || planning.clusters > 0;
  log(std::string(layout ? "left out (the layout asked for needs no more nodes):"
                         : "left out (too little memory):") + names);
}

}  // namespace

// Each mode is its own plan (PipelinePlan, ServerPlan) made by its own function and written by
// its own writer; what follows is shared: verify, commit, report.
ClusterizeResult clusterize(const ClusterizeOptions& options, const Log& log) {
  ClusterizeResult result;
  Stopwatch watch;
  PhaseReporter phase(options.progress);
  PlanInputs in = load_and_profile(options, log, phase, watch, result.times);

  PlanHeader header{options.model_path, options.seed, options.example_inputs, options.planning};
  StagingDirectory staging(options.out_dir);
  std::vector<SparseTableUse> tables;  // hybrid: reported at the end
  phase.start("plan");
  if (options.mode == PlanMode::kPipeline) {
    PipelinePlan planned = plan_pipeline(options, in, header, staging.path() / "probes", log);
    header.planning = planned.planning;
    result.times.plan = watch.lap();
    phase.finish();
    phase.start("cut");
    result.nodes = write_pipeline(planned, in, header, staging, phase, watch, result.times);
    result.plan = std::move(planned.plan);
  } else {
    ServerPlan planned = options.mode == PlanMode::kHybrid ? plan_hybrid(options, in)
                                                           : plan_parameter_server(options, in);
    result.times.plan = watch.lap();
    phase.finish();
    phase.start("cut");
    result.nodes = write_servers(options.mode, planned, in, header, staging);
    result.plan = chains_to_verify(options.mode, planned.plan, in.model->unit_count());
    result.ps_plan = std::move(planned.plan);
    tables = std::move(planned.tables);
    result.times.cut = watch.lap();
  }
  phase.finish();

  if (options.verify) {
    verify_written_plan(options, in, staging, phase, result, log);
    result.times.verify = watch.lap();
  }

  // Moving the plan into place is the last of saving it.
  staging.commit();
  result.times.save += watch.lap();
  for (const auto& line : describe_plan(result.nodes)) log(line);
  if (result.ps_plan) log_server_plan(options.mode, *result.ps_plan, tables, log);
  log_unplaced(result.plan, options.planning, log);
  return result;
}

}  // namespace ravnest::graph
