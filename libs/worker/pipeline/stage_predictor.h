// StagePredictor: one node's part of a prediction job (`ravnest predict`, docs/predict.md). The
// stage runs in eval mode without autograd, on its trained weights when the node has them (else
// the pushed ones). The root reads the data in order (no shuffle, no shard, no sample dropped),
// cuts each batch into micro-batches and keeps at most `window` of them in the pipeline; each
// stage runs its forward once a micro-batch's inputs are all there and sends the outputs on; the
// leaf keeps the model's outputs, tells the root that the micro-batch is done (kPredicted: another
// may enter) and, once every micro-batch is in, writes them joined in order to predictions.pt
// (torch.save's format, atomically). Every node finishes after the last micro-batch it sees.
//
// Not thread-safe: every call but status() happens on the node's compute thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "libs/worker/pipeline/input_slots.h"
#include "libs/worker/worker_base.h"
#include "libs/worker/worker_port.h"

namespace ravnest::data {
class Dataset;
}

namespace ravnest::worker {

class StagePredictor final : public WorkerBase {
 public:
  // A prediction job's options (the job's [predict]), made by make_worker_setup: the root
  // reads `data`, the leaf writes `predictions_path`.
  struct Options {
    std::shared_ptr<data::Dataset> data;
    int64_t batch_size = 1;
    int micro_batches = 1;
    std::string predictions_path;
  };

  StagePredictor(WorkerSetup setup, Options options, WorkerPort& port);

  void start() override;
  void receive(TransferMessage message) override;

 private:
  struct Key {
    uint64_t step;
    uint32_t index;
    bool operator<(const Key& o) const { return std::tie(step, index) < std::tie(o.step, o.index); }
  };
  struct Micro {
    MicroBatchTag batch;
    std::vector<c10::IValue> inputs;
    std::vector<bool> have;
  };
  bool is_root() const { return setup_.node.position == 0; }
  bool is_leaf() const { return setup_.node.returns_model_output; }
  // WorkerBase: a failure drops what waits; a device out of memory says so.
  void on_failure() override;
  std::string failure_message(const std::exception& e) const override;
  Micro& micro(const MicroBatchTag& batch);
  void forward(Micro m);
  // Root: lets micro-batches in while fewer than the window are out.
  void pump();
  void micro_batch_done(const MicroBatchTag& batch);
  void write_predictions();
  void finish();

  Options options_;
  InputSlots input_slots_;
  std::map<Key, Micro> waiting_;                            // inputs still missing
  // Micro-batches per step and how many this node is done with; the step that was last.
  std::map<uint64_t, std::pair<uint32_t, uint32_t>> steps_;
  std::optional<uint64_t> last_step_;
  std::map<Key, c10::IValue> outputs_;  // leaf
  // Root: the batches in order, the next micro-batch to let in, what is out.
  std::vector<std::vector<int64_t>> batches_;
  size_t next_batch_ = 0;
  uint32_t next_micro_ = 0;
  std::vector<std::pair<int64_t, int64_t>> ranges_;
  std::vector<at::Tensor> batch_inputs_;
  size_t in_flight_ = 0;
  size_t window_ = 0;
  uint64_t samples_ = 0;
  double started_at_ = 0;
  double busy_seconds_ = 0;
};

}  // namespace ravnest::worker
