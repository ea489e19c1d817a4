// RandomChain: the random stream of a job whose stages draw (dropout), run through the nodes of
// NodeMetadata::random_nodes as through one process: micro-batch after micro-batch, and within
// one, node after node. A node of the chain runs a training forward only with the generator's
// state for it (passed by the node before it, or by the chain's last node for the micro-batch
// before), sets the generator to it first and passes the state after the forward on.
// Validation forwards draw nothing from the chain.
//
// Part of a StageWorker (stage_worker.h); compute thread only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>

#include <ATen/core/Tensor.h>

#include "libs/config/plan/node_metadata.h"
#include "libs/worker/transfer.h"

namespace ravnest::worker {

class RandomChain {
 public:
  RandomChain(const config::NodeMetadata& node, c10::Device device);

  bool member() const { return member_; }  // this node draws in the chain
  // A job that starts from its seed: the chain's first node draws first.
  void start();
  // A kRandomState from a peer. Throws std::runtime_error naming the peer when it is no state.
  void take(const TransferMessage& message);
  // Whether `batch`'s forward has what it needs from the chain.
  bool ready(const MicroBatchTag& batch) const;
  // Before a training forward of a member: the generator takes the state passed for it.
  void enter(const MicroBatchTag& batch);
  // After it: where the generator's state goes next and for which micro-batch; nothing where
  // the stream ends (the last micro-batch of training, at the chain's last node).
  std::optional<std::pair<int, MicroBatchTag>> next(const MicroBatchTag& batch) const;

  // Checkpoints: the state waiting for training micro-batch (`step`, `index`), undefined if none.
  at::Tensor waiting(uint64_t step, uint32_t index) const;
  void set_waiting(uint64_t step, uint32_t index, at::Tensor state);
  void clear() { waiting_.clear(); }

 private:
  const config::NodeMetadata& node_;
  const c10::Device device_;
  const bool member_;
  std::map<std::pair<uint64_t, uint32_t>, at::Tensor> waiting_;  // (step, index) -> state to use
};

}  // namespace ravnest::worker
