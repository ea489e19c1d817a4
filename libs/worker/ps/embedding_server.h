// EmbeddingServer: a server of a hybrid plan (docs/parameter-server.md#hybrid). It holds whole
// embedding tables (NodeMetadata::parameter_server.sparse_tables whose `server` is this node) and
// their optimizer (the job's [sparse_optimizer]: SGD, Adagrad or SparseAdam, applied lazily to
// the rows a gradient names, as PyTorch does with sparse gradients).
//   psLookup   a trainer's sorted unique ids per table: answered at once with those rows (psRows).
//              Trainers look up only after their previous update was applied, so every lookup
//              sees the weights one process would.
//   psGradients  a trainer's row gradients of update s (ids, summed rows per table): once every
//              trainer's are in, they are summed in trainer order, divided by the trainers (the
//              average, as the dense part's rings take) and applied; every trainer then gets an
//              empty psWeights for s.
// When every trainer has pushed its last update the module is saved as the trained stage and the
// server finishes, and goes on answering lookups (the trainers' final validation).
//
// Compute thread only (status() from any thread).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "libs/worker/worker_base.h"
#include "libs/training/sparse_optimizer.h"

namespace ravnest::worker {

class EmbeddingServer final : public WorkerBase {
 public:
  // A hybrid plan's server's options, made by make_worker_setup: its tables' optimizer (the
  // job's [sparse_optimizer]; the constructor throws without it).
  struct Options {
    std::optional<config::SparseOptimizerSpec> sparse_optimizer;
  };

  EmbeddingServer(WorkerSetup setup, Options options, WorkerPort& port);

  void start() override;
  void receive(TransferMessage message) override;

 private:
  Options options_;
  struct Table {
    size_t index = 0;  // in the plan's sparse_tables
    at::Tensor weight;
    std::unique_ptr<training::SparseRowOptimizer> optimizer;
  };
  Table& table(uint32_t index, int from_node);
  void lookup(const TransferMessage& message);
  void take(int trainer, TransferMessage message);
  void update(const std::map<int, TransferMessage>& pushes);

  std::vector<Table> tables_;
  std::map<int, int> trainer_of_node_;  // node id -> trainer index
  std::map<uint64_t, std::map<int, TransferMessage>> pending_;  // update -> trainer -> push
  uint64_t next_step_ = 0;
  std::set<int> trainers_done_;
  bool saved_ = false;
};

}  // namespace ravnest::worker
