// ParameterServer: one server of a parameter-server plan (docs/parameter-server.md). It holds its
// shard of the model's state (NodeMetadata::parameter_server) and the shard's optimizer and LR
// schedule. After each of their updates the workers push the shard's gradients and their current
// buffers (psGradients); the server answers with the shard's weights (psWeights):
//   sync    waits for every worker's gradients of update s, averages them in worker order, steps,
//           answers every worker;
//   backup  steps on the first `backup` workers' gradients of update s and answers every worker;
//           gradients of s that come later are dropped (counted);
//   async   steps on each worker's gradients as they come and answers that worker, unless they
//           were computed on weights more than max_staleness updates old: dropped (counted), and
//           the worker gets the current weights.
// The shard's buffers (BatchNorm statistics) are the average of the workers' latest ones. Every
// eval_freq updates and at the end the weights go to the evaluator. Once every worker pushed its
// last update the module is saved as the trained stage and the server finishes (in sync the
// last answers carry the averaged buffers, so the workers end with the server's state).
//
// Compute thread only (status() from any thread).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "libs/config/job/job_spec.h"
#include "libs/worker/worker_base.h"

namespace ravnest::worker {

class ParameterServer final : public WorkerBase {
 public:
  // The evaluation round of the final weights (psWeights to the evaluator carry their round).
  static constexpr uint64_t kFinalRound = UINT64_MAX;

  // A server's options (the job's [ps]), made by make_worker_setup: how it combines the
  // workers' gradients. Its shard's optimizer is WorkerSetup::optimizer.
  struct Options {
    config::PsSpec ps;
  };

  ParameterServer(WorkerSetup setup, Options options, WorkerPort& port);

  void start() override;
  void receive(TransferMessage message) override;

 private:
  Options options_;
  struct Push {
    int worker = 0;  // index in the plan's workers
    TransferMessage message;
  };
  void take(Push push);
  // Averages the gradients of `pushes`, steps the optimizer; a new version.
  void update(const std::vector<Push>& pushes);
  void average_buffers();
  void answer(int worker, uint64_t step, bool with_buffers);
  void send_weights(int to_node, uint64_t step, bool last, bool with_buffers);
  void evaluate_if_due(bool last);
  void finish_if_done();

  std::vector<at::Tensor> tensors_;       // the shard, in its order
  std::vector<bool> is_parameter_;
  std::map<int, int> worker_of_node_;     // node id -> worker index
  std::map<uint64_t, std::vector<Push>> pending_;  // sync, backup: update -> pushes so far
  uint64_t next_step_ = 0;                // sync, backup: the workers' update made next
  uint64_t version_ = 0;                  // updates made
  uint32_t epoch_ = 0;
  std::map<int, std::vector<at::Tensor>> latest_buffers_;  // worker -> its buffers (by shard index)
  std::set<int> workers_done_;            // pushed their last update
  uint64_t dropped_ = 0;
  bool evaluated_last_ = false;
  uint64_t last_evaluated_ = 0;  // the version last sent to the evaluator
};

}  // namespace ravnest::worker
