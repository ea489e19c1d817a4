// EmbeddingRows: a hybrid trainer's embedding tables (docs/parameter-server.md#hybrid), which
// live on the embedding servers. In the stage each table's weight is an empty placeholder; for
// a forward the rows its indices name are looked up (psLookup, answered by psRows) and put in
// the placeholder's place, the indices becoming row positions; after the forward the
// placeholders go back (the graph keeps the rows it used). The rows' gradients are kept until
// the update, then summed per id and pushed to the servers (psGradients), waiting until every
// server applied the update, so that the next lookup sees it.
//
// StageWorker owns one when its node is a hybrid trainer. Compute thread only; look_up and
// push_gradients block in the WorkerPort. Errors: std::runtime_error naming the table or the
// server.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/csrc/jit/api/module.h>

#include "libs/worker/transfer.h"
#include "libs/worker/worker_setup.h"

namespace ravnest::worker {

class EmbeddingRows {
 public:
  // Finds each of the plan's sparse tables in `setup.stage` and the input holding its indices.
  EmbeddingRows(const WorkerSetup& setup, WorkerPort& port);

  // What one forward looked up, per table: the sorted unique ids and the rows it ran on.
  struct Lookup {
    std::vector<at::Tensor> row_ids, rows;
  };
  // Puts the rows that `args` index in the stage and makes the indices row positions. Blocks
  // until the servers answer. With `train`, the rows take gradients.
  Lookup look_up(const MicroBatchTag& batch, std::vector<c10::IValue>& args, bool train);
  void put_back_placeholders();
  // After the backward of a training forward: keeps its rows' gradients for the update.
  void collect_gradients(const Lookup& lookup);
  // The update `update`, after its last batch `batch`: the kept gradients to the servers.
  void push_gradients(uint64_t update, const MicroBatchTag& batch);

 private:
  // Where a sparse table sits in the stage (its weight, an empty placeholder between
  // forwards) and which input holds its indices.
  struct TableSlot {
    size_t index = 0;  // in the plan's sparse_tables
    int server = 0;
    torch::jit::Module owner;
    std::string attribute;
    at::Tensor placeholder;
    size_t input = 0;
  };

  const WorkerSetup& setup_;
  WorkerPort& port_;
  std::vector<TableSlot> slots_;
  uint64_t lookups_ = 0;
  std::vector<std::vector<at::Tensor>> pending_ids_, pending_grads_;  // per table
};

}  // namespace ravnest::worker
