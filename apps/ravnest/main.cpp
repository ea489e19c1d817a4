// ravnest: the requester's command line. Thin: parses flags and calls the libraries.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/csrc/jit/serialization/import.h>

#include "apps/ravnest/dashboard_server.h"
#include "apps/ravnest/loss_report.h"
#include "apps/ravnest/memory_view.h"
#include "apps/ravnest/progress_view.h"
#include "apps/ravnest/traffic_view.h"
#include "bench/harness/allreduce_bench.h"
#include "bench/harness/local_daemons.h"
#include "ravnest_version.h"
#include "libs/compat/torch_compat.h"
#include "libs/config/atomic_file.h"
#include "libs/config/job_spec.h"
#include "libs/config/node_pool.h"
#include "libs/config/plan_layout.h"
#include "libs/config/prediction_job.h"
#include "libs/config/secret.h"
#include "libs/data/dataset.h"
#include "apps/ravnest/memory_probe_process.h"
#include "libs/training/training_device.h"
#include "libs/graph/clusterize.h"
#include "libs/graph/fuse.h"
#include "libs/graph/module_file.h"
#include "libs/requester/job_identity.h"
#include "libs/requester/replacement.h"
#include "libs/graph/torch_errors.h"
#include "libs/requester/requester.h"
#include "libs/training/evaluate.h"
#include "libs/training/loss.h"
#include "libs/training/predictions.h"

namespace {

using namespace ravnest;

void say(const std::string& line) { std::cout << line << '\n' << std::flush; }

// Set by SIGINT or SIGTERM while `ravnest train` follows a job.
volatile sig_atomic_t g_interrupted = 0;

void on_interrupt(int signal) {
  g_interrupted = signal;
  // A second one ends the process at once.
  ::signal(signal, SIG_DFL);
}

// The lines joined by "; ", for one line.
std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) out += (i ? "; " : "") + lines[i];
  return out;
}

struct Connection {
  std::string plan_dir = "node_data";
  std::string secret_file;
  bool insecure = false;  // plain TCP instead of TLS (benchmarks only)

  std::string secret() const {
    std::string file = secret_file;
    if (file.empty()) {
      if (const char* env = std::getenv("RAVNEST_SECRET_FILE")) file = env;
    }
    return file.empty() ? std::string() : config::read_secret(file);
  }
  runtime::Requester open() const {
    warn_if_insecure();
    return runtime::Requester(runtime::load_plan(plan_dir), secret(), insecure);
  }
  void warn_if_insecure() const {
    if (insecure) {
      std::cerr << "ravnest: warning: --insecure: TLS is off; everything but the secret travels "
                   "in clear. For benchmarks only\n";
    }
  }
};

void add_connection_options(CLI::App* cmd, Connection& c) {
  cmd->add_option("--plan", c.plan_dir, "plan directory written by clusterize")
      ->capture_default_str();
  cmd->add_option("--secret-file", c.secret_file,
                  "file holding the daemons' shared secret (default: $RAVNEST_SECRET_FILE)");
  cmd->add_flag("--insecure", c.insecure,
                "plain TCP instead of TLS, for benchmarks only (daemons started with --insecure)");
}

std::string model_of_plan(const std::string& plan_dir) {
  const std::string plan_file = config::PlanLayout(plan_dir).plan_file();
  std::ifstream in(plan_file);
  if (!in) throw std::runtime_error(plan_file + ": cannot read");
  return nlohmann::json::parse(in).at("model").get<std::string>();
}

int run_clusterize(const graph::ClusterizeOptions& options, bool push, const Connection& c) {
  auto result = graph::clusterize(options, say);
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
  if (push) {
    Connection pushed = c;
    pushed.plan_dir = options.out_dir;
    pushed.open().push(say);
  }
  return 0;
}

int run_replace(const Connection& c, const std::string& old_name, const std::string& spare_name,
                const std::string& pool_path) {
  const auto pool = config::load_node_pool(pool_path);
  auto spare = std::find_if(pool.begin(), pool.end(),
                            [&](const auto& n) { return n.name == spare_name; });
  if (spare == pool.end()) {
    throw std::runtime_error(pool_path + ": no node \"" + spare_name + "\" in the pool");
  }
  c.warn_if_insecure();
  const auto done =
      runtime::replace_node(c.plan_dir, c.secret(), old_name, *spare, say, c.insecure);
  std::string line = done.spare_name + " replaces " + done.old_name + " (cluster " +
                     std::to_string(done.cluster) + ", position " +
                     std::to_string(done.position) + ")";
  line += done.checkpoint ? "; `ravnest resume` continues the job after update " +
                                std::to_string(*done.checkpoint)
                          : "; `ravnest train` starts a job";
  say(line);
  return 0;
}

