// The reference trainer: the whole TorchScript model trained in one process exactly as a
// cluster trains it -- same batch order (BatchOrder), same micro-batches
// (split_micro_batches), same loss weighting (micro_batch_loss_weight), same optimizer and
// LR schedule, same update points. It is the exactness reference of distributed training tests
// and the baseline of benchmarks. Its updates run the steps of the workers' update plan
// (update_plan.h): a mode is the plan's, not a branch of the reference.
//
// Order of events, for batch k (counting from 1 over all epochs):
//   forward + backward of each micro-batch, in order, loss * micro_batch_loss_weight(...)
//   if k % update_frequency == 0 or k is the last batch of training:
//       optimizer step, zero_grad, schedule.on_update(), validation if val_freq > 0 and the
//       number of updates is a multiple of val_freq
//   if k ends an epoch: schedule.on_epoch_end(), validation if val_freq == 0
// and a final validation after the last batch unless one was just done. Validation runs the
// whole validation set in order, in eval mode without grad, in batches of batch_size, and then
// returns to training mode (it draws no random numbers, so it does not change training).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/jit/api/module.h>

#include "libs/config/job/job_spec.h"
#include "libs/training/evaluate.h"

namespace ravnest::training {

struct ValidationPoint {
  int64_t epoch = 0;     // 0-based epoch in which it ran
  int64_t batches = 0;   // batches trained before it
  int64_t updates = 0;   // optimizer updates before it
  Evaluation result;
};

struct ReferenceResult {
  // Final parameters and buffers by state-dict name (detached copies; tied weights appear
  // under each of their names).
  std::map<std::string, at::Tensor> state;
  std::vector<double> batch_losses;   // per batch: its mean loss (sum of weighted micro-batch
                                      // losses * update_frequency)
  std::vector<double> update_lrs;     // per optimizer update: the lr it used
  std::vector<ValidationPoint> validations;
  int64_t batches = 0;
  int64_t updates = 0;
  int64_t samples = 0;
  int64_t epochs_started = 0;
  double train_seconds = 0;           // forward, backward and optimizer time (no validation)
  double samples_per_second = 0;      // samples / train_seconds
};

// torch::manual_seed(job.train.seed), then loads the model (torch::jit::load), reads the data
// (load_dataset) and trains: batches over job.train.epochs epochs, stopping early after
// job.train.max_steps batches and after `max_batches` batches when >= 0. Throws
// std::runtime_error (or ConfigError) on unreadable files and on a forward/loss that fails.
ReferenceResult train_reference(const std::string& model_path, const config::JobSpec& job,
                                int64_t max_batches = -1);

// The same on a module already loaded (trained in place).
ReferenceResult train_reference(torch::jit::Module& module, const config::JobSpec& job,
                                int64_t max_batches = -1);

// The module's parameters and buffers by state-dict name, as detached copies.
std::map<std::string, at::Tensor> state_of(const torch::jit::Module& module);

// Data parallelism as the daemons run it, in one process: `clusters` copies of the model, copy c
// training on data shard c (data::shard_indices) with its own optimizer and its own RNG stream
// (each seeded with train.seed, as every node is), averaging gradients before each update
// (reduce = "gradients") or parameters, BatchNorm buffers and, with average_optim, optimizer state
// every reduce_factor updates (reduce = "parameters"); parameters and buffers once more at the
// end. Each average adds as the daemons do, to the bit: a ring of N members sums each chunk of
// its flattened tensors (the model's state order) from that chunk's member on, parameter servers
// ([ps]) the workers in order (floating addition is not associative: from three clusters on,
// another order differs in the last bit, which long runs grow). With job.outer (DiLoCo,
// outer_optimizer.h), instead of parameter averaging: every
// outer->every updates and after the last, each copy's theta_global - theta_local averaged over
// the copies (buffers averaged too) and one outer step, the same on every copy. Returns copy 0's
// state, which then equals every copy's.
//
// With `tables` (a hybrid plan's embedding tables: docs/parameter-server.md#hybrid), those
// weights step apart, as the servers step them: with job.sparse_optimizer, once per update, on
// the rows that any copy's micro-batches of the update looked up (the sorted unique values of
// the table's index input), with the copies' average gradient of those rows.
struct ReferenceTable {
  std::string weight;   // state-dict name, e.g. "emb.weight"
  int index_input = 0;  // the model input holding its indices
};
//
// `rings`: the state-dict names each cross-cluster ring averages, in its order (plan.json's
// rings: a plan whose clusters have several stages has a ring per stage); empty: one ring of the
// model's whole state in its order, as one-node clusters have. A ring's chunks follow from its
// own tensors, so the layout decides the order of every element's sum.
//
// `dropped` (reduce = "parameters", reduce_factor 1: docs/faults.md#providers-that-come-and-go):
// cluster -> the parameter-averaging rounds it took part in before it was dropped (rounds count
// from 0, one after each update), one number a ring in `rings`' order, or one number for every
// ring. A plan whose clusters have several stages drops a cluster at each stage's ring's own
// round: a stage whose node was still alive completes one more round with it than the stage
// that failed (the daemons log each ring's round: "runs from round R (ring K)"). The cluster
// trains until the last of those rounds, takes part in ring k's rounds before its number, and
// from then on neither trains nor averages; the others average among themselves.
//
// `joins` (docs/faults.md#providers-that-join): after update `after_update`, one more cluster
// (the next id) with a copy of cluster `source`'s weights, buffers, optimizer state, LR step,
// random state and outer state; from then on every cluster reads shard c of the new count at the
// place the batches done have in that dealing (epoch B / per epoch, batch B % per epoch), and
// the job ends where that many clusters' job ends, as the daemons resume a grown plan. A cluster
// dropped by then counts in the new dealing (its shard unread; a later rejoin reads it), as the
// grown plan keeps its nodes. Not with `tables` (std::invalid_argument).
// With `rejoins` >= 0 (docs/faults.md#a-dropped-cluster-rejoins), the dropped cluster `rejoins`
// comes back after update `after_update` instead, with the same copy of `source`'s state, reading
// its own shard (the dealing unchanged) from the batches done on: the batches of its shard
// between its drop and the rejoin are never trained. It must have been dropped by then.
//
// The result is the state of the first cluster training at the end (every one's, averaged after
// the last update); at least one must be.
struct ReferenceJoin {
  int64_t after_update = 0;
  int source = 0;
  int rejoins = -1;
};
ReferenceResult train_reference_clusters(const std::string& model_path, const config::JobSpec& job,
                                         int clusters, int64_t max_batches = -1,
                                         const std::vector<ReferenceTable>& tables = {},
                                         const std::map<int, std::vector<int64_t>>& dropped = {},
                                         const std::vector<ReferenceJoin>& joins = {},
                                         const std::vector<std::vector<std::string>>& rings = {});

}  // namespace ravnest::training
