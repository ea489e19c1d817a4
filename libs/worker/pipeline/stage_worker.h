// StageWorker: one node's part of a training job. It owns the stage module, its optimizer and LR
// schedule, and reacts to transfers: forward when a micro-batch's inputs (and, at the leaf, its
// labels) are all there, backward when the gradients of every consumer are there, an optimizer
// update after the last backward of an update (see schedule.h), with the random stream passed
// along the chain of nodes that draw (NodeMetadata::random_nodes) and the reduces over shared
// and cross-cluster rings before or after it. The update is the job's update plan
// (training/update_plan.h), made once at construction from the node's setup and logged at
// start(): batch_finished runs its steps in order, each a small member function (run_step), so a
// mode (parameter servers, hybrid, rings, DiLoCo, fp16, checkpoints) is a plan, not a branch.
//
// Its role-specific parts, each made only when the node's role needs it: the root's RootFeeder
// (root_feeder.h) reads the data and lets micro-batches in; the leaf's LeafMetrics
// (leaf_metrics.h) keeps losses, losses.txt and the step and validation events; a
// parameter-server worker's ServerExchange (ps/ps_exchange.h) makes its updates on the servers;
// a hybrid trainer's EmbeddingRows (ps/embedding_rows.h) looks its tables' rows up for each
// forward and pushes their gradients at each update. Every node's parts: its RandomChain
// (random_chain.h) when its stage draws in the chain, its StageRings (stage_rings.h), its
// WeightStash (weight_stash.h) under async. Its lifecycle (failing, finishing, status)
// is WorkerBase's (worker_base.h); a finished stage goes on forwarding the final validation. Everything reaches the outside through the WorkerPort
// (worker_port.h): NodeService in a daemon, LocalPort (tests/support/local_port.h) in one process.
// Transfers cross between the compute device and the host through its DeviceTransfers
// (device_transfers.h): on a GPU, outgoing ones wait for their copies to the host while later
// micro-batches compute; they are handed to the port in order before each step when done, and
// all of them when nothing else is ready or before anything that blocks (rings, servers, the end).
//
// Not thread-safe: every call but status() happens on the node's compute thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <torch/csrc/jit/api/module.h>

#include "libs/worker/compute_device.h"
#include "libs/worker/device_transfers.h"
#include "libs/worker/worker_base.h"
#include "libs/worker/pipeline/input_slots.h"
#include "libs/worker/pipeline/outer_step.h"
#include "libs/worker/pipeline/leaf_metrics.h"
#include "libs/worker/pipeline/random_chain.h"
#include "libs/worker/pipeline/ring_work.h"
#include "libs/worker/pipeline/stage_rings.h"
#include "libs/worker/pipeline/update_gradients.h"
#include "libs/worker/pipeline/root_feeder.h"
#include "libs/worker/transfer.h"
#include "libs/worker/pipeline/weight_stash.h"
#include "libs/worker/worker_setup.h"
#include "libs/torch_support/autocast_scope.h"
#include "libs/training/checkpoint.h"
#include "libs/training/update_plan.h"

namespace ravnest::worker {

class EmbeddingRows;
class ServerExchange;

class StageWorker final : public WorkerBase, private FeedTarget {
 public:
  // The pipeline roles' options, made by make_worker_setup: the root's and the leaf's are used
  // only by a node of that role (a one-node cluster's both).
  struct Options {
    RootFeeder::Options root;
    LeafMetrics::Options leaf;
    // Tests: record the weights each backward ran on (backward_records).
    bool record_versions = false;
  };

  StageWorker(WorkerSetup setup, Options options, WorkerPort& port);
  ~StageWorker() override;

  void start() override;  // the root begins injecting; others wait for transfers
  void receive(TransferMessage message) override;
  // The job is being stopped: writes the checkpoint of the last update boundary unless it is
  // written already (or the node stopped inside an update, or has no checkpoint store).
  void checkpoint_on_stop() override;
  // The root: RootFeeder::hold, and feeding goes on if the boundary moved past where it held.
  std::optional<uint64_t> hold(uint64_t target) override;

  const stage::Stage& stage() const { return *setup_.stage; }

  // With Options::record_versions (tests), one per training backward of a stage whose
  // forward and backward are apart (not the leaf): the weights it ran on.
  struct BackwardRecord {
    uint64_t step = 0;
    uint32_t index = 0;
    uint64_t forward_version = 0;   // the version its forward ran on
    uint64_t current_version = 0;   // the version when its backward ran
    double forward_checksum = 0;    // the parameters' sum at the forward
    double backward_checksum = 0;   // and at the backward (recomputed on the stashed version)
  };
  const std::vector<BackwardRecord>& backward_records() const { return backward_records_; }
  size_t most_versions_kept() const { return most_versions_kept_; }

 private:
  struct Key {
    bool validate;
    uint64_t step;
    uint32_t index;
    bool operator<(const Key& o) const {
      return std::tie(validate, step, index) < std::tie(o.validate, o.step, o.index);
    }
  };
  struct Micro {
    MicroBatchTag batch;
    std::vector<c10::IValue> inputs;
    std::vector<bool> have_input;
    std::optional<at::Tensor> labels;
    bool forwarded = false;
    c10::IValue output;                   // leaf: the model's output
    std::vector<c10::IValue> outputs;     // non-leaf: the output tuple
    std::vector<at::Tensor> output_grads; // summed over consumers
    size_t grads_received = 0;
    // Async: the weights' version its forward ran on, the generator's state before that forward
    // (a stage that draws), and for records the weights' checksum then.
    uint64_t version = 0;
    std::optional<at::Tensor> random_state;
    double checksum = 0;
  };