int run_train(const Connection& c, const std::string& job, bool detach, bool resume,
              bool attach = false) {
  auto requester = c.open();
  runtime::TrainOptions options;
  options.detach = detach;
  options.resume = resume;
  // Ctrl-C or SIGTERM stops the job on every node instead of leaving it running unwatched.
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  options.interrupted = [] { return g_interrupted != 0; };
  const bool tty = ::isatty(STDOUT_FILENO);
  size_t drawn = 0;
  options.log = [&](const std::string& line) {
    if (tty && drawn) std::cout << "\033[" << drawn << "A\033[J";
    drawn = 0;
    say(line);
  };
  // Redrawn at most ten times a second: events come with every batch of every cluster.
  auto last_drawn = std::chrono::steady_clock::time_point{};
  options.on_progress = [&](const std::vector<runtime::TrainProgress>& clusters) {
    if (!tty) return;
    const auto now = std::chrono::steady_clock::now();
    if (drawn && now - last_drawn < std::chrono::milliseconds(100)) return;
    last_drawn = now;
    if (drawn) std::cout << "\033[" << drawn << "A";
    for (const auto& p : clusters) std::cout << "\033[2K" << runtime::progress_line(p) << '\n';
    drawn = clusters.size();
    std::cout << std::flush;
  };
  runtime::TrainResult result;
  try {
    result = attach ? requester.attach(options) : requester.train(job, options);
  } catch (const runtime::TrainInterrupted& e) {
    if (tty && drawn) std::cout << "\033[" << drawn << "A\033[J" << std::flush;
    std::string line;
    if (e.stopped_by.empty()) {
      const std::string signal = g_interrupted == SIGTERM ? "SIGTERM" : "SIGINT";
      line = "ravnest: interrupted (" + signal + "): job " + std::to_string(e.job_id);
    } else {
      // A node's daemon was stopped and asked for this stop (a plan of several clusters).
      line = "ravnest: " + e.stopped_by + ": job " + std::to_string(e.job_id);
    }
    line += e.not_stopped.empty() ? " stopped on every node"
                                  : " stopped, except on " + joined(e.not_stopped);
    if (!e.stopped_by.empty() && e.boundary && e.not_stopped.empty()) {
      line += " after update " + std::to_string(*e.boundary) +
              "; `ravnest resume` continues it from update " + std::to_string(*e.boundary);
    } else {
      line += "; `ravnest resume` continues it from its last checkpoint";
      if (e.stopped_by.empty()) line += " (`--detach` leaves a job running)";
    }
    std::cerr << line << '\n';
    return 130;
  }
  if (detach) {
    say("job " + std::to_string(result.job_id) + " runs detached; `ravnest status` shows it");
    return 0;
  }
  for (const auto& p : result.clusters) say(runtime::progress_line(p));
  std::printf("training finished in %s\n", runtime::format_duration(result.seconds).c_str());
  std::printf("%s", runtime::traffic_table(requester.status()).c_str());
  return 0;
}

int run_status(const Connection& c) {
  auto requester = c.open();
  std::printf("%-8s %-22s %-8s %-10s %-11s %6s %12s %10s %10s\n", "node", "address", "cluster",
              "role", "state", "epoch", "batches", "loss", "samples/s");
  bool all_reachable = true;
  const auto reports = requester.status();
  for (const auto& r : reports) {
    all_reachable = all_reachable && r.reachable;
    // Only a root knows the run's batches and its samples/s, only a leaf the loss: the others
    // show "-" rather than a 0 that reads as a measurement.
    char batches[48], loss[24], rate[24];
    if (r.status.total_batches > 0) {
      std::snprintf(batches, sizeof batches, "%llu/%llu",
                    static_cast<unsigned long long>(r.status.batches),
                    static_cast<unsigned long long>(r.status.total_batches));
    } else {
      std::snprintf(batches, sizeof batches, "%llu", static_cast<unsigned long long>(r.status.batches));
    }
    if (r.node.returns_model_output) std::snprintf(loss, sizeof loss, "%.4f", r.status.last_loss);
    else std::snprintf(loss, sizeof loss, "-");
    if (r.node.position == 0 && r.node.cluster >= 0) {
      std::snprintf(rate, sizeof rate, "%.1f", r.status.samples_per_second);
    } else {
      std::snprintf(rate, sizeof rate, "-");
    }
    std::printf("%-8s %-22s %-8d %-10s %-11s %6u %12s %10s %10s\n", r.node.name.c_str(),
                r.node.address.c_str(), r.node.cluster, config::role_name(r.node.role).c_str(),
                r.state.c_str(), r.status.epoch + 1, batches, loss, rate);
    if (!r.error.empty()) std::printf("         %s\n", r.error.c_str());
    const std::string memory = r.reachable ? runtime::memory_line(r.status) : "";
    if (!memory.empty()) std::printf("         %s\n", memory.c_str());
  }
  std::printf("%s", runtime::traffic_table(reports).c_str());
  return all_reachable ? 0 : 1;
}

