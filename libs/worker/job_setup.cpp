#include "libs/worker/job_setup.h"

#include "libs/torch_support/torch_compat.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <set>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <variant>

#include <torch/csrc/jit/serialization/import.h>

#include "libs/base/sha256.h"
#include "libs/data/batch_order.h"
#include "libs/data/dataset.h"
#include "libs/data/epoch_orders.h"
#include "libs/worker/ps/embedding_server.h"
#include "libs/worker/ps/ps_evaluator.h"
#include "libs/worker/ps/ps_server.h"
#include "libs/worker/pipeline/stage_predictor.h"
#include "libs/stage/stage_file.h"
#include "libs/planner/rings.h"
#include "libs/training/loss.h"
#include "libs/training/lr_schedule.h"
#include "libs/training/optimizer.h"

namespace ravnest::worker {

namespace fs = std::filesystem;

namespace {

// A server: the optimizer and LR schedule of its shard's parameters (a hybrid plan's: its
// tables' optimizer). The evaluator: the validation data and the loss.
JobSetup::RoleOptions make_ps_role_options(WorkerSetup& setup, const store::NodeStore& store,
                                           const config::JobSpec& job) {
  const auto& node = setup.node;
  setup.trained_path = store.trained_path().string();
  if (node.role == config::Role::kServer && node.parameter_server.hybrid()) {
    return EmbeddingServer::Options{job.sparse_optimizer};  // EmbeddingServer checks it is there
  }
  if (node.role == config::Role::kServer) {
    const config::PsServer* shard = nullptr;
    for (const auto& s : node.parameter_server.servers) {
      if (s.node == node.node_id) shard = &s;
    }
    if (!shard) throw std::runtime_error("this server holds no shard in the plan");
    std::map<std::string, at::Tensor> named;
    for (const auto& p : setup.stage->named_parameters()) named.emplace(p.name, p.value);
    std::vector<at::Tensor> parameters;
    for (const auto& name : shard->tensors) {
      auto it = named.find(name);
      if (it != named.end()) parameters.push_back(it->second);
    }
    setup.optimizer = training::make_optimizer(job.optimizer, parameters);
    setup.lr_schedule = std::make_unique<training::LrSchedule>(*setup.optimizer, job.scheduler);
    return ParameterServer::Options{job.ps};
  }
  if (job.data.validation.empty()) {
    throw std::runtime_error("data.validation: the evaluator needs the test data to score on");
  }
  PsEvaluator::Options evaluator;
  evaluator.validation_data =
      std::make_shared<data::Dataset>(data::load_dataset(job.data, data::Split::kValidation));
  evaluator.loss = std::make_shared<training::Loss>(job.loss);
  evaluator.batch_size = job.train.batch_size;
  evaluator.validation_path = store.validation_path().string();
  return evaluator;
}

// The pushed stage, verified when it is used: its bytes must hash to the metadata's
// stage_sha256, which the requester checked against its plan before the job. A stage.pt
// replaced or damaged since the push (metadata.json unchanged, a daemon restarted on another
// copy) is refused in one line instead of trained. Loaded from the bytes that were hashed.
std::shared_ptr<stage::Stage> load_pushed_stage(const store::NodeStore& store) {
  // Hashed in pieces, then loaded from the file a record at a time: a stage is never held whole
  // in memory beside its tensors (it was three times over: a growing string, then a stream's
  // copy), so loading costs what the stage holds and no more. The data directory is the
  // daemon's own (locked, data_dir_lock.h): nothing replaces the file between the two reads.
  const auto path = store.stage_path().string();
  std::string actual;
  try {
    actual = base::sha256_file_hex(path);
  } catch (const std::exception& e) {
    throw std::runtime_error(store.metadata().name + ": " + e.what());
  }
  const std::string& expected = store.metadata().stage_sha256;
  if (!base::same_sha256(actual, expected)) {
    throw std::runtime_error(store.metadata().name + ": " + path + " hashes to " +
                             actual.substr(0, 12) + ", not the pushed stage's " +
                             expected.substr(0, 12) +
                             ": the file changed since `ravnest push`; push again");
  }
  return stage::load_stage(path);
}

// What every training role copies from the job: the update's knobs, and the refusals of
// settings this node or this plan cannot train.
void apply_train_settings(WorkerSetup& setup, const store::NodeStore& store,
                          const config::JobSpec& job, c10::Device device) {
  const auto& node = setup.node;
  setup.update_frequency = job.train.update_frequency;
  setup.schedule = job.train.schedule;
  setup.max_in_flight = job.train.max_in_flight;
  setup.seed = static_cast<uint64_t>(job.train.seed);
  setup.save_every = static_cast<int>(job.train.save_every);
  setup.trained_path = store.trained_path().string();
  setup.cluster_count = node.cluster_count;
  setup.reduce = job.train.reduce;
  setup.reduce_factor = job.train.reduce_factor;
  setup.average_optim = job.train.average_optim;
  setup.outer = job.outer;
  setup.deterministic = job.train.deterministic;
  setup.compression = job.compression;
  setup.grad_clip_norm = job.train.grad_clip_norm;
  setup.grad_clip_norm_type = job.train.grad_clip_norm_type;
  setup.grad_clip_value = job.train.grad_clip_value;
  setup.autocast = job.train.autocast;
  setup.scaler = job.train.scaler;
  if (setup.autocast == config::Autocast::kFp16 && device.is_cpu() &&
      torch_support::kTorchMajor < 2) {
    // 1.13's CPU autocast knows bfloat16 only: it would warn and run float32.
    throw std::runtime_error("train.autocast: \"fp16\" on the CPU needs LibTorch 2.x (this node "
                             "runs " + std::string(torch_support::kTorchVersion) +
                             "); use \"bf16\" or a CUDA device");
  }
  setup.shared_rings = planner::shared_parameter_rings(node);
  if (setup.schedule == config::PipelineSchedule::kAsync && !node.shared_parameters.empty()) {
    // The holders would step on different versions of one tensor (docs/async.md).
    throw std::runtime_error("train.schedule: \"async\" cannot train " +
                             node.shared_parameters.begin()->first +
                             ", which several stages hold; use gpipe or 1f1b, or cut elsewhere");
  }
  if (!setup.shared_rings.empty() && node.cluster_count > 1) {
    // The plan's rings average one holder per cluster; the other holders would drift apart.
    throw std::runtime_error("this plan puts " + node.shared_parameters.begin()->first +
                             " on several nodes of a cluster, which training with several "
                             "clusters does not support yet; plan one cluster or cut elsewhere");
  }
}

// A prediction: every sample, in order, at the root; the leaf writes what the model returns.
StagePredictor::Options make_predictor_options(const store::NodeStore& store,
                                               const config::JobSpec& job,
                                               const config::NodeMetadata& node) {
  // Every sample, in order, whatever the cluster: the data is what `ravnest predict` was given.
  StagePredictor::Options predictor;
  predictor.predictions_path = store.predictions_path().string();
  if (node.position == 0) {
    predictor.data = std::make_shared<data::Dataset>(
        data::load_dataset(job.data, data::Split::kTrain, data::Labels::kOptional));
    predictor.batch_size = job.train.batch_size;
    predictor.micro_batches = job.train.micro_batches;
  }
  // The leaf predicts without a loss, but the job's loss loads there as it does for training,
  // so a job whose loss cannot load fails the same way in both.
  if (node.returns_model_output) {
    training::Loss check_loss(job.loss);
  }
  return predictor;
}

// A training stage: the root's data and validation, the leaf's loss and metrics.
StageWorker::Options make_stage_worker_options(const store::NodeStore& store,
                                               const config::JobSpec& job,
                                               const config::NodeMetadata& node) {
  StageWorker::Options options;
  // A parameter server's workers leave validation to the evaluator; hybrid trainers validate.
  const bool has_validation =
      !job.data.validation.empty() &&
      (node.role != config::Role::kWorker || node.parameter_server.hybrid());
  if (node.position == 0) {
    auto& root = options.root;
    root.train_data =
        std::make_shared<data::Dataset>(data::load_dataset(job.data, data::Split::kTrain));
    if (!job.data.order.empty()) {
      // The shipped file, checked again here: the dataset indices of each epoch, this
      // cluster's part of them (no shard: the order names the samples itself).
      root.epoch_orders = data::read_epoch_orders(job.data.order.resolved,
                                                  root.train_data->size(), job.train.epochs);
      if (node.cluster_count > 1) {
        root.epoch_orders =
            data::cluster_part(root.epoch_orders, node.cluster_count, node.cluster);
      }
    } else if (node.cluster_count > 1) {
      root.shard = data::shard_indices(root.train_data->size(), node.cluster_count, node.cluster,
                                       job.train.seed);
    }
    if (has_validation) {
      root.validation_data =
          std::make_shared<data::Dataset>(data::load_dataset(job.data, data::Split::kValidation));
    }
    root.epochs = static_cast<int>(job.train.epochs);
    root.batch_size = job.train.batch_size;
    root.micro_batches = job.train.micro_batches;
    root.shuffle = job.train.shuffle;
    root.drop_last = job.train.drop_last;
    root.max_batches = job.train.max_steps ? *job.train.max_steps : -1;
    root.val_freq = static_cast<int>(job.train.val_freq);
    root.loss = job.loss;
  }
  if (node.returns_model_output) {
    options.leaf.loss = std::make_shared<training::Loss>(job.loss);
    options.leaf.losses_path = store.losses_path().string();  // emptied by LeafMetrics
    options.leaf.has_validation = has_validation;
  }
  return options;
}

}  // namespace

std::unique_ptr<JobSetup> make_worker_setup(const store::NodeStore& store,
                                            const config::JobSpec& job_in, uint64_t job_id,
                                            c10::Device device) {
  const config::JobSpec& job = job_in;  // its paths are where this node finds them
  auto made = std::make_unique<JobSetup>();
  WorkerSetup& setup = made->common;
  setup.node = store.metadata();
  const auto& node = setup.node;
  // A prediction runs on what training made of the stage, when it made something.
  const bool trained = job.predict && std::filesystem::exists(store.trained_path());
  setup.stage = trained ? stage::load_stage(store.trained_path().string())
                        : load_pushed_stage(store);
  setup.job_id = job_id;
  if (job.predict && (node.role == config::Role::kServer ||
                      node.role == config::Role::kEvaluator || !node.parameter_server.servers.empty())) {
    throw std::runtime_error("[predict]: a parameter-server plan predicts in one process: "
                             "ravnest fuse, then ravnest predict the fused model.pt");
  }
  if (node.role == config::Role::kServer || node.role == config::Role::kEvaluator) {
    made->role = make_ps_role_options(setup, store, job);
    return made;
  }
  if (node.pipeline.empty()) throw std::runtime_error("the stored metadata names no pipeline");
  setup.root_node = node.pipeline.front();
  setup.leaf_node = node.pipeline.back();
  // Before the optimizer takes the parameters.
  setup.device = device;
  setup.stage->to(device);

  // A hybrid trainer's tables are the servers' to optimize.
  setup.optimizer =
      training::make_optimizer(job.optimizer, training::optimized_parameters(*setup.stage, node));
  setup.lr_schedule = std::make_unique<training::LrSchedule>(*setup.optimizer, job.scheduler);
  apply_train_settings(setup, store, job, device);
  if (job.predict) {
    made->role = make_predictor_options(store, job, node);
  } else {
    made->role = make_stage_worker_options(store, job, node);
  }
  return made;
}

std::shared_ptr<JobWorker> make_job_worker(JobSetup setup, WorkerPort& port) {
  return std::visit(
      [&](auto& options) -> std::shared_ptr<JobWorker> {
        using Options = std::decay_t<decltype(options)>;
        if constexpr (std::is_same_v<Options, StageWorker::Options>) {
          return std::make_shared<StageWorker>(std::move(setup.common), std::move(options), port);
        } else if constexpr (std::is_same_v<Options, StagePredictor::Options>) {
          return std::make_shared<StagePredictor>(std::move(setup.common), std::move(options),
                                                  port);
        } else if constexpr (std::is_same_v<Options, ParameterServer::Options>) {
          return std::make_shared<ParameterServer>(std::move(setup.common), std::move(options),
                                                   port);
        } else if constexpr (std::is_same_v<Options, EmbeddingServer::Options>) {
          return std::make_shared<EmbeddingServer>(std::move(setup.common), std::move(options),
                                                   port);
        } else {
          static_assert(std::is_same_v<Options, PsEvaluator::Options>);
          return std::make_shared<PsEvaluator>(std::move(setup.common), std::move(options), port);
        }
      },
      setup.role);
}

}  // namespace ravnest::worker
