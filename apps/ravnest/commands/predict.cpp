// ravnest predict TARGET DATA: the model's outputs for every sample of DATA, in order, through a
// plan's daemons (eval mode, no autograd) or in this process from a TorchScript model.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>


#include "apps/ravnest/commands/commands.h"
#include "apps/ravnest/commands/connection.h"
#include "apps/ravnest/commands/console.h"
#include "libs/base/atomic_file.h"
#include "libs/base/read_all.h"
#include "libs/config/job/prediction_job.h"
#include "libs/data/dataset.h"
#include "libs/requester/job_identity.h"
#include "libs/stage/stage_file.h"
#include "libs/training/predictions.h"

namespace ravnest::cli {
namespace {

// Through the daemons of `c`'s plan, one cluster; returns the exit code.
int predict_through_plan(const Connection& c, const std::string& text,
                         const std::string& job_path, const std::string& out, int cluster) {
  auto plan = requester::load_plan(c.plan_dir);
  for (const auto& node : plan.nodes) {
    // Its model is the servers', which no pipeline of daemons runs forward: it predicts here.
    if (node.role == config::Role::kServer) {
      throw std::runtime_error(
          c.plan_dir + " is a parameter-server plan: its daemons train, they do not predict. "
          "`ravnest fuse` writes the servers' model to trained/model.pt, then `ravnest predict "
          "trained/model.pt DATA` predicts in this process (docs/parameter-server.md)");
    }
  }
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
  requester::Requester requester(std::move(plan), c.secret(), c.insecure);
  requester::TrainOptions options;
  options.log = say;
  // Ctrl-C stops the prediction on every node, as for training.
  catch_interrupts();
  options.interrupted = interrupted;
  const auto result = requester.predict(text, job_path, options);
  say("predicted through cluster " + std::to_string(cluster) + " in " +
      std::to_string(result.seconds).substr(0, 4) + " s");
  // Streamed from the leaf into `out` (complete and checked, or not written).
  const uint64_t size = requester.fetch_predictions(leaf, out);
  say("wrote " + out + " (" + std::to_string(size) + " bytes; torch.load reads it)");
  return 0;
}

struct PredictCommand {
  Connection connection;
  std::string target, data_path, job_path, out = "predictions.pt";
  int cluster = 0;
  int64_t batch_size = 0;
  CLI::Option* batch_given = nullptr;

  int run();
};

int PredictCommand::run() {
  namespace fs = std::filesystem;
  Connection c = connection;
  const bool through_plan = fs::is_directory(target);
  if (through_plan) c.plan_dir = target;
  if (!through_plan && !fs::is_regular_file(target)) {
    throw std::runtime_error(target + ": neither a plan directory nor a model file");
  }
  if (!fs::is_regular_file(data_path)) throw std::runtime_error(data_path + ": no such file");
  if (out.empty()) throw std::runtime_error("--out: must name a file");
  // The job that trained the plan says how its data is read.
  const std::string job = job_path.empty() ? requester::last_job_path(c.plan_dir) : job_path;
  const std::string text = config::prediction_job_text(
      base::read_file(job), job, fs::absolute(data_path).string(),
      *batch_given ? std::optional<int64_t>(batch_size) : std::nullopt);
  if (through_plan) return predict_through_plan(c, text, job, out, cluster);
  const auto spec = config::parse_job(text, job);
  const auto dataset = data::load_dataset(spec.data, data::Split::kTrain, data::Labels::kOptional);
  const std::shared_ptr<stage::Stage> model = stage::load_stage(target);
  const std::string bytes = training::predictions_file(
      training::predict_in_process(*model, dataset, spec.train.batch_size));
  base::write_file_atomically(out, bytes);
  say("wrote " + out + " (" + std::to_string(bytes.size()) + " bytes; torch.load reads it)");
  return 0;
}

}  // namespace

Command add_predict(CLI::App& app) {
  auto c = std::make_shared<PredictCommand>();
  auto* cmd = app.add_subcommand(
      "predict", "The model's outputs for every sample of DATA, in order, through a plan's "
                 "daemons (eval mode, no autograd) or in one process (docs/predict.md)");
  cmd->add_option("target", c->target,
                  "a plan directory (its daemons) or a model file, TorchScript or .pt2 (here)")
      ->required();
  cmd->add_option("data", c->data_path, "the data, in the job's [data] format")->required();
  cmd->add_option("--job", c->job_path,
                  "the job whose [data] reads DATA (default: the plan's last job)");
  cmd->add_option("--out", c->out, "where to write the outputs (torch.save format)")
      ->capture_default_str();
  cmd->add_option("--cluster", c->cluster, "the cluster whose pipeline predicts")
      ->capture_default_str();
  c->batch_given =
      cmd->add_option("--batch-size", c->batch_size, "samples per batch (default: the job's)");
  add_connection_options(cmd, c->connection);
  return {cmd, [c] { return c->run(); }};
}

}  // namespace ravnest::cli