// Each cluster's leaf (or each worker of a parameter-server plan: whoever computes the loss).
int run_losses(const Connection& c, std::optional<int> cluster, const std::string& plot) {
  if (!plot.empty()) {
    const auto ext = std::filesystem::path(plot).extension().string();
    if (ext != ".svg") {
      throw std::invalid_argument("--plot " + plot + ": only .svg plots are written (open one in "
                                  "a browser, or convert it with rsvg-convert)");
    }
  }
  auto requester = c.open();
  const auto plan = runtime::load_plan(c.plan_dir);
  std::vector<runtime::LossHistory> histories;
  bool found = false;
  for (const auto& node : plan.nodes) {
    if (!node.returns_model_output || (cluster && node.cluster != *cluster)) continue;
    found = true;
    const auto fetched = requester.fetch_losses(node.node_id);
    auto history = runtime::parse_loss_history(node.cluster, fetched.losses, fetched.validation,
                                               node.name);
    // Workers of a parameter-server plan each compute losses: one curve per cluster id.
    histories.push_back(std::move(history));
  }
  if (!found) {
    throw std::invalid_argument(cluster ? "--cluster " + std::to_string(*cluster) +
                                              ": no such cluster in " + c.plan_dir
                                        : "no node of " + c.plan_dir + " computes the loss");
  }
  std::printf("%s", runtime::loss_table(histories).c_str());
  if (!plot.empty()) {
    config::write_file_atomically(plot, runtime::loss_svg(histories, "ravnest: " + c.plan_dir));
    say("wrote " + plot);
  }
  return 0;
}

int run_fuse(const Connection& c, int cluster, const std::string& from, std::string model,
             const std::string& out, bool allow_unfinished) {
  std::vector<runtime::StageFile> stages;
  struct RemovedDir {
    std::string path;
    ~RemovedDir() {
      std::error_code ignored;
      if (!path.empty()) std::filesystem::remove_all(path, ignored);
    }
  } fetched_dir;
  if (!from.empty()) {
    stages = runtime::cluster_stage_files(from, cluster);
    if (model.empty()) model = model_of_plan(from);
  } else {
    if (model.empty()) model = model_of_plan(c.plan_dir);
    auto requester = c.open();
    // A parameter-server plan's trained model is on its servers, whatever the cluster.
    const auto servers = requester.servers();
    if (!allow_unfinished) {
      if (servers.empty()) {
        requester.check_finished(cluster);
      } else {
        requester.check_finished(servers);
      }
    }
    // A hybrid plan's tables are on its servers, the rest on the cluster's trainer.
    const bool hybrid = !servers.empty() && servers.front().parameter_server.hybrid();
    if (hybrid && !allow_unfinished) requester.check_finished(cluster);
    // The stages stream into files of a temporary directory beside the output (a stage of GB
    // is never held in memory twice), removed once fused or failed.
    fetched_dir.path = (std::filesystem::path(out) / (".fetched." + std::to_string(::getpid())))
                           .string();
    std::filesystem::create_directories(fetched_dir.path);
    auto fetched_nodes = servers.empty() ? requester.fetch_cluster(cluster, fetched_dir.path)
                                         : requester.fetch_nodes(servers, fetched_dir.path);
    if (hybrid) {
      for (auto& trainer : requester.fetch_cluster(cluster, fetched_dir.path)) {
        fetched_nodes.push_back(std::move(trainer));
      }
    }
    for (auto& fetched : fetched_nodes) {
      runtime::StageFile file;
      file.metadata = std::move(fetched.metadata);
      file.path = fetched.path;
      say("fetched the stage of " + file.metadata.name + " (" + std::to_string(fetched.bytes) +
          " bytes)");
      stages.push_back(std::move(file));
    }
    if (!servers.empty()) stages = runtime::server_shards(std::move(stages));
  }
  auto result = runtime::fuse_stages(model, stages, out);
  say("wrote " + result.state_dict_path + " (" + std::to_string(result.tensors) +
      " tensors) and " + result.model_path);
  return 0;
}

