// StageWorker: one node's part of a training job. It owns the stage module, its optimizer and LR
// schedule, and reacts to transfers: forward when a micro-batch's inputs (and, at the leaf, its
// labels) are all there, backward when the gradients of every consumer are there, an optimizer
// update after the last backward of an update (see schedule.h). The root also reads the data and
// drives the pipeline; the leaf computes the loss, writes losses.txt and reports progress.
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
#include <torch/optim/optimizer.h>

#include "libs/config/node_metadata.h"
#include "libs/daemon/transfer.h"
#include "libs/data/batch_order.h"
#include "libs/training/lr_schedule.h"
#include "libs/training/schedule.h"

namespace ravnest::data {
class Dataset;
}

namespace ravnest::runtime {

class Loss;

// Everything a worker needs, made from the job by the node (see job_setup.h).
struct WorkerSetup {
  config::NodeMetadata node;
  int root_node = 0;  // of this cluster
  int leaf_node = 0;
  torch::jit::Module stage;
  uint64_t job_id = 0;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<LrSchedule> lr_schedule;
  int update_frequency = 1;
  config::PipelineSchedule schedule = config::PipelineSchedule::kGPipe;
  uint64_t seed = 0;
  int save_every = 0;
  std::string trained_path;  // where the trained stage is saved (atomically)
  // Tensors this node shares with others of its cluster: their gradients are summed over these
  // rings before every update (planner::shared_parameter_rings).
  std::vector<config::RingMembership> shared_rings;
  // Data parallelism across clusters (see docs/job-file.md).
  int cluster_count = 1;
  config::ReduceMode reduce = config::ReduceMode::kParameters;
  int64_t reduce_factor = 1;
  bool average_optim = false;
  // Root only:
  std::shared_ptr<data::Dataset> train_data;
  std::vector<int64_t> shard;  // this cluster's samples; empty: all
  std::shared_ptr<data::Dataset> validation_data;
  int epochs = 1;
  int64_t batch_size = 1;
  int micro_batches = 1;
  bool shuffle = true;
  bool drop_last = false;
  int64_t max_batches = -1;
  int val_freq = 0;
  // Leaf only:
  std::shared_ptr<Loss> loss;
  std::string losses_path;  // losses.txt: one loss per batch
  bool has_validation = false;
};

struct WorkerStatus {
  enum class State { kRunning, kFinished, kFailed } state = State::kRunning;
  uint32_t epoch = 0;
  uint64_t batches = 0;
  uint64_t total_batches = 0;  // root: known; others: 0
  uint64_t updates = 0;
  double last_loss = 0;
  double samples_per_second = 0;
  std::string error;
};

class StageWorker {
 public:
  StageWorker(WorkerSetup setup, WorkerPort& port);
  ~StageWorker();

  void start();  // the root begins injecting; others wait for transfers
  void receive(TransferMessage message);
  void fail(const std::string& why);  // a peer or the node itself failed

  WorkerStatus status() const;  // any thread
  const torch::jit::Module& stage() const { return setup_.stage; }

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
  };

  bool is_root() const { return setup_.node.position == 0; }
  int64_t train_size() const;
  bool is_leaf() const { return setup_.node.returns_model_output; }
  Micro& micro(const MicroBatchTag& batch);
  void guarded(const std::function<void()>& body);
  void progress();
  bool ready_for_forward(const Micro& m) const;
  bool in_random_chain() const;
  at::Tensor sendable(const at::Tensor& output) const;
  void pass_random_state(const MicroBatchTag& batch);
  void forward(Micro& m);
  void backward(Micro& m);
  void batch_finished(const MicroBatchTag& batch);
  void advance(Key& cursor, const MicroBatchTag& batch);
  void send_gradients(const Micro& m);
  TransferMessage message_to(TransferKind kind, int to, const MicroBatchTag& batch) const;

  // Root.
  void begin_batch();
  void pump();
  void inject(uint32_t index);
  void inject_micro(MicroBatchTag tag, const std::vector<at::Tensor>& inputs,
                    const at::Tensor& labels, int64_t begin, int64_t end);
  void run_validation_round();

  // Leaf.
  void record_validation(const Micro& m);

  void save_stage();
  enum class ReduceWhat { kGradients, kState, kFinal };
  void sum_shared_gradients();
  void reduce_across_clusters(ReduceWhat what);
  void finish();
  void set_status(const std::function<void(WorkerStatus&)>& change);

  WorkerSetup setup_;
  WorkerPort& port_;
  std::map<Key, Micro> micro_;
  Key next_forward_train_{false, 0, 0};
  Key next_forward_validate_{true, 0, 0};
  Key next_backward_{false, 0, 0};
  std::map<std::pair<int, uint32_t>, size_t> input_slot_;  // (node, output) -> input index
  std::map<Key, at::Tensor> random_state_in_;  // training micro-batch -> generator state to use
  std::set<const void*> state_storages_;       // memory of the stage's parameters and buffers
  uint32_t current_epoch_ = 0;
  uint64_t batches_done_ = 0;
  uint64_t updates_done_ = 0;
  uint64_t reduce_round_ = 0;
  uint64_t shared_round_ = 0;
  bool stopped_ = false;   // failed: nothing more happens
  bool finished_ = false;  // training done

  // Root state.
  RootSchedule root_schedule_{config::PipelineSchedule::kGPipe, 1};
  std::optional<data::BatchOrder> train_order_;  // made once at start
  std::vector<std::vector<int64_t>> epoch_batches_;
  size_t batch_in_epoch_ = 0;
  uint64_t next_step_ = 0;
  uint64_t next_validation_step_ = 0;
  uint64_t total_batches_ = 0;
  std::vector<std::pair<int64_t, int64_t>> micro_ranges_;
  std::vector<int64_t> batch_indices_;
  std::vector<at::Tensor> batch_inputs_;
  at::Tensor batch_labels_;
  uint32_t injected_ = 0;
  uint32_t completed_ = 0;
  MicroBatchTag current_batch_;
  double started_at_ = 0;
  uint64_t samples_done_ = 0;

  // Leaf state.
  double batch_loss_ = 0;
  double validation_loss_sum_ = 0;
  int64_t validation_correct_ = 0;
  int64_t validation_samples_ = 0;
  bool validation_has_classes_ = true;
  bool training_done_ = false;

  mutable std::mutex status_mutex_;
  WorkerStatus status_;
};

}  // namespace ravnest::runtime
