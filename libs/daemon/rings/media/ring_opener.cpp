#include "libs/daemon/rings/media/ring_opener.h"

#include <algorithm>
#include <string>
#include <utility>

#include <kj/common.h>
#include <spdlog/spdlog.h>

#include "libs/daemon/rings/media/media_choice.h"
#include "libs/daemon/rings/media/segment_calls_medium.h"
#include "libs/daemon/rings/media/shared_memory_medium.h"

namespace ravnest::daemon {

RingOpener::RingOpener(RpcThread& rpc, wire::PeerLinks& links, wire::WireTraffic& traffic,
                       RingMailbox& mailbox, uint32_t ring, int self_node, RingPeerAddress next,
                       size_t in_flight, uint64_t shared_slot_bytes, ChannelMode channels)
    : rpc_(rpc),
      links_(links),
      traffic_(traffic),
      mailbox_(mailbox),
      ring_(ring),
      self_node_(self_node),
      next_(std::move(next)),
      in_flight_(std::max<size_t>(1, in_flight)),
      channels_(channels) {
  if (shared_slot_bytes == 0) return;
  try {
    shared_ = std::make_unique<SharedSegmentsWriter>(static_cast<uint32_t>(in_flight_),
                                                     shared_slot_bytes);
  } catch (const std::exception& e) {
    spdlog::warn("ring {}: segments go through the connection: {}", ring_, e.what());
  }
}

std::unique_ptr<RingMedium> RingOpener::open() {
  auto sink = std::make_unique<RingSinkCalls>(rpc_, links_, next_, in_flight_);
  MediaOffered offered;
  offered.shared_memory = shared_ != nullptr;
  offered.data_channel = channels_ != ChannelMode::kOff;
  ChannelOffer channel;
  KJ_DEFER(channel.key.assign(channel.key.size(), '\0'));  // connected or given up
  if (offered.data_channel) {
    channel = draw_channel_offer(channels_);
    offered.channel_token_bytes = channel.token.size();
    offered.channel_key_bytes = channel.key.size();
  }
  MediaAccepted accepted;
  rpc_.call([&]() -> kj::Promise<void> {
    auto request = links_.node(next_.address).openRingRequest();
    request.setRing(ring_);
    request.setFromNode(self_node_);
    if (offered.shared_memory) offer_shared_memory(request.initShared(), shared_->offer());
    if (offered.data_channel) offer_data_channel(request.initChannel(), channel);
    auto opened = request.send();
    sink->set(opened.getSink());  // pipelined: segments may follow before the answer
    if (!offered.shared_memory && !offered.data_channel) return kj::READY_NOW;
    return links_
        .watch(next_.address,
               opened.then([&](capnp::Response<schema::Node::OpenRingResults>&& answer) {
                 accepted.shared_memory = answer.getSharedAccepted();
                 accepted.data_channel = answer.getChannelAccepted();
               }))
        .exclusiveJoin(rpc_.timer().afterDelay(10 * kj::SECONDS).then([]() {
          kj::throwFatalException(KJ_EXCEPTION(DISCONNECTED, "no answer for 10 s"));
        }));
  });
  switch (choose_medium(offered, accepted)) {
    case RingMediumKind::kSharedMemory:
      spdlog::info("ring {}: {} runs on this host: segments through shared memory", ring_,
                   next_.name);
      return std::make_unique<SharedMemoryMedium>(std::move(sink), *shared_, traffic_);
    case RingMediumKind::kDataChannel:
      try {
        auto out = wire::DataChannel::connect(next_.address, channel.token, channel.key);
        if (!channel_logged_) {
          channel_logged_ = true;
          spdlog::info("ring {}: segments to {} over a data channel ({})", ring_, next_.name,
                       out->sealed() ? "AES-256-GCM" : "plain, --insecure");
        }
        return std::make_unique<DataChannelMedium>(std::move(sink), std::move(out), mailbox_,
                                                   ring_, traffic_);
      } catch (const std::exception& e) {
        // Segment calls still work; the receiver takes segments from either.
        spdlog::warn("ring {}: no data channel to {} ({}): segments go as RPC calls", ring_,
                     next_.name, e.what());
      }
      break;
    case RingMediumKind::kSegmentCalls:
      break;
  }
  return std::make_unique<SegmentCallsMedium>(std::move(sink), traffic_);
}

}  // namespace ravnest::daemon
