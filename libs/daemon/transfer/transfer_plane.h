// TransferPlane: the micro-batch data plane between daemons. send() (Node.send) decodes a peer's
// transfer, receives its streamed tensors and delivers the message to the node's WorkerInbox;
// dispatch() encodes one of the worker's messages and sends it to the peer that consumes it.
//
// RPC thread only; nothing blocks. A message that cannot be sent fails the inbox's worker with a
// line naming the peer, and the connection it went over is dropped (wire::PeerLinks::watch).
#pragma once

#include <functional>
#include <map>
#include <string>

#include "libs/wire/stream_limits.h"
#include "libs/daemon/rpc/background_tasks.h"
#include "libs/daemon/rpc/node_calls.h"
#include "libs/daemon/transfer/worker_inbox.h"
#include "libs/wire/peer_links.h"
#include "libs/wire/transfer_message.h"
#include "libs/wire/value_codec.h"
#include "libs/wire/wire_traffic.h"

namespace ravnest::daemon {

class TransferPlane {
 public:
  // `limits`: what one received transfer may hold.
  // `traffic` counts what goes either way (wire_traffic.h).
  TransferPlane(wire::PeerLinks& links, wire::WireTraffic& traffic, WorkerInbox& inbox,
                wire::DecodeLimits limits)
      : links_(links), traffic_(traffic), inbox_(inbox), limits_(limits) {}

  // `open_stream` gives the slot that counts a transfer's streamed tensors against its peer's
  // limit until they arrived (called only when the transfer streams any).
  kj::Promise<void> send(SendCall context, const std::function<wire::StreamSlot()>& open_stream);
  // Sends `message` to `message.to_node`, found in `addresses` (the job's address book).
  void dispatch(wire::TransferMessage message, const WorkerInbox::AddressBook& addresses);

 private:
  wire::PeerLinks& links_;
  wire::WireTraffic& traffic_;
  WorkerInbox& inbox_;
  wire::DecodeLimits limits_;
  bool saturation_reported_ = false;
  BackgroundTasks tasks_;  // last: cancelled before what its tasks use
};

}  // namespace ravnest::daemon