  bool is_root() const { return setup_.node.position == 0; }
  bool is_leaf() const { return setup_.node.returns_model_output; }
  Micro& micro(const MicroBatchTag& batch);
  // WorkerBase: a failure drops what is in flight; a device out of memory says where.
  void on_failure() override;
  std::string failure_message(const std::exception& e) const override;
  void progress();
  bool ready_for_forward(const Micro& m) const;
  at::Tensor sendable(const at::Tensor& output) const;
  void forward(Micro& m);
  void backward(Micro& m);
  void backward_outputs(Micro& m);
  bool asynchronous() const { return setup_.schedule == config::PipelineSchedule::kAsync; }
  // Whether each training micro-batch's gradients of shared tensors are kept apart until the
  // update (StageRings::keep_shared_shares): synchronous pipelines whose stage shares a tensor
  // with another stage of its cluster.
  bool keeps_shared_shares() const { return !setup_.shared_rings.empty() && !servers_ && !asynchronous(); }
  // Async: the forward of `m` again, on `module` (the weights it first ran on), for its backward.
  void recompute_forward(Micro& m, stage::Stage& module);
  // Changes the parameters in place (`change`): under async, a new version of the weights.
  void update_weights(const std::function<void()>& change);
  void batch_finished(const MicroBatchTag& batch);
  // One run of a phase of plan_: the batch it follows, and whether this update's step is taken
  // (kUnscaleAndClip may skip it).
  struct UpdateRun {
    const MicroBatchTag& batch;
    bool step = true;
  };
  void run_steps(const std::vector<training::UpdateStep>& steps, UpdateRun& run);
  void run_step(const training::UpdateStep& step, UpdateRun& run);
  void optimizer_step(const UpdateRun& run);
  void outer_step(const UpdateRun& run);
  void schedule_next_batch(const MicroBatchTag& batch, bool updated);
  void advance(Key& cursor, const MicroBatchTag& batch);
  void send_gradients(const Micro& m);
  TransferMessage message_to(TransferKind kind, int to, const MicroBatchTag& batch) const;

  // FeedTarget: the root's feeder lets micro-batches in here.
  bool feeding_stopped() const override { return failed(); }
  void enter(const MicroBatchTag& tag, const std::vector<at::Tensor>& inputs,
             const at::Tensor& labels) override;
  void run_ready() override { progress(); }
  void begin_batch();
  void leaf_loss(Micro& m, const c10::IValue& result);
  // [train] autocast: what the forward (and the leaf's loss) runs under; backwards run outside,
  // as PyTorch's recipe has them.
  torch_support::AutocastScope autocast() const;

  // Keeps the last update boundary as its checkpoint holds it (boundary_), but for what does not
  // change until the next update begins, which clears boundary_valid_: the parameters and the
  // optimizer, taken when the checkpoint is written; and the losses, which only grow: their
  // length then.
  void mark_boundary();
  void resume_from(const training::StageCheckpoint& checkpoint);
  void write_checkpoint();
  void save_stage();
  void reduce_across_clusters(RingTensors what);  // StageRings', changing weights as updates do
  void finish();

  Options options_;
  DeterministicAlgorithms deterministic_;  // [train] deterministic, for the worker's lifetime
  DeviceTransfers transfers_;
  // What the compute thread is doing, for an out-of-memory error: "forward of micro-batch 3
  // of batch 12".
  std::string doing_;
  std::map<Key, Micro> micro_;
  Key next_forward_train_{false, 0, 0};
  Key next_forward_validate_{true, 0, 0};
  Key next_backward_{false, 0, 0};
  std::set<const void*> state_storages_;       // memory of the stage's parameters and buffers
  uint32_t current_epoch_ = 0;
  uint64_t batches_done_ = 0;
  uint64_t updates_done_ = 0;
  training::StageCheckpoint boundary_;  // buffers only in its state
  bool boundary_valid_ = false;
  size_t boundary_losses_ = 0;
  size_t boundary_validation_ = 0;  // validation.txt's length at the boundary
  uint64_t saved_updates_ = 0;  // the newest checkpoint written (or resumed from)
  // The busy fraction's parts (WorkerStatus::busy_seconds): base::now_seconds() at start(),
  // and the seconds spent in what `timed` wraps since.
  double started_at_ = 0;
  double busy_seconds_ = 0;
  template <typename F>
  void timed(F&& work);
  bool held_ = false;  // the root's begin_batch() met its feeder's hold

  training::UpdatePlan plan_;  // the job's update, made once (the mode)
  bool training_done_ = false;  // the last batch finished (the final validation may follow)
  InputSlots input_slots_;
  RandomChain random_;
  StageRings rings_;
  std::unique_ptr<OuterStep> outer_;  // [outer] only
  WeightStash stash_;
  UpdateGradients gradients_;  // [train] grad_clip_* and fp16's loss scale
  std::vector<BackwardRecord> backward_records_;
  size_t most_versions_kept_ = 0;
  std::unique_ptr<RootFeeder> feeder_;    // root only
  std::unique_ptr<LeafMetrics> metrics_;  // leaf only
  std::unique_ptr<ServerExchange> servers_;  // a parameter-server worker only
  std::unique_ptr<EmbeddingRows> rows_;      // a hybrid trainer only
};

}  // namespace ravnest::worker