// `target`: a plan directory (through its daemons, one cluster) or a TorchScript model (here).
int run_predict(Connection c, const std::string& target, const std::string& data_path,
                std::string job_path, const std::string& out, int cluster,
                std::optional<int64_t> batch_size) {
  namespace fs = std::filesystem;
  const bool through_plan = fs::is_directory(target);
  if (through_plan) c.plan_dir = target;
  if (!through_plan && !fs::is_regular_file(target)) {
    throw std::runtime_error(target + ": neither a plan directory nor a model file");
  }
  if (!fs::is_regular_file(data_path)) throw std::runtime_error(data_path + ": no such file");
  if (out.empty()) throw std::runtime_error("--out: must name a file");
  if (job_path.empty()) {
    // The job that trained the plan says how its data is read.
    job_path = runtime::last_job_path(c.plan_dir);
  }
  const std::string text = config::prediction_job_text(
      config::read_file(job_path), job_path, fs::absolute(data_path).string(), batch_size);
  if (through_plan) {
    auto plan = runtime::load_plan(c.plan_dir);
    const auto ids = plan.cluster_ids();
    if (std::find(ids.begin(), ids.end(), cluster) == ids.end()) {
      throw std::runtime_error("--cluster " + std::to_string(cluster) + ": no such cluster in " +
                               c.plan_dir);
    }
    plan.nodes = plan.cluster(cluster);
    int leaf = -1;
    for (const auto& node : plan.nodes) {
      if (node.returns_model_output) leaf = node.node_id;
    }
    if (leaf < 0) throw std::runtime_error("no node of cluster " + std::to_string(cluster) +
                                           " computes the model's output");
    c.warn_if_insecure();
    runtime::Requester requester(std::move(plan), c.secret(), c.insecure);
    runtime::TrainOptions options;
    options.log = say;
    // Ctrl-C stops the prediction on every node, as for training.
    struct sigaction action {};
    action.sa_handler = on_interrupt;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGINT, &action, nullptr);
    ::sigaction(SIGTERM, &action, nullptr);
    options.interrupted = [] { return g_interrupted != 0; };
    const auto result = requester.predict(text, job_path, options);
    say("predicted through cluster " + std::to_string(cluster) + " in " +
        std::to_string(result.seconds).substr(0, 4) + " s");
    // Streamed from the leaf into `out` (complete and checked, or not written).
    const uint64_t size = requester.fetch_predictions(leaf, out);
    say("wrote " + out + " (" + std::to_string(size) + " bytes; torch.load reads it)");
    return 0;
  }
  const auto job = config::parse_job(text, job_path);
  const auto dataset = data::load_dataset(job.data, data::Split::kTrain);
  torch::jit::Module model = graph::load_module(target);
  const std::string bytes = runtime::predictions_file(
      runtime::predict_in_process(model, dataset, job.train.batch_size));
  config::write_file_atomically(out, bytes);
  say("wrote " + out + " (" + std::to_string(bytes.size()) + " bytes; torch.load reads it)");
  return 0;
}

int run_evaluate(const std::string& model_path, const std::string& job_path, bool on_train) {
  auto job = config::load_job(job_path);
  auto dataset = data::load_dataset(
      job.data, on_train || job.data.validation.empty() ? data::Split::kTrain
                                                        : data::Split::kValidation);
  torch::jit::Module model = graph::load_module(model_path);
  runtime::Loss loss(job.loss);
  runtime::Evaluation evaluation;
  try {
    evaluation = runtime::evaluate(model, dataset, loss, job.train.batch_size);
  } catch (const std::exception& e) {
    throw std::runtime_error(model_path + " on " + dataset.origin() + ": " +
                             graph::torch_message(e));
  }
  std::printf("%s on %s: loss %.6f", model_path.c_str(), dataset.origin().c_str(),
              evaluation.loss);
  if (std::isfinite(evaluation.accuracy)) std::printf(", accuracy %.4f", evaluation.accuracy);
  std::printf(" (%lld samples)\n", static_cast<long long>(evaluation.samples));
  return 0;
}

void print_figures(const runtime::AllReduceFigures& f) {
  std::printf("%-13s N=%d %8.1f MiB  median %8.4f s  algbw %7.3f GB/s  busbw %7.3f GB/s\n",
              f.name.c_str(), f.nodes, f.bytes / 1048576.0, f.median_seconds(),
              f.algorithm_bandwidth() / 1e9, f.bus_bandwidth() / 1e9);
}

