#include "libs/daemon/rings/media/ring_sink_server.h"

#include <utility>

namespace ravnest::daemon {

kj::Promise<void> RingSinkServer::segment(SegmentContext context) {
  auto params = context.getParams();
  auto data = params.getData();
  traffic_.received(wire::TrafficKind::kRings, params.totalSize().wordCount * 8);
  // The bytes stay in the call's message, which lives until the call is answered.
  return hold_until_taken({ring_, params.getRound(), params.getStep(), params.getSegment()},
                          data.begin(), data.size(), nullptr);
}

kj::Promise<void> RingSinkServer::sharedSegment(SharedSegmentContext context) {
  auto params = context.getParams();
  if (shared_ == nullptr) {
    return KJ_EXCEPTION(FAILED, "this ring's sink took no shared memory");
  }
  const uint32_t slot = params.getSlot();
  const uint64_t bytes = params.getBytes();
  if (slot >= shared_->slots() || bytes > shared_->slot_bytes()) {
    return KJ_EXCEPTION(FAILED, "a shared segment beyond the memory offered");
  }
  traffic_.received(wire::TrafficKind::kRings, bytes);
  return hold_until_taken({ring_, params.getRound(), params.getStep(), params.getSegment()},
                          shared_->slot(slot), bytes, shared_);
}

kj::Promise<void> RingSinkServer::hold_until_taken(const RingMailbox::Key& key, const void* data,
                                                   size_t size,
                                                   std::shared_ptr<const void> keeps) {
  auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
  auto fulfiller = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<void>>>(
      kj::mv(paf.fulfiller));
  mailbox_.deposit_borrowed(key, data, size,
                            [fulfiller, keeps = std::move(keeps)]() { (*fulfiller)->fulfill(); });
  return kj::mv(paf.promise);
}

}  // namespace ravnest::daemon
