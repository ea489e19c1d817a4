// TransferPlane: the micro-batch data plane between daemons. send() (Node.send) decodes a peer's
// transfer, receives its streamed tensors and delivers the message; dispatch() encodes one of the
// worker's messages and sends it to the peer that consumes it.
//
// RPC thread only. A message that cannot be sent goes to `fail` with a line naming the peer, and
// the connection it went over is dropped (wire::PeerLinks::watch).
#pragma once

#include <functional>
#include <map>
#include <string>

#include "libs/wire/stream_limits.h"
#include "libs/daemon/rpc/background_tasks.h"
#include "libs/daemon/rpc/node_calls.h"
#include "libs/wire/peer_links.h"
#include "libs/wire/transfer_message.h"
#include "libs/wire/value_codec.h"
#include "libs/wire/wire_traffic.h"

namespace ravnest::daemon {

class TransferPlane {
 public:
  using Deliver = std::function<void(wire::TransferMessage)>;
  using Fail = std::function<void(const std::string&)>;

  // `limits`: what one received transfer may hold.
  // `traffic` counts what goes either way (wire_traffic.h).
  TransferPlane(wire::PeerLinks& links, wire::WireTraffic& traffic, Deliver deliver, Fail fail,
                wire::DecodeLimits limits)
      : links_(links),
        traffic_(traffic),
        deliver_(std::move(deliver)),
        fail_(std::move(fail)),
        limits_(limits) {}

  // `open_stream` gives the slot that counts a transfer's streamed tensors against its peer's
  // limit until they arrived (called only when the transfer streams any).
  kj::Promise<void> send(SendCall context, const std::function<wire::StreamSlot()>& open_stream);
  // Sends `message` to `message.to_node`, found in `addresses` (node id -> host:port).
  void dispatch(wire::TransferMessage message, const std::map<int, std::string>& addresses);

 private:
  wire::PeerLinks& links_;
  wire::WireTraffic& traffic_;
  Deliver deliver_;
  Fail fail_;
  wire::DecodeLimits limits_;
  bool saturation_reported_ = false;
  BackgroundTasks tasks_;  // last: cancelled before what its tasks use
};

}  // namespace ravnest::daemon
