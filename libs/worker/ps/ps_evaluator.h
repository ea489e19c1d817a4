// PsEvaluator: the evaluator of a parameter-server plan (docs/parameter-server.md). The servers
// send it their shards' weights every eval_freq updates and at the end (psWeights); once every
// server's shard of a version is there it loads them into its copy of the model, scores it on the
// job's validation data (eval mode, no autograd) and sends a validation event, which the
// requester shows for every worker. After the last version it finishes.
//
// Compute thread only (status() from any thread).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "libs/worker/worker_base.h"

namespace ravnest::worker {

class PsEvaluator final : public WorkerBase {
 public:
  PsEvaluator(WorkerSetup setup, WorkerPort& port);

  void start() override;
  void receive(TransferMessage message) override;

 private:
  void score(std::map<int, TransferMessage>& shards, bool last);

  std::map<int, std::vector<at::Tensor>> shard_tensors_;  // server node -> its tensors, in order
  std::map<uint64_t, std::map<int, TransferMessage>> waiting_;  // round -> server -> weights
};

}  // namespace ravnest::worker
