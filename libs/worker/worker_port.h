// WorkerPort: what a job's worker needs from its surroundings, so that the worker knows nothing of
// capnp or threads. The daemon's NodeService implements it; LocalPort (tests/support/local_port.h)
// in one process.
//
// Called on the worker's thread. send, event, defer and checkpoint_written issue and return at
// once (sends are queued and happen on the RPC thread; a failed send comes back to the worker as
// a failure naming the peer). reduce_rings, exchange_with_servers and lookup_rows block until
// their peers answer, as each says.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "libs/config/job/compression_spec.h"
#include "libs/config/plan/node_metadata.h"
#include "libs/wire/node_report.h"
#include "libs/wire/transfer_message.h"

namespace ravnest::worker {

class WorkerPort {
 public:
  virtual ~WorkerPort() noexcept(false) = default;  // implementers hold KJ objects
  virtual void send(wire::TransferMessage message) = 0;
  virtual void event(const wire::ProgressEventData& event) = 0;
  // Runs `task` later on the worker's own thread.
  virtual void defer(std::function<void()> task) = 0;
  // Averages (or, with average false, sums) each ring's tensors in place with the ring's other
  // members, all rings at once; blocks until done. Throws std::runtime_error naming a member
  // that failed.
  struct RingWork {
    const config::RingMembership* ring = nullptr;
    std::vector<at::Tensor> tensors;
    // Lossy segments (the job's [compression] rings) with error feedback per `stream`: the
    // name of this set of tensors, the same set every time (ring_allreduce.h, RingCompression).
    config::WireCodec codec = config::WireCodec::kNone;
    std::string stream;
  };
  virtual void reduce_rings(uint64_t round, std::vector<RingWork>& work, bool average = true) = 0;
  // A parameter server's worker: sends `pushes` (its gradients, one message per server, each
  // addressed to_node) and waits for every server's weights answering the same update; returns
  // them in the order of `pushes`. Blocks. Throws std::runtime_error when a server fails or the
  // job is stopped.
  virtual std::vector<wire::TransferMessage> exchange_with_servers(
      std::vector<wire::TransferMessage> pushes) {
    throw std::runtime_error("this port has no parameter servers");
  }
  // A hybrid trainer: sends `lookups` (psLookup, one per server, each addressed to_node, all
  // with the same `step`, increasing from one call to the next) and waits for every server's
  // rows; returns them in the order of `lookups`. Blocks; throws as exchange_with_servers.
  virtual std::vector<wire::TransferMessage> lookup_rows(
      std::vector<wire::TransferMessage> lookups) {
    throw std::runtime_error("this port has no parameter servers");
  }
  // The worker wrote its checkpoint after `updates` updates of the job `identity`: the daemon
  // sends a copy to the node's keeper (checkpoint_service.h). A port without peers keeps none.
  virtual void checkpoint_written(const std::string& identity, uint64_t updates) {}
};

}  // namespace ravnest::worker