int run_bench_allreduce(int nodes, const std::string& size, int repetitions, bool gloo,
                        bool insecure, bool shared_memory) {
  if (nodes < 2) throw std::invalid_argument("--nodes: an all-reduce needs at least 2 nodes");
  const uint64_t bytes = runtime::parse_size(size);
  if (insecure) {
    std::cerr << "ravnest: warning: --insecure: the daemons of the benchmark run without TLS\n";
  }
  auto ours = runtime::bench_daemon_allreduce(nodes, bytes, repetitions,
                                              runtime::sibling_ravnestd(), insecure, shared_memory);
  print_figures(ours);
  if (gloo) {
    auto baseline = runtime::bench_gloo_allreduce(nodes, bytes, repetitions);
    print_figures(baseline);
    std::printf("ravnest/gloo bus bandwidth: %.2fx\n",
                ours.bus_bandwidth() / std::max(baseline.bus_bandwidth(), 1e-12));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ravnest: train PyTorch models across many ordinary machines"};
  app.set_version_flag("--version", "ravnest " RAVNEST_VERSION " (commit " RAVNEST_COMMIT ", " +
                                        ravnest::compat::torch_description() + ")");
  app.require_subcommand(1);

  graph::ClusterizeOptions clusterize;
  Connection connection;
  bool push_after = false;
  auto* cluster_cmd = app.add_subcommand(
      "clusterize", "Profile a TorchScript model, group the nodes into clusters and cut the model "
                    "into one stage per node");
  cluster_cmd->add_option("model", clusterize.model_path,
                          "TorchScript model (.pt) from torch.jit.script or torch.jit.trace")
      ->required();
  cluster_cmd->add_option("--nodes", clusterize.nodes_path,
                          "node pool, Ravnest's node_configs.json or the same as TOML")
      ->capture_default_str();
  cluster_cmd->add_option("--example-input", clusterize.example_inputs,
                          "one per forward argument: SHAPE[:DTYPE[:HIGH]] such as 64x1x8x8:float32 "
                          "or 64x11:int64, or a tensor saved with torch.save")
      ->take_all();
  cluster_cmd->add_option("--out", clusterize.out_dir, "output directory")->capture_default_str();
  cluster_cmd->add_option("--seed", clusterize.seed, "seed for example inputs and the planner")
      ->capture_default_str();
  bool no_memory_probe = false;
  cluster_cmd->add_flag("--no-memory-probe", no_memory_probe,
                        "plan memory with the formula alone, without training each stage once to "
                        "measure its peak (faster; daemons then cannot check a stage at push)");
  cluster_cmd->add_option("--device", clusterize.device,
                          "where the daemons train: cpu, cuda or cuda:N; on a GPU the memory "
                          "probes run on this machine's GPU and every node declares gpu_memory")
      ->capture_default_str();
  cluster_cmd->add_flag("--verify", clusterize.verify,
                        "chain the written stages in-process and compare with the whole model, "
                        "on the example batch and over two micro-batches");
  std::string plan_mode = "pipeline";
  cluster_cmd->add_option("--mode", plan_mode,
                          "pipeline: clusters of pipelines; ps: parameter servers, workers and an "
                          "optional evaluator; hybrid: embeddings on servers, the rest "
                          "data-parallel (docs/parameter-server.md)")
      ->capture_default_str();
  auto* servers_opt = cluster_cmd->add_option("--servers", clusterize.parameter_servers.servers,
                                              "--mode ps: how many servers share the model")
                          ->capture_default_str();
  auto* evaluator_opt = cluster_cmd->add_flag("--evaluator", clusterize.parameter_servers.evaluator,
                                              "--mode ps: one node scores the servers' weights");
  auto* on_server_opt =
      cluster_cmd->add_option("--on-server", clusterize.on_server,
                              "--mode hybrid: an embedding submodule the servers hold (repeat or "
                              "separate by commas), e.g. emb")
          ->delimiter(',');
  std::string plan_schedule, plan_compression;
  cluster_cmd->add_option("--schedule", plan_schedule,
                          "plan for this schedule: gpipe, 1f1b (their bubble) or async (no bubble; "
                          "the weight stash's memory); default: neither modelled");
  cluster_cmd->add_option("--micro-batches", clusterize.planning.micro_batches,
                          "with --schedule: micro-batches a batch (the bubble shrinks with them)")
      ->capture_default_str();
  cluster_cmd->add_option("--max-in-flight", clusterize.planning.max_in_flight,
                          "with --schedule async: micro-batches in flight (0: the stages)")
      ->capture_default_str();
  cluster_cmd->add_option("--compression", plan_compression,
                          "plan for activations and gradients sent as none, fp16, bf16 or int8");
  cluster_cmd->add_flag("--push", push_after, "push the stages to the daemons afterwards");
  cluster_cmd->add_option("--secret-file", connection.secret_file, "the daemons' shared secret");

  auto* push_cmd = app.add_subcommand("push", "Send every node its stage and metadata");
  add_connection_options(push_cmd, connection);

  std::string job_path;
  bool detach = false;
  auto* train_cmd = app.add_subcommand("train", "Run a training job on the plan's daemons");
  train_cmd->add_option("job", job_path, "job file (TOML), see docs/job-file.md");
  train_cmd->add_flag("--detach", detach, "start the job and return; `ravnest status` follows it");
  bool resume = false, attach = false;
  train_cmd->add_flag("--attach", attach,
                      "follow the job that runs on the plan's nodes instead of starting one");
  train_cmd->add_flag("--resume", resume,
                      "continue from the newest checkpoint every node holds (docs/faults.md)");
  add_connection_options(train_cmd, connection);

  std::string resume_job;
  auto* resume_cmd = app.add_subcommand(
      "resume", "Continue the plan's last job (or JOB) from the newest checkpoint every node holds");
  resume_cmd->add_option("job", resume_job, "job file (default: the last one trained)");
  resume_cmd->add_flag("--detach", detach, "start the job and return; `ravnest status` follows it");
  add_connection_options(resume_cmd, connection);

  std::string replace_old, replace_spare, replace_pool = "node_data/node_configs.json";
  auto* replace_cmd = app.add_subcommand(
      "replace", "Put a spare node from the pool in the place of a dead one (docs/faults.md)");
  replace_cmd->add_option("node", replace_old, "the plan's node to replace, e.g. node_2")
      ->required();
  replace_cmd->add_option("--with", replace_spare, "the spare, a pool node not in the plan")
      ->required();
  replace_cmd->add_option("--nodes", replace_pool, "node pool, Ravnest's node_configs.json")
      ->capture_default_str();
  add_connection_options(replace_cmd, connection);

  auto* status_cmd = app.add_subcommand("status", "Show where every node of the plan is");
  add_connection_options(status_cmd, connection);

  auto* losses_cmd = app.add_subcommand(
      "losses", "Each cluster's training losses and validation rounds of the last job, from its leaf");
  add_connection_options(losses_cmd, connection);
  int losses_cluster = -1;
  std::string losses_plot;
  auto* losses_cluster_opt = losses_cmd->add_option("--cluster", losses_cluster, "only this cluster");
  losses_cmd->add_option("--plot", losses_plot, "also write the curves to this .svg file");

  auto* stop_cmd = app.add_subcommand("stop", "Stop the running job on every node");
  add_connection_options(stop_cmd, connection);

  int fuse_cluster = 0;
  std::string fuse_from, fuse_model, fuse_out = "trained";
  auto* fuse_cmd = app.add_subcommand(
      "fuse", "Collect a cluster's trained stages into trained/trained_state_dict.pt and "
              "trained/model.pt");
  fuse_cmd->add_option("--cluster", fuse_cluster, "cluster id")->capture_default_str();
  fuse_cmd->add_option("--from", fuse_from, "a local plan directory instead of the daemons");
  fuse_cmd->add_option("--model", fuse_model, "the original model (default: the plan's)");
  fuse_cmd->add_option("--out", fuse_out, "output directory")->capture_default_str();
  bool fuse_allow_unfinished = false;
  fuse_cmd->add_flag("--allow-unfinished", fuse_allow_unfinished,
                     "fuse the weights as they are when the last job did not finish on every node");
  add_connection_options(fuse_cmd, connection);

  std::string predict_target, predict_data, predict_job, predict_out = "predictions.pt";
  int predict_cluster = 0;
  int64_t predict_batch = 0;
  auto* predict_cmd = app.add_subcommand(
      "predict", "The model's outputs for every sample of DATA, in order, through a plan's "
                 "daemons (eval mode, no autograd) or in one process (docs/predict.md)");
  predict_cmd->add_option("target", predict_target,
                          "a plan directory (its daemons) or a TorchScript model (here)")
      ->required();
  predict_cmd->add_option("data", predict_data, "the data, in the job's [data] format")->required();
  predict_cmd->add_option("--job", predict_job,
                          "the job whose [data] reads DATA (default: the plan's last job)");
  predict_cmd->add_option("--out", predict_out, "where to write the outputs (torch.save format)")
      ->capture_default_str();
  predict_cmd->add_option("--cluster", predict_cluster, "the cluster whose pipeline predicts")
      ->capture_default_str();
  auto* predict_batch_opt =
      predict_cmd->add_option("--batch-size", predict_batch, "samples per batch (default: the job's)");
  add_connection_options(predict_cmd, connection);

  std::string dashboard_listen = "127.0.0.1:8650";
  auto* dashboard_cmd = app.add_subcommand(
      "dashboard", "A local web page: the plan's nodes, loss curves, bytes on the wire and job, "
                   "live while a job runs (docs/dashboard.md)");
  dashboard_cmd->add_option("--listen", dashboard_listen, "host:port to serve on")
      ->capture_default_str();
  add_connection_options(dashboard_cmd, connection);

  std::string eval_model, eval_job;
  bool eval_on_train = false;
  auto* eval_cmd = app.add_subcommand("evaluate", "Loss and accuracy of a model on a job's data");
  eval_cmd->add_option("model", eval_model, "TorchScript model, e.g. trained/model.pt")->required();
  eval_cmd->add_option("job", eval_job, "job file naming the data and the loss")->required();
  eval_cmd->add_flag("--train-data", eval_on_train, "use the training data, not validation");

  int bench_nodes = 2, bench_reps = 5;
  std::string bench_size = "64MiB";
  bool bench_no_gloo = false;
  // clusterize's memory probe, one stage in a process of its own (memory_probe_process.h);
  // not for people, so not in the help.
  app::ProbeMemoryArgs probe_args;
  auto* probe_cmd = app.add_subcommand("probe-memory", "")->group("");
  probe_cmd->add_option("--stage", probe_args.stage)->required();
  probe_cmd->add_option("--inputs", probe_args.inputs)->required();
  probe_cmd->add_option("--scratch", probe_args.scratch)->required();
  probe_cmd->add_option("--result", probe_args.result)->required();
  probe_cmd->add_option("--in-flight", probe_args.in_flight);
  probe_cmd->add_option("--stash", probe_args.stash_versions);
  probe_cmd->add_flag("--root", probe_args.root);
  probe_cmd->add_flag("--leaf", probe_args.leaf);
  probe_cmd->add_flag("--ring", probe_args.ring);
  probe_cmd->add_option("--device", probe_args.device);

  auto* bench_cmd = app.add_subcommand("bench", "Benchmarks that print figures");
  bench_cmd->require_subcommand(1);
  auto* bench_allreduce = bench_cmd->add_subcommand(
      "allreduce", "Ring all-reduce between local daemons, next to Gloo's in the same run");
  bench_allreduce->add_option("--nodes", bench_nodes, "ring members")->capture_default_str();
  bench_allreduce->add_option("--size", bench_size, "bytes of float32 per member")
      ->capture_default_str();
  bench_allreduce->add_option("--reps", bench_reps, "timed repetitions after a warm-up")
      ->capture_default_str();
  bench_allreduce->add_flag("--no-gloo", bench_no_gloo, "skip the Gloo baseline");
  bool bench_insecure = false;
  bench_allreduce->add_flag("--insecure", bench_insecure,
                            "the daemons without TLS (plain TCP), to measure what TLS costs");
  bool bench_no_shared_memory = false;
  bench_allreduce->add_flag("--no-shared-memory", bench_no_shared_memory,
                            "the daemons send every segment through their connections, as "
                            "daemons on different hosts do");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  if (probe_cmd->parsed()) return app::run_probe_memory(probe_args);
  try {
    if (cluster_cmd->parsed()) {
      if (plan_mode != "pipeline" && plan_mode != "ps" && plan_mode != "hybrid") {
        throw std::runtime_error("ravnest clusterize: --mode must be pipeline, ps or hybrid, got \"" +
                                 plan_mode + "\"");
      }
      if (plan_mode == "ps") {
        clusterize.mode = graph::PlanMode::kParameterServer;
      } else if (plan_mode == "hybrid") {
        clusterize.mode = graph::PlanMode::kHybrid;
      } else if (*servers_opt || *evaluator_opt) {
        throw std::runtime_error("ravnest clusterize: --servers and --evaluator need --mode ps "
                                 "or hybrid");
      }
      if (*on_server_opt && plan_mode != "hybrid") {
        throw std::runtime_error("ravnest clusterize: --on-server needs --mode hybrid");
      }
      if (!plan_schedule.empty()) {
        config::PipelineSchedule schedule;
        if (!config::parse_pipeline_schedule(plan_schedule, schedule)) {
          throw std::runtime_error("ravnest clusterize: --schedule must be gpipe, 1f1b or async, "
                                   "got \"" + plan_schedule + "\"");
        }
        clusterize.planning.schedule = schedule;
      }
      if (!plan_compression.empty()) {
        config::WireCodec codec;
        if (!config::parse_wire_codec(plan_compression, codec)) {
          throw std::runtime_error("ravnest clusterize: --compression must be none, fp16, bf16 or "
                                   "int8, got \"" + plan_compression + "\"");
        }
        clusterize.planning.activations = clusterize.planning.gradients = codec;
      }
      if ((!plan_schedule.empty() || !plan_compression.empty()) && plan_mode != "pipeline") {
        throw std::runtime_error("ravnest clusterize: --schedule and --compression plan "
                                 "pipelines, not --mode " + plan_mode);
      }
      if (clusterize.planning.micro_batches < 1) {
        throw std::runtime_error("ravnest clusterize: --micro-batches must be at least 1");
      }
      if (clusterize.planning.max_in_flight < 0) {
        throw std::runtime_error("ravnest clusterize: --max-in-flight must be at least 0");
      }
      if (clusterize.planning.max_in_flight > 0 &&
          clusterize.planning.schedule != config::PipelineSchedule::kAsync) {
        throw std::runtime_error("ravnest clusterize: --max-in-flight needs --schedule async");
      }
      connection.plan_dir = clusterize.out_dir;
      if (!no_memory_probe) {
        // The probes run where the daemons will train: this machine must have that device.
        try {
          runtime::compute_device(clusterize.device);
        } catch (const std::exception& e) {
          throw std::runtime_error("ravnest clusterize --device " + clusterize.device +
                                   ": the memory probes run on this machine: " + e.what() +
                                   " (--no-memory-probe plans with the formula alone)");
        }
        clusterize.memory_probe = app::process_memory_probe();
      }
      return run_clusterize(clusterize, push_after, connection);
    }
    if (push_cmd->parsed()) {
      connection.open().push(say);
      return 0;
    }
    if (train_cmd->parsed()) {
      if (job_path.empty() && !attach) {
        throw std::runtime_error("ravnest train: name the job file (or --attach to a running job)");
      }
      if (attach && (detach || resume)) {
        throw std::runtime_error("ravnest train: --attach follows a running job; it takes no "
                                 "--detach or --resume");
      }
      return run_train(connection, job_path, detach, resume, attach);
    }
    if (resume_cmd->parsed()) {
      if (resume_job.empty()) resume_job = runtime::last_job_path(connection.plan_dir);
      return run_train(connection, resume_job, detach, /*resume=*/true);
    }
    if (replace_cmd->parsed()) {
      return run_replace(connection, replace_old, replace_spare, replace_pool);
    }
    if (status_cmd->parsed()) return run_status(connection);
    if (losses_cmd->parsed()) {
      return run_losses(connection,
                        *losses_cluster_opt ? std::optional<int>(losses_cluster) : std::nullopt,
                        losses_plot);
    }
    if (stop_cmd->parsed()) {
      auto requester = connection.open();
      const auto not_stopped = requester.stop_all();
      if (!not_stopped.empty()) {
        std::cerr << "ravnest: error: not stopped on " << joined(not_stopped) << '\n';
        return 1;
      }
      say("stopped");
      return 0;
    }
    if (fuse_cmd->parsed()) {
      return run_fuse(connection, fuse_cluster, fuse_from, fuse_model, fuse_out,
                      fuse_allow_unfinished);
    }
    if (eval_cmd->parsed()) return run_evaluate(eval_model, eval_job, eval_on_train);
    if (dashboard_cmd->parsed()) {
      connection.warn_if_insecure();
      struct sigaction action {};
      action.sa_handler = on_interrupt;
      sigemptyset(&action.sa_mask);
      ::sigaction(SIGINT, &action, nullptr);
      ::sigaction(SIGTERM, &action, nullptr);
      runtime::DashboardOptions options;
      options.plan_dir = connection.plan_dir;
      options.secret = connection.secret();
      options.insecure = connection.insecure;
      options.listen = dashboard_listen;
      options.log = say;
      options.interrupted = [] { return g_interrupted != 0; };
      runtime::run_dashboard(options);
      return 0;
    }
    if (predict_cmd->parsed()) {
      return run_predict(connection, predict_target, predict_data, predict_job, predict_out,
                         predict_cluster,
                         *predict_batch_opt ? std::optional<int64_t>(predict_batch) : std::nullopt);
    }
    if (bench_allreduce->parsed()) {
      return run_bench_allreduce(bench_nodes, bench_size, bench_reps, !bench_no_gloo,
                                 bench_insecure, !bench_no_shared_memory);
    }
  } catch (const std::exception& e) {
    // One line: a LibTorch error without its backtrace, any other message folded.
    std::cerr << "ravnest: error: " << graph::torch_message(e) << '\n';
    return 1;
  }
  return 0;
}
