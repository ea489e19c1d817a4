// WorkerSetup and WorkerStatus: what every job worker is given (made from the job by
// make_worker_setup, job_setup.h) and what it reports (read from any thread through
// JobWorker::status). Apart from stage_worker.h so that the worker's parts can read the setup
// without including the worker.
//
// WorkerSetup holds only what the roles share. Each role's own options are a struct its header
// owns (RootFeeder::Options, LeafMetrics::Options, StageWorker::Options,
// StagePredictor::Options, ParameterServer::Options, EmbeddingServer::Options,
// PsEvaluator::Options): the role headers include this one, not the other way round, and
// make_worker_setup hands a role its options beside the setup (JobSetup, job_setup.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/optim/optimizer.h>

#include "libs/config/job/job_spec.h"
#include "libs/stage/stage.h"
#include "libs/config/plan/node_metadata.h"
#include "libs/training/checkpoint.h"
#include "libs/training/lr_schedule.h"

namespace ravnest::store {
class CheckpointStore;
}

namespace ravnest::worker {

// What every worker needs, made from the job by the node (see job_setup.h).
struct WorkerSetup {
  config::NodeMetadata node;
  int root_node = 0;  // of this cluster
  int leaf_node = 0;
  // What this node trains (stage.h): shared with the worker's parts that hold it.
  std::shared_ptr<stage::Stage> stage;
  c10::Device device{c10::kCPU};  // where the stage computes (compute_device.h)
  // [train] deterministic: LibTorch's deterministic algorithms while the worker lives
  // (DeterministicAlgorithms, compute_device.h).
  bool deterministic = false;
  uint64_t job_id = 0;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<training::LrSchedule> lr_schedule;
  int update_frequency = 1;
  config::PipelineSchedule schedule = config::PipelineSchedule::kGPipe;
  int64_t max_in_flight = 0;  // async: 0 = the cluster's stages
  uint64_t seed = 0;
  int save_every = 0;
  std::string trained_path;  // where the trained stage is saved (atomically)
  // Checkpoints (docs/faults.md): every save_every updates and when the job is stopped, into
  // `checkpoints` under `identity`; none without a store (in-process tests). `resume`: the
  // checkpoint the job continues from.
  std::shared_ptr<store::CheckpointStore> checkpoints;
  std::string identity;
  std::optional<training::StageCheckpoint> resume;
  std::string data;  // StageCheckpoint::data of this job: what its checkpoints record
  // Tensors this node shares with others of its cluster: their gradients are summed over these
  // rings before every update (planner::shared_parameter_rings).
  std::vector<config::RingMembership> shared_rings;
  // Data parallelism across clusters (see docs/job-file.md).
  int cluster_count = 1;
  config::ReduceMode reduce = config::ReduceMode::kParameters;
  int64_t reduce_factor = 1;
  bool average_optim = false;
  // [outer]: DiLoCo's outer step every outer->every updates instead of parameter averaging
  // (pipeline/outer_step.h).
  std::optional<config::OuterSpec> outer;
  // How activations, gradients and ring segments travel (the job's [compression]).
  config::CompressionSpec compression;
  // [train] grad_clip_norm, grad_clip_norm_type, grad_clip_value and autocast
  // (pipeline/update_gradients.h; the forward's precision: torch_support/autocast_scope.h).
  std::optional<double> grad_clip_norm;
  double grad_clip_norm_type = 2.0;
  std::optional<double> grad_clip_value;
  config::Autocast autocast = config::Autocast::kOff;
  config::LossScalerSpec scaler;  // [train] scaler_*: fp16's loss scale
};

struct WorkerStatus {
  enum class State { kRunning, kFinished, kFailed } state = State::kRunning;
  uint32_t epoch = 0;
  uint64_t batches = 0;
  uint64_t total_batches = 0;  // root: known; others: 0
  uint64_t updates = 0;
  double last_loss = 0;
  double samples_per_second = 0;
  // Since start(): the seconds spent computing (forwards, backwards, handing what they send to
  // the RPC thread, optimizer updates) and the seconds until the last batch finished (or now). Their ratio
  // is the node's busy fraction: the slowest stage's bounds the pipeline (bench/pipeline.sh).
  double busy_seconds = 0;
  double running_seconds = 0;
  std::string error;
};

}  // namespace ravnest::worker
