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


std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000 && u < 4) {
    bytes /= 1000;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return text;
}

std::string human_count(int64_t n) {
  char text[32];
  if (n >= 1000000) std::snprintf(text, sizeof text, "%.2fM", n / 1e6);
  else if (n >= 1000) std::snprintf(text, sizeof text, "%.1fK", n / 1e3);
  else std::snprintf(text, sizeof text, "%lld", static_cast<long long>(n));
  return text;
}

}  // namespace

std::string plan_layout_line(const std::vector<config::NodeMetadata>& nodes) {
  std::map<int, int> stages;  // cluster -> its stage count
  for (const auto& node : nodes) stages[node.cluster] = std::max(stages[node.cluster], node.cluster_size);
  if (stages.empty()) return "an empty plan";
  const bool copies = std::all_of(stages.begin(), stages.end(),
                                  [](const auto& c) { return c.second == 1; });
  const std::string count = std::to_string(stages.size());
  if (copies) {
    const auto& e = nodes.front().estimates;
    const double peak = e.peak_memory_bytes > 0 ? static_cast<double>(e.peak_memory_bytes)
                                                : e.memory_bytes / planner::memory_margin();
    std::string fits = "the whole model (peak " + human_bytes(peak);
    if (e.node_ram_bytes > 0) fits += " of " + human_bytes(static_cast<double>(e.node_ram_bytes));
    fits += ") fits one node";
    if (stages.size() == 1) return "one node, no pipeline: " + fits;
    return count + " data-parallel copies of the whole model, not a pipeline: " + fits +
           ", and " + count + " copies that average their weights are estimated to train faster "
           "than a pipeline over these nodes (a pipeline: clusterize --stages N, in Python "
           "clusterize(model, ..., stages=N))";
  }
  std::string sizes;
  for (const auto& [cluster, n] : stages) sizes += (sizes.empty() ? "" : ", ") + std::to_string(n);
  return count + (stages.size() == 1 ? " pipeline" : " pipelines") + " of " + sizes +
         " stages (" + (stages.size() == 1 ? "one cluster" : "data-parallel clusters") +
         "): the planner's fastest estimate for this pool and model";
}

std::vector<std::string> describe_plan(const std::vector<config::NodeMetadata>& nodes) {
  std::vector<std::string> lines;
  lines.push_back(plan_layout_line(nodes));
  std::map<int, const config::NodeMetadata*> by_id;
  for (const auto& node : nodes) by_id[node.node_id] = &node;
  for (const auto& [id, node] : by_id) {
    lines.push_back("Node(" + std::to_string(id) + ", Cluster(" + std::to_string(node->cluster) +
                    "))");
    lines.push_back("self.IP(" + node->address + ")");
    std::string ring_ids, address_to_param;
    for (const auto& ring : node->rings) {
      const std::string first = ring.parameters.empty() ? "" : ring.parameters.front();
      ring_ids += (ring_ids.empty() ? "" : ", ") + std::to_string(ring.id) + ": '" + first + "'";
      const std::string& address = ring.next.address;
      address_to_param += (address_to_param.empty() ? "" : ", ") + ("'" + address + "': '") +
                          first + "'";
    }
    lines.push_back("Ring IDs({" + ring_ids + "})");
    lines.push_back("Address2Param({" + address_to_param + "})");
    lines.push_back("");
  }
  // Memory per node: the stage's peak as measured (or, marked "~", as modelled), the node's RAM
  // as its pool entry declares it, and what is left of it at that peak.
  char row[320];
  std::snprintf(row, sizeof row, "%-8s %-6s %-10s %-9s %10s %10s %10s %10s %10s %14s", "cluster",
                "node", "role", "stage", "params", "peak", "ram", "free", "step", "fwd B/sample");
  lines.push_back(row);
  bool modelled = false;
  for (const auto& node : nodes) {
    const auto& e = node.estimates;
    const bool measured = e.peak_memory_bytes > 0;
    modelled = modelled || !measured;
    const double peak = measured ? static_cast<double>(e.peak_memory_bytes)
                                 : e.memory_bytes / planner::memory_margin();
    std::string free_text = "-";
    std::string ram_text = "-";
    if (e.node_ram_bytes > 0) {
      ram_text = human_bytes(static_cast<double>(e.node_ram_bytes));
      char text[32];
      std::snprintf(text, sizeof text, "%.0f%%",
                    100.0 * (static_cast<double>(e.node_ram_bytes) - peak) /
                        static_cast<double>(e.node_ram_bytes));
      free_text = text;
    }
    std::snprintf(row, sizeof row, "%-8d %-6d %-10s %-9s %10s %10s %10s %10s %9.1fms %14s",
                  node.cluster, node.node_id, config::role_name(node.role).c_str(),
                  (std::to_string(node.position + 1) + "/" + std::to_string(node.cluster_size))
                      .c_str(),
                  human_count(e.parameter_count).c_str(),
                  ((measured ? "" : "~") + human_bytes(peak)).c_str(), ram_text.c_str(),
                  free_text.c_str(), e.step_seconds * 1e3,
                  human_bytes(e.forward_bytes_per_sample).c_str());
    lines.push_back(row);
  }
  char note[200];
  std::snprintf(note, sizeof note,
                "peak: %s, a daemon's own memory included; a node takes a stage whose peak "
                "x %.2f fits its ram",
                modelled ? "~ modelled (not measured), else measured by a probe" : "measured by a probe",
                planner::memory_margin());
  lines.push_back(note);
  return lines;
}

