// CheckpointService: the daemon's checkpoint calls (checkpoints, storeCheckpoint,
// fetchCheckpoint) over its CheckpointStore, and the copies of its own checkpoints that it sends
// to its keeper (libs/config/plan/checkpoint_keeper.h), so that a spare can take the slot of a node
// that died with its disk (`ravnest replace`, docs/faults.md).
//
// A checkpoint belongs to a slot of the plan (cluster, position). A stored checkpoint of this
// node's own slot (from the requester, after a replacement) becomes its own, and is refused while
// a job runs; of another slot (from a peer, while its job runs), a kept copy. Files arrive through
// wire::FileSink: complete, checked (size, SHA-256) and renamed, or absent.
//
// RPC thread, except checkpoint_written (compute thread). A verified listing reads each
// checkpoint whole: that runs on the compute thread (on_compute), the RPC thread answering others
// meanwhile.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <asio/io_context.hpp>
#include <kj/async.h>

#include "libs/wire/stream_limits.h"
#include "libs/config/plan/node_metadata.h"
#include "libs/daemon/rpc/background_tasks.h"
#include "libs/store/checkpoint_store.h"
#include "libs/daemon/rpc/node_calls.h"
#include "libs/daemon/rpc/rpc_thread.h"
#include "libs/daemon/rpc/thread_bridge.h"
#include "libs/wire/peer_links.h"

namespace ravnest::daemon {

class CheckpointService {
 public:
  // `metadata` gives the stored stage's metadata (nullptr when none), `busy` whether a job runs;
  // both are called on the RPC thread.
  CheckpointService(std::shared_ptr<store::CheckpointStore> store,
                    wire::PeerLinks& links, RpcThread& rpc, asio::io_context& compute,
                    std::function<const config::NodeMetadata*()> metadata,
                    std::function<bool()> busy);

  kj::Promise<void> checkpoints(CheckpointsCall context);
  // `slot` counts the stream against its peer's limit until stored or dropped; a size above
  // `max_bytes` is refused.
  kj::Promise<void> store_checkpoint(StoreCheckpointCall context, wire::StreamSlot slot,
                                     uint64_t max_bytes);
  kj::Promise<void> fetch_checkpoint(FetchCheckpointCall context);

  // The worker wrote this node's checkpoint `updates` of `identity`: a copy goes to the keeper
  // in the background (read and hashed here, sent from the RPC thread). Best effort: a copy
  // that does not arrive is logged, and the job goes on. Compute thread; blocks until the RPC
  // thread started the copy (RpcThread::call), not until it arrived.
  void checkpoint_written(const config::NodeMetadata& self, const std::string& identity,
                          uint64_t updates);

 private:
  std::shared_ptr<store::CheckpointStore> store_;
  wire::PeerLinks& links_;
  RpcThread& rpc_;
  asio::io_context& compute_;
  std::function<const config::NodeMetadata*()> metadata_;
  std::function<bool()> busy_;
  BackgroundTasks tasks_;  // last: cancelled before what its tasks use
};

}  // namespace ravnest::daemon
