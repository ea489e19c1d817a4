// PsEvaluator: the evaluator of a parameter-server plan (docs/parameter-server.md). The servers
// send it their shards' weights every eval_freq updates and at the end (psWeights); once every
// server's shard of a version is there it loads them into its copy of the model, scores it on the
// job's validation data (eval mode, no autograd) and sends a validation event, which the
// requester shows for every worker, and writes to validation.txt. After the last version it
// finishes.
//
// Compute thread only (status() from any thread).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "libs/worker/worker_base.h"

namespace ravnest::data {
class Dataset;
}

namespace ravnest::training {
class Loss;
}

namespace ravnest::worker {

class PsEvaluator final : public WorkerBase {
 public:
  // The evaluator's options, made by make_worker_setup: what it scores the servers' weights on
  // (the job's validation data, with the job's loss, in batches of the job's batch_size).
  struct Options {
    std::shared_ptr<data::Dataset> validation_data;
    std::shared_ptr<training::Loss> loss;
    int64_t batch_size = 1;
    // validation.txt of the node's store: every round as "updates epoch loss accuracy" (as a
    // leaf's, leaf_metrics.h), replaced whole after each, emptied at the start; for `ravnest
    // losses`. Empty: not written.
    std::string validation_path;
  };

  PsEvaluator(WorkerSetup setup, Options options, WorkerPort& port);

  void start() override;
  void receive(TransferMessage message) override;

 private:
  Options options_;
  void score(std::map<int, TransferMessage>& shards, bool last);

  std::map<int, std::vector<at::Tensor>> shard_tensors_;  // server node -> its tensors, in order
  std::map<uint64_t, std::map<int, TransferMessage>> waiting_;  // round -> server -> weights
  std::string validation_;  // validation.txt as written
};

}  // namespace ravnest::worker