ClusterizeResult clusterize(const ClusterizeOptions& options,
                            const std::function<void(const std::string&)>& log) {
  ClusterizeResult result;
  Stopwatch watch;
  PhaseReporter phase(options.progress);
  phase.start("load");

  const auto pool = config::load_node_pool(options.nodes_path);
  const bool on_gpu = planned_on_gpu(options.device);
  const std::unique_ptr<CutModel> model = load_cut_model(options.model_path);
  if (options.mode == PlanMode::kHybrid && !dynamic_cast<const ModelGraph*>(model.get())) {
    // Its embedding tables are found and emptied as TorchScript attributes (sparse_tables.h).
    throw std::invalid_argument(options.model_path + ": --mode hybrid takes a TorchScript model; a " +
                                model->format() + " model trains as a pipeline or with --mode ps");
  }
  if (options.example_inputs.empty()) {
    throw std::invalid_argument("clusterize needs --example-input, one per forward argument of " +
                                options.model_path);
  }
  const auto inputs = make_example_inputs(options.example_inputs, options.seed);
  model->check_inputs(inputs.size());
  result.times.load = watch.lap();
  phase.finish();
  log("model " + options.model_path + ": " + std::to_string(model->unit_count()) +
      " units, " + std::to_string(pool.size()) + " nodes in " + options.nodes_path);

  // A model that runs at one batch size only (a .pt2 exported without a batch Dim) cannot take
  // micro-batches of another: refused here, not on the daemons.
  const int64_t example_batch = inputs.empty() || inputs[0].dim() == 0 ? 0 : inputs[0].size(0);
  const int64_t static_batch = model->static_batch();
  if (static_batch > 0) {
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
  }

  phase.start("profile");
  const planner::ModelProfile profile = model->profile(inputs);
  result.times.profile = watch.lap();
  phase.finish();

  PlanHeader header{options.model_path, options.seed, options.example_inputs, options.planning};
  StagingDirectory staging(options.out_dir);
  std::map<int, StageMemory> measured_memory;
  std::vector<SparseTableUse> tables;
  phase.start("plan");
  if (options.mode == PlanMode::kParameterServer) {
    const auto state = state_tensors_for_servers(*model);
    result.ps_plan = planner::plan_parameter_servers(profile, state, pool,
                                                     options.parameter_servers);
  } else if (options.mode == PlanMode::kHybrid) {
    if (options.on_server.empty()) {
      throw std::invalid_argument("--mode hybrid needs --on-server, the embeddings the servers hold");
    }
    if (options.parameter_servers.evaluator) {
      throw std::invalid_argument("--evaluator: a hybrid plan has none (the trainers validate)");
    }
    tables = find_sparse_tables(dynamic_cast<ModelGraph&>(*model), options.on_server);
    std::vector<planner::StateTensor> state;
    for (const auto& table : tables) state.push_back({table.weight, table.bytes});
    result.ps_plan = planner::plan_parameter_servers(profile, state, pool,
                                                     options.parameter_servers);
  } else {
    if (options.memory_probe) {
      MeasuredPlan planned;
      // The probes are most of a measured plan's time (each trains a stage in a child process);
      // how many rounds they take is not known beforehand.
      PhaseReporter probes(options.progress);
      uint64_t probed = 0;
      MemoryProbe counted = [&, probe = probe_on(options.device, on_gpu, options.memory_probe)](
                                const StageProbe& request) {
        if (probed == 0) probes.start("memory probes");
        StageMemory memory = probe(request);
        probes.advance(++probed);
        return memory;
      };
      try {
        planned = plan_with_measured_memory(
            *model, profile, inputs,
            memory_pool(pool, on_gpu, options.nodes_path, options.device), header,
            counted, (staging.path() / "probes").string(), log);
      } catch (const planner::PoolTooSmall& e) {
        if (!on_gpu) throw;
        throw planner::PoolTooSmall(std::string(e.what()) +
                                    " (on a GPU a node's RAM here is the smaller of its ram and "
                                    "its gpu_memory)");
      }
      if (probed) probes.finish();
      result.plan = std::move(planned.plan);
      header.planning = planned.planning;
      measured_memory = std::move(planned.by_node);
    } else {
      result.plan = planner::plan_pool(profile, pool, options.seed, options.planning);
    }
    const auto& p = options.planning;
    if (p.schedule || p.activations != config::WireCodec::kNone ||
        p.gradients != config::WireCodec::kNone) {
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
  }
  result.times.plan = watch.lap();
  phase.finish();
  phase.start("cut");

  if (result.ps_plan) {
    result.nodes = options.mode == PlanMode::kHybrid
                       ? write_hybrid_plan(dynamic_cast<const ModelGraph&>(*model), *result.ps_plan, tables, pool, header,
                                           staging.path().string())
                       : write_parameter_server_plan(*model, *result.ps_plan, pool, header,
                                                     staging.path().string());
    // Every node's stage is cut from the whole model alike: checking one checks them all (a
    // hybrid trainer's is a server's with the tables emptied, which only rows can fill).
    planner::ClusterPlan first;
    first.id = 0;
    const int checked = options.mode == PlanMode::kHybrid ? result.ps_plan->servers.front().node_id
                                                          : result.ps_plan->workers.front().node_id;
    first.stages.push_back({checked, 0, model->unit_count(), {}});
    result.plan.clusters = {first};
    result.plan.samples_per_second = result.ps_plan->samples_per_second;
    result.plan.unplaced_nodes = result.ps_plan->unplaced_nodes;
  } else {
    result.nodes = write_plan(*model, result.plan, pool, header, staging.path().string());
    result.times.cut = watch.lap();
    phase.finish();
    phase.start("save", result.nodes.size());
    uint64_t saved = 0;
    for (auto& node : result.nodes) {
      for (const auto& entry : pool) {
        if (entry.id != node.node_id) continue;
        node.estimates.node_ram_bytes = static_cast<int64_t>(entry.ram_bytes());
        if (on_gpu) node.estimates.node_gpu_memory_bytes = static_cast<int64_t>(entry.gpu_memory_bytes());
      }
      const auto it = measured_memory.find(node.node_id);
      if (it != measured_memory.end()) {
        // What the host holds, which a daemon checks against its memory budget; on a GPU the
        // card's peak beside it.
        const StageMemory& m = it->second;
        const bool split = m.host_peak_bytes > 0;
        const int64_t peak = split ? m.host_peak_bytes : m.peak_bytes;
        node.estimates.peak_memory_bytes = peak;
        node.estimates.daemon_baseline_bytes =
            std::min(split ? m.host_baseline_bytes : m.baseline_bytes, peak);
        node.estimates.device_peak_memory_bytes = m.device_peak_bytes;
      }
      base::write_file_unsynced(staging.layout().node_file(node.node_id), config::to_json(node));
      phase.advance(++saved);
    }
    result.times.save = watch.lap();
  }
  if (result.ps_plan) {
    // The parameter-server writers cut and save in one call.
    result.times.cut = watch.lap();
  }
  phase.finish();

  if (options.verify) {
    result.verify_max_diff = 0;
    uint64_t compared = 0;
    phase.start("verify", 2 * result.plan.clusters.size());
    // Once on the whole batch, then over two micro-batches in the GPipe order of the daemons,
    // which catches a stage overwriting what an earlier micro-batch's backward still needs.
    const int64_t batch_samples = inputs.empty() || inputs[0].dim() == 0 ? 0 : inputs[0].size(0);
    for (const auto& cluster : result.plan.clusters) {
      std::vector<config::NodeMetadata> chain_nodes;
      for (const auto& stage : cluster.stages) {
        chain_nodes.push_back(config::load_node_metadata(staging.layout().node_file(stage.node_id)));
      }
      for (int micro_batches : {1, 2}) {
        if (micro_batches == 2) phase.advance(++compared);
        const std::string what = "cluster " + std::to_string(cluster.id) +
                                 (micro_batches == 1 ? std::string()
                                                     : " over " + std::to_string(micro_batches) +
                                                           " micro-batches");
        if (micro_batches > 1 && static_batch > 0) {
          log("verify " + what + ": skipped, the model runs at its exported batch of " +
              std::to_string(static_batch) + " only");
          continue;
        }
        if (micro_batches > 1 && batch_samples < micro_batches) {
          log("verify " + what + ": skipped, the example batch has " +
              std::to_string(batch_samples) + " sample(s)");
          continue;
        }
        // A fresh chain each time: a comparison leaves gradients and BatchNorm statistics behind.
        auto chain = StageChain::load(staging.path().string(), chain_nodes);
        ChainComparison comparison;
        try {
          comparison =
              compare_with_model(options.model_path, chain, inputs, options.seed, micro_batches);
        } catch (const WholeModelFailure& e) {
          // The model itself cannot train on parts of the example this small (BatchNorm on one
          // sample per channel): the example batch was checked whole; say so, and go on.
          if (micro_batches == 1) throw;
          log("verify " + what + ": skipped, the whole model cannot train on micro-batches of " +
              std::to_string(batch_samples / micro_batches) + " sample(s) (" + e.reason +
              "); an example batch of " + std::to_string(2 * micro_batches) +
              " or more checks the daemons' order");
          continue;
        }
        if (!comparison.failure.empty()) {
          throw std::runtime_error("verify failed for " + what + ": " + comparison.failure +
                                   "; nothing written");
        }
        log("verify " + what + ": largest absolute difference " +
            std::to_string(comparison.max()) + " (outputs " +
            std::to_string(comparison.output_diff) + ", gradients " +
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
      }
      compared = 2 * (&cluster - result.plan.clusters.data() + 1);
      phase.advance(compared);
    }
    result.times.verify = watch.lap();
    phase.finish();
  }

  // Moving the plan into place is the last of saving it.
  staging.commit();
  result.times.save += watch.lap();
  for (const auto& line : describe_plan(result.nodes)) log(line);
  if (result.ps_plan) {
    const auto& ps = *result.ps_plan;
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
                  options.mode == PlanMode::kHybrid ? "trainer(s)" : "worker(s)",
                  ps.evaluator ? (", evaluator node_" + std::to_string(*ps.evaluator)).c_str() : "",
                  ps.step_seconds * 1e3);
    log(line);
  }
  if (!result.plan.unplaced_nodes.empty()) {
    std::string names;
    for (int id : result.plan.unplaced_nodes) names += " node_" + std::to_string(id);
    const bool layout = options.planning.stages > 0 || options.planning.clusters > 0;
    log(std::string(layout ? "left out (the layout asked for needs no more nodes):"
                           : "left out (too little memory):") + names);
  }
  return result;
}

}  // namespace ravnest::graph
