// Transfers as the runtime sees them: decoded values for one micro-batch between two nodes of a
// cluster. schemas/ravnest.capnp describes how they travel; libs/wire encodes them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>

#include "libs/config/node_metadata.h"

namespace ravnest::runtime {

struct MicroBatchTag {
  uint64_t job_id = 0;
  bool validate = false;
  uint64_t step = 0;   // train: batch number since the start; validate: validation batch number
  uint32_t index = 0;  // micro-batch within the batch
  uint32_t count = 1;  // micro-batches in the batch
  uint32_t samples = 0;
  uint32_t batch_samples = 0;
  uint32_t epoch = 0;
  bool last = false;   // last batch of training, or of a validation round
};

enum class TransferKind { kActivations, kGradients, kLabels, kRandomState };

struct TransferMessage {
  TransferKind kind = TransferKind::kActivations;
  int from_node = 0;
  int to_node = 0;
  MicroBatchTag batch;
  std::vector<std::pair<uint32_t, c10::IValue>> values;  // (producer output index, value)
};

enum class EventKind { kStep, kValidation, kFinished, kFailed };

struct ProgressEventData {
  EventKind kind = EventKind::kStep;
  uint32_t epoch = 0;
  uint64_t step = 0;
  double loss = 0;
  double accuracy = 0;
  uint64_t samples = 0;
  std::string message;
};

// What a stage worker needs from its surroundings. Implementations must not block for long:
// sends are queued and happen on the RPC thread; a failed send comes back to the worker as a
// failure naming the peer.
class WorkerPort {
 public:
  virtual ~WorkerPort() noexcept(false) = default;  // implementers hold KJ objects
  virtual void send(TransferMessage message) = 0;
  virtual void event(const ProgressEventData& event) = 0;
  // Runs `task` later on the worker's own thread.
  virtual void defer(std::function<void()> task) = 0;
  // Averages (or, with average false, sums) each ring's tensors in place with the ring's other
  // members, all rings at once; blocks until done. Throws std::runtime_error naming a member
  // that failed.
  struct RingWork {
    const config::RingMembership* ring = nullptr;
    std::vector<at::Tensor> tensors;
  };
  virtual void reduce_rings(uint64_t round, std::vector<RingWork>& work, bool average = true) = 0;
};

}  // namespace ravnest::runtime
