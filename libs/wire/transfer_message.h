// Transfers as the runtime sees them: decoded values for one micro-batch between two nodes of a
// cluster. schemas/ravnest.capnp (Transfer, MicroBatch) describes how they travel;
// transfer_codec.h is the one place that copies them to and from it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "libs/wire/tensor_codec.h"

#include <ATen/core/ivalue.h>

namespace ravnest::wire {

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
  uint64_t version = 0;  // parameter server: the weights' version (ps kinds only)
};

// kPsGradients, kPsWeights: between parameter servers and their workers and evaluator;
// kPsLookup, kPsRows: a hybrid trainer's row lookups (schemas/ravnest.capnp says what each
// carries).
enum class TransferKind {
  kActivations,
  kGradients,
  kLabels,
  kRandomState,
  kPsGradients,
  kPsWeights,
  kPsLookup,
  kPsRows,
  kPredicted  // a prediction job: leaf -> root, one per micro-batch done (stage_predictor.h)
};

struct TransferMessage {
  TransferKind kind = TransferKind::kActivations;
  int from_node = 0;
  int to_node = 0;  // where the sender sends it; not on the wire
  MicroBatchTag batch;
  std::vector<std::pair<uint32_t, c10::IValue>> values;  // (producer output index, value)
  // How its floating-point tensors travel (the job's [compression]); not on the wire as such:
  // each tensor says its own codec.
  TensorCodec codec = TensorCodec::kNone;
};

}  // namespace ravnest::wire
