// ravnest clusterize MODEL: profile, plan, cut and write the stages (libs/graph/clusterize.h),
// optionally --push them.
#include <cstdio>
#include <memory>
#include <stdexcept>

#include "apps/ravnest/commands/commands.h"
#include "apps/ravnest/commands/connection.h"
#include "apps/ravnest/commands/tracker_pool.h"
#include "apps/ravnest/commands/console.h"
#include "apps/ravnest/clusterize_progress_view.h"
#include "apps/ravnest/memory_probe_process.h"
#include "libs/config/plan/layout_request.h"
#include "libs/graph/clusterize.h"
#include "libs/graph/clusterize_flags.h"
#include "libs/training/training_device.h"

namespace ravnest::cli {
namespace {

struct ClusterizeCommand {
  graph::ClusterizeOptions options;
  graph::ClusterizeFlags flags;
  Connection connection;
  bool push = false;
  bool no_memory_probe = false;
  std::string plan_file;  // --plan-file: a [plan] block
  std::string tracker;    // --tracker: --nodes written from its live pool first
  CLI::Option* servers = nullptr;
  CLI::Option* evaluator = nullptr;
  CLI::Option* on_server = nullptr;

  int run();
  void report(const graph::ClusterizeResult& result) const;
};

int ClusterizeCommand::run() {
  if (!plan_file.empty()) {
    // The command line wins over the file, field by field.
    const auto layout = config::load_layout_request(plan_file);
    if (options.planning.stages == 0) options.planning.stages = layout.stages;
    if (options.planning.clusters == 0) options.planning.clusters = layout.clusters;
  }
  flags.servers_given = servers->count() > 0;
  flags.evaluator_given = evaluator->count() > 0;
  flags.on_server_given = on_server->count() > 0;
  graph::apply_clusterize_flags(flags, options);
  connection.plan_dir = options.out_dir;
  if (!tracker.empty()) {
    const auto pool = read_tracker_pool(tracker, connection);
    write_tracker_pool(pool, tracker, options.nodes_path);
    say("wrote " + options.nodes_path + ": " + std::to_string(pool.members.size()) +
        " node(s) from tracker " + tracker + " (epoch " + std::to_string(pool.epoch.value) + ")");
  }
  if (!no_memory_probe) {
    // The probes run where the daemons will train: this machine must have that device.
    try {
      training::compute_device(options.device);
    } catch (const std::exception& e) {
      throw std::runtime_error("ravnest clusterize --device " + options.device +
                               ": the memory probes run on this machine: " + e.what() +
                               " (--no-memory-probe plans with the formula alone)");
    }
    options.memory_probe = process_memory_probe();
  }
  // Each phase as it goes: a live line on a terminal, a line a phase otherwise.
  ClusterizeProgressView view;
  options.progress = [&view](const graph::ClusterizeProgress& p) { view.on_progress(p); };
  graph::ClusterizeResult result;
  try {
    result = graph::clusterize(options, [&view](const std::string& line) { view.say(line); });
  } catch (...) {
    view.clear();  // the error line starts a line of its own
    throw;
  }
  view.clear();
  report(result);
  if (push) connection.open().push(say);
  return 0;
}

void ClusterizeCommand::report(const graph::ClusterizeResult& result) const {
  if (result.ps_plan) {
    std::printf("\n%zu server(s), %zu %s%s, estimated %.1f samples/s (step %.1f ms); plan "
                "written to %s\n",
                result.ps_plan->servers.size(), result.ps_plan->workers.size(),
                options.mode == graph::PlanMode::kHybrid ? "trainer(s)" : "worker(s)",
                result.ps_plan->evaluator ? ", an evaluator" : "", result.ps_plan->samples_per_second,
                result.ps_plan->step_seconds * 1e3, options.out_dir.c_str());
  } else {
    std::printf("\n%zu cluster(s), %zu node(s), estimated %.1f samples/s; plan written to %s\n",
                result.plan.clusters.size(), result.nodes.size(), result.plan.samples_per_second,
                options.out_dir.c_str());
  }
  const auto& t = result.times;
  std::printf("phases: load %.2fs, profile %.2fs, plan %.2fs, cut %.2fs, save %.2fs", t.load,
              t.profile, t.plan, t.cut, t.save);
  if (options.verify) std::printf(", verify %.2fs", t.verify);
  std::printf("\n");
  if (options.verify) {
    std::printf("verify: largest absolute difference %.3g (tolerance %.0e)\n",
                result.verify_max_diff, options.verify_tolerance);
  }
  std::fflush(stdout);
}

// --stages and --clusters: CLI::PositiveNumber's refusal printed its range as a 309-digit double.
std::string positive_count(const std::string& value) {
  try {
    size_t used = 0;
    if (std::stol(value, &used) >= 1 && used == value.size()) return std::string();
  } catch (const std::exception&) {
  }
  return "must be a whole number, 1 or more";
}

}  // namespace

Command add_clusterize(CLI::App& app) {
  auto c = std::make_shared<ClusterizeCommand>();
  auto& o = c->options;
  auto* cmd = app.add_subcommand(
      "clusterize", "Profile a model (torch.export's .pt2, or TorchScript), group the nodes into "
                    "clusters and cut the model into one stage per node");
  cmd->add_option("model", o.model_path,
                  "the model: a torch.export archive (.pt2, torch.export.save; the LibTorch 2.x "
                  "build) or a TorchScript model (.pt, torch.jit.script or torch.jit.trace)")
      ->required();
  cmd->add_option("--nodes", o.nodes_path,
                  "node pool, Ravnest's node_configs.json or the same as TOML")
      ->capture_default_str();
  cmd->add_option("--example-input", o.example_inputs,
                  "one per forward argument: SHAPE[:DTYPE[:HIGH]] such as 64x1x8x8:float32 "
                  "or 64x11:int64, or a tensor saved with torch.save")
      ->take_all();
  cmd->add_option("--out", o.out_dir, "output directory")->capture_default_str();
  cmd->add_option("--seed", o.seed, "seed for example inputs and the planner")
      ->capture_default_str();
  cmd->add_flag("--no-memory-probe", c->no_memory_probe,
                "plan memory with the formula alone, without training each stage once to "
                "measure its peak (faster; daemons then cannot check a stage at push)");
  cmd->add_option("--device", o.device,
                  "where the daemons train: cpu, cuda or cuda:N; on a GPU the memory "
                  "probes run on this machine's GPU and every node declares gpu_memory")
      ->capture_default_str();
  cmd->add_flag("--verify", o.verify,
                "chain the written stages in-process and compare with the whole model, "
                "on the example batch and over two micro-batches");
  cmd->add_option("--mode", c->flags.mode,
                  "pipeline: clusters of pipelines; ps: parameter servers, workers and an "
                  "optional evaluator; hybrid: embeddings on servers, the rest "
                  "data-parallel (docs/parameter-server.md)")
      ->capture_default_str();
  c->servers = cmd->add_option("--servers", o.parameter_servers.servers,
                               "--mode ps: how many servers share the model")
                   ->capture_default_str();
  c->evaluator = cmd->add_flag("--evaluator", o.parameter_servers.evaluator,
                               "--mode ps: one node scores the servers' weights");
  c->on_server = cmd->add_option("--on-server", o.on_server,
                                 "--mode hybrid: an embedding submodule the servers hold (repeat "
                                 "or separate by commas), e.g. emb")
                     ->delimiter(',');
  cmd->add_option("--schedule", c->flags.schedule,
                  "plan for this schedule: gpipe, 1f1b (their bubble) or async (no bubble; "
                  "the weight stash's memory); default: neither modelled");
  cmd->add_option("--micro-batches", o.planning.micro_batches,
                  "with --schedule: micro-batches a batch (the bubble shrinks with them)")
      ->capture_default_str();
  cmd->add_option("--max-in-flight", o.planning.max_in_flight,
                  "with --schedule async: micro-batches in flight (0: the stages)")
      ->capture_default_str();
  cmd->add_option("--stages", o.planning.stages,
                  "every cluster this many stages (the planner still picks the nodes and cuts)")
      ->check(positive_count);
  cmd->add_option("--clusters", o.planning.clusters,
                  "this many clusters (copies of the model trained data-parallel)")
      ->check(positive_count);
  cmd->add_option("--plan-file", c->plan_file,
                  "a TOML file whose [plan] block sets stages = K and/or clusters = C (the "
                  "flags win)");
  cmd->add_option("--compression", c->flags.compression,
                  "plan for activations and gradients sent as none, fp16, bf16 or int8");
  cmd->add_flag("--push", c->push, "push the stages to the daemons afterwards");
  cmd->add_option("--tracker", c->tracker,
                  "HOST:PORT of a tracker (ravnest tracker): write --nodes from its live pool, "
                  "then plan on it");
  cmd->add_option("--secret-file", c->connection.secret_file, "the daemons' shared secret");
  return {cmd, [c] { return c->run(); }};
}

}  // namespace ravnest::cli
