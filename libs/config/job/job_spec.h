// JobSpec: the training recipe of `ravnest train JOB.toml` -- what to train on, with which loss,
// optimizer and learning-rate schedule, in what batches. Pure C++ (no LibTorch): the data,
// loss and optimizer code (libs/data, libs/training) builds on it. Every field, its default and
// its checks are documented in docs/job-file.md.
//
// Errors are ConfigError with one line naming the file and the field, e.g.
//   job.toml: optimizer.name: unknown optimizer 'adamw2' (sgd, adam, adamw, rmsprop, adagrad, lamb)
// Unknown keys and tables are errors too (a typo must not silently fall back to a default).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "libs/config/job/compression_spec.h"
#include "libs/config/job/outer_spec.h"
#include "libs/config/job/ps_spec.h"
#include "libs/config/job/sparse_optimizer_spec.h"

namespace ravnest::config {

// A path as written in the job and resolved against the job file's directory (absolute,
// lexically normalised). `raw` is empty when the field is absent.
struct JobPath {
  std::string raw;
  std::string resolved;
  bool empty() const { return raw.empty(); }
};

// gpipe and 1f1b are synchronous (exactly one process's training); async is Ravnest's (no flush,
// weight stashing, bounded staleness: docs/async.md).
enum class PipelineSchedule { kGPipe, k1F1B, kAsync };

// What clusters average (data parallelism): Ravnest's parameter averaging every reduce_factor
// updates, or gradients before every update as DistributedDataParallel does.
enum class ReduceMode { kParameters, kGradients };

// The largest batch_size a job file may give (2^31 - 1): far beyond any batch a machine holds,
// and small enough that nothing computed from it (offsets, times update_frequency) overflows.
constexpr int64_t kMaxBatchSize = 2147483647;

// [train] autocast: the stages' forward (and the leaf's loss) under torch.autocast with this
// dtype; fp16 also scales the loss as torch.cuda.amp.GradScaler does (docs/job-file.md).
enum class Autocast { kOff, kBf16, kFp16 };

// [train] scaler_*: the dynamic loss scale of autocast = "fp16", torch.amp.GradScaler's
// arguments under their names (init_scale, growth_factor, backoff_factor, growth_interval).
struct LossScalerSpec {
  double init_scale = 65536.0;  // > 0, at most float32's largest (PyTorch keeps it as a float)
  double growth_factor = 2.0;   // > 1
  double backoff_factor = 0.5;  // in (0, 1)
  int64_t growth_interval = 2000;  // >= 1
};

struct TrainSpec {
  int64_t epochs = 1;
  int64_t batch_size = 64;          // 1 <= batch_size <= kMaxBatchSize
  int micro_batches = 1;            // per batch, 1 <= micro_batches <= batch_size
  int update_frequency = 1;         // batches per optimizer step (gradient accumulation)
  int64_t seed = 0;                 // >= 0
  bool shuffle = true;
  std::optional<int64_t> max_steps; // stop after this many batches (over all epochs)
  int64_t val_freq = 0;             // validate every N optimizer updates; 0 = at each epoch end
  PipelineSchedule schedule = PipelineSchedule::kGPipe;
  // async: micro-batches in flight at most (injected by the root, not yet back); 0 = as many as
  // the cluster has stages. Only with schedule = "async".
  int64_t max_in_flight = 0;
  // Optimizer updates between checkpoints (0: none but the stop's). 100 by default: a stop never
  // loses an update (it checkpoints where every node agreed to stop), so this bounds only what a
  // crash costs, at a write every 100 updates (docs/job-file.md).
  int64_t save_every = 100;
  bool drop_last = false;
  ReduceMode reduce = ReduceMode::kParameters;
  int64_t reduce_factor = 1;        // parameters: average every N optimizer updates (and at the end)
  bool average_optim = false;       // parameters: average optimizer state (moments) too
  // LibTorch's deterministic algorithms (and cuDNN's) on every node for the job, as
  // torch.use_deterministic_algorithms(True); false, PyTorch's default, lets GPUs pick faster
  // nondeterministic kernels (atomics in some backward passes).
  bool deterministic = false;
  // Gradient clipping over the whole model, as torch.nn.utils.clip_grad_norm_ (by norm, of type
  // grad_clip_norm_type: > 0, infinity for the largest |g|) and clip_grad_value_ (by value,
  // applied first); synchronous schedules only (docs/exactness.md#gradient-clipping).
  std::optional<double> grad_clip_norm;  // > 0
  double grad_clip_norm_type = 2.0;
  std::optional<double> grad_clip_value;  // > 0
  Autocast autocast = Autocast::kOff;
  LossScalerSpec scaler;  // only set with autocast = "fp16"
};

enum class DataFormat { kCsv, kMnist, kCifar10, kTensors };

struct DataSpec {
  DataFormat format = DataFormat::kCsv;
  JobPath train;
  JobPath validation;               // empty: no validation
  JobPath order;                    // each epoch's sample order (data/epoch_orders.h); empty:
                                    // [train] shuffle and seed draw it
  // csv only
  std::string label_column;         // by name (needs header); empty: label_index is used
  int64_t label_index = -1;         // 0-based column index, negative counts from the end
  bool header = true;
  std::vector<int64_t> input_shape; // per sample; empty: [number of feature columns]
  double scale = 1.0;               // features are multiplied by it
  // any format
  std::optional<int64_t> num_classes;  // labels must be integers in [0, num_classes)
};

enum class LossName { kCrossEntropy, kNll, kMse, kL1, kBceWithLogits, kScript };

struct LossSpec {
  LossName name = LossName::kCrossEntropy;
  JobPath path;                     // kScript: the TorchScript loss module
  std::string reduction = "mean";   // only "mean" (the micro-batch weighting assumes it)
  // cross_entropy, nll: labels equal to this count for nothing (PyTorch's default -100: padding).
  int64_t ignore_index = -100;
  // cross_entropy, nll: where the classes are in an output of 3 or more dimensions. 0: the rule
  // of docs/job-file.md [loss] (the last when the labels are the output's shape without its last
  // dimension, else dimension 1); 1: PyTorch's [N, C, d1...]; -1: the last, [N, d1..., C].
  int class_dim = 0;
};

enum class OptimizerName { kSgd, kAdam, kAdamW, kRmsprop, kAdagrad, kLamb };

// Every field holds the value in effect: PyTorch's default for the chosen optimizer unless the
// job sets it. Fields that do not belong to the chosen optimizer keep these values, unused.
struct OptimizerSpec {
  OptimizerName name = OptimizerName::kSgd;
  double lr = 0;
  double weight_decay = 0;
  double momentum = 0;                    // sgd, rmsprop
  double dampening = 0;                   // sgd
  bool nesterov = false;                  // sgd
  std::pair<double, double> betas{0.9, 0.999};  // adam, adamw, lamb
  double eps = 1e-8;                      // adam, adamw, rmsprop (1e-8); adagrad (1e-10); lamb (1e-6)
  bool amsgrad = false;                   // adam, adamw
  double alpha = 0.99;                    // rmsprop
  bool centered = false;                  // rmsprop
  double lr_decay = 0;                    // adagrad
  double initial_accumulator_value = 0;   // adagrad
  double clamp_value = 10;                // lamb: the weight norm's upper clamp
  bool adam = false;                      // lamb: trust ratio 1 (Adam with L2 in the step)
  bool debias = false;                    // lamb: Adam's bias correction in the step size
};

enum class SchedulerName {
  kStep, kMultiStep, kExponential, kCosine, kLinearWarmup, kWarmupCosine, kWarmupLinear, kOneCycle
};
enum class AnnealStrategy { kCos, kLinear };
enum class SchedulerPer { kUpdate, kEpoch };

struct SchedulerSpec {
  SchedulerName name = SchedulerName::kStep;
  SchedulerPer per = SchedulerPer::kEpoch;  // Ravnest's lr_step_on_epoch_change=True
  int64_t step_size = 0;                    // step
  double gamma = 0.1;                       // step, multistep, exponential
  std::vector<int64_t> milestones;          // multistep, sorted
  int64_t t_max = 0;                        // cosine, warmup_cosine (counted after the warm-up)
  double eta_min = 0;                       // cosine, warmup_cosine
  int64_t warmup_steps = 0;                 // linear_warmup, warmup_cosine (>= 1); warmup_linear (>= 0)
  double start_factor = 1.0 / 3.0;          // linear_warmup, warmup_cosine
  // onecycle: torch.optim.lr_scheduler.OneCycleLR's arguments and defaults. The optimizer's own
  // lr is not used (the cycle starts at max_lr / div_factor), as in PyTorch.
  double max_lr = 0;
  int64_t total_steps = 0;                  // also warmup_linear's (transformers' num_training_steps)
  double pct_start = 0.3;
  AnnealStrategy anneal_strategy = AnnealStrategy::kCos;
  double div_factor = 25;
  double final_div_factor = 1e4;
  bool three_phase = false;
  bool cycle_momentum = true;               // sgd/rmsprop momentum, adam/adamw beta1
  double base_momentum = 0.85;
  double max_momentum = 0.95;
};

struct JobSpec {
  std::string origin;        // the file it was read from (as given)
  std::string base_dir;      // absolute directory relative paths are resolved against
  TrainSpec train;
  DataSpec data;
  LossSpec loss;
  OptimizerSpec optimizer;
  std::optional<SchedulerSpec> scheduler;
  CompressionSpec compression;  // [compression]; all "none" when absent
  std::optional<OuterSpec> outer;  // [outer]: DiLoCo's outer optimizer (outer_spec.h)
  PsSpec ps;                    // [ps]; parameter-server plans only
  std::optional<SparseOptimizerSpec> sparse_optimizer;  // [sparse_optimizer]; hybrid plans only
  // [predict] (no keys): not training but the model's outputs for every sample of data.train,
  // in order, through the pipeline (`ravnest predict` writes such a job; docs/predict.md).
  bool predict = false;
};

// The largest job file: its text travels to every node in one loadJob message, which a daemon
// reads only up to limits.message_bytes (at least 256 KiB, docs/security.md#limits); a larger
// one would be cut off as a connection reset after the data shipped. Refused before anything
// travels, naming the file and this limit.
inline constexpr size_t kMaxJobFileBytes = size_t{128} << 10;

// Parses a job from TOML text; `origin` names it in errors and its directory (made absolute)
// is the base of relative paths. Text over kMaxJobFileBytes is refused.
JobSpec parse_job(const std::string& toml_text, const std::string& origin);

// Reads and parses a job file (reading no more than the limit allows).
JobSpec load_job(const std::string& path);

// Names as written in a job file ("sgd", "cross_entropy", "linear_warmup", "1f1b", ...).
const char* to_string(PipelineSchedule value);
// "gpipe", "1f1b", "async"; false (and `out` unchanged) for any other name.
bool parse_pipeline_schedule(const std::string& name, PipelineSchedule& out);
const char* to_string(ReduceMode value);
const char* to_string(DataFormat value);
const char* to_string(LossName value);
const char* to_string(OptimizerName value);
const char* to_string(SchedulerName value);
const char* to_string(SchedulerPer value);
const char* to_string(AnnealStrategy value);

}  // namespace ravnest::config
