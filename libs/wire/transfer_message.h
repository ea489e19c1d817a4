// Transfers as the nodes see them: decoded values between two nodes, for one micro-batch of a
// pipeline (activations, gradients, labels, random state, predictions done) or one exchange of a
// parameter-server plan (gradients, weights, lookups, rows; these cross clusters).
// schemas/ravnest.capnp (Transfer, MicroBatch) describes how they travel;
// transfer_codec.h is the one place that copies them to and from it.
#pragma once

#include <cstddef>
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
  // Training: the labels of the whole batch the loss counts when some are ignored ([loss]
  // ignore_index, training::weigh_by_labels); 0: each micro-batch weighs its samples.
  uint64_t batch_counted = 0;
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

  // The parameter-server kinds carry their own counters in the tag's `step` (the bytes on the
  // wire are MicroBatch.step, schemas/ravnest.capnp); these name them.
  // psGradients, psWeights: the workers' update number they push or answer (the evaluator's
  // psWeights: its evaluation round).
  uint64_t update() const { return batch.step; }
  void set_update(uint64_t update) { batch.step = update; }
  // psLookup, psRows: the trainer's lookup number, increasing from one lookup to the next.
  uint64_t lookup() const { return batch.step; }
  void set_lookup(uint64_t lookup) { batch.step = lookup; }
};

// A hybrid trainer's psGradients carry two values per table: the row ids at 2 * table and the
// rows' summed gradients at 2 * table + 1 (table: its index in the plan's sparse_tables).
inline uint32_t row_ids_value(size_t table) { return static_cast<uint32_t>(2 * table); }
inline uint32_t row_sums_value(size_t table) { return static_cast<uint32_t>(2 * table + 1); }

// A message of `kind` from node `from` to node `to`, tagged `batch`, with no values yet.
inline TransferMessage addressed(TransferKind kind, int from, int to, const MicroBatchTag& batch) {
  TransferMessage message;
  message.kind = kind;
  message.from_node = from;
  message.to_node = to;
  message.batch = batch;
  return message;
}

}  // namespace ravnest::wire
