// ServerExchange: a parameter-server worker's side of its update (docs/parameter-server.md). The
// update is the servers': each gets the gradients of its shard and this worker's buffers
// (psGradients), and answers with the shard's weights after its update (psWeights), which
// replace this worker's (with the buffers too at the end of a synchronous job). It remembers
// the version of each server's weights the worker holds, which the server reads the pushes'
// staleness from.
//
// StageWorker owns one when its node is a parameter-server worker. Compute thread only; blocks
// in WorkerPort::exchange_with_servers.
#pragma once

#include <cstdint>
#include <map>


#include "libs/config/plan/node_metadata.h"
#include "libs/stage/stage.h"
#include "libs/worker/transfer.h"

namespace ravnest::worker {

class ServerExchange {
 public:
  ServerExchange(const config::NodeMetadata& node, uint64_t job_id, WorkerPort& port)
      : node_(node), job_id_(job_id), port_(port) {}

  // The worker's update number `update`, after the last batch of it (`batch`): pushes `stage`'s
  // gradients and buffers, waits for every server's weights and copies them into `stage`.
  // Throws std::runtime_error naming the server when a shard does not fit the stage.
  void exchange(stage::Stage& stage, uint64_t update, const MicroBatchTag& batch);

 private:
  const config::NodeMetadata& node_;
  const uint64_t job_id_;
  WorkerPort& port_;
  std::map<int, uint64_t> server_versions_;  // parameter server node -> version of its weights
};

}  // namespace ravnest::worker
