#include "libs/daemon/rings/media/ring_sink_calls.h"

#include <algorithm>
#include <utility>

#include "libs/wire/kj_reason.h"
#include "libs/wire/resolved_client.h"

namespace ravnest::daemon {

RingSinkCalls::RingSinkCalls(RpcThread& rpc, wire::PeerLinks& links, RingPeerAddress next,
                             size_t in_flight)
    : rpc_(rpc),
      links_(links),
      next_(std::move(next)),
      in_flight_limit_(std::max<size_t>(1, in_flight)) {}

RingSinkCalls::~RingSinkCalls() noexcept(false) {
  if (sink_ == nullptr && in_flight_.empty()) return;
  try {
    rpc_.call([&]() {
      in_flight_.clear();
      sink_ = nullptr;
    });
  } catch (const kj::Exception&) {
    // The RPC loop is gone (shutdown); so is the connection the sink belonged to.
  }
}

void RingSinkCalls::call(
    const std::function<kj::Promise<void>(schema::RingSink::Client&)>& make) {
  rpc_.call([&]() -> kj::Promise<void> {
    KJ_IF_MAYBE(open, sink_) {
      *open = wire::resolved_client(kj::mv(*open));  // segments sent without a copy
    }
    auto& sink = KJ_ASSERT_NONNULL(sink_);
    // Evaluated eagerly so that a failed call drops its connection at once; its error waits
    // here for whoever waits for the call.
    in_flight_.push_back(links_.watch(next_.address, make(sink)).eagerlyEvaluate(nullptr));
    if (in_flight_.size() < in_flight_limit_) return kj::READY_NOW;
    auto oldest = kj::mv(in_flight_.front());
    in_flight_.pop_front();
    return oldest;
  });
}

void RingSinkCalls::flush() {
  try {
    rpc_.call([&]() -> kj::Promise<void> {
      if (in_flight_.empty()) return kj::READY_NOW;
      auto calls = kj::heapArrayBuilder<kj::Promise<void>>(in_flight_.size());
      for (auto& call : in_flight_) calls.add(kj::mv(call));
      in_flight_.clear();
      return kj::joinPromises(calls.finish())
          .exclusiveJoin(rpc_.timer().afterDelay(10 * kj::SECONDS).then([]() {
            kj::throwFatalException(KJ_EXCEPTION(DISCONNECTED, "no answer for 10 s"));
          }));
    });
  } catch (const kj::Exception& e) {
    // The connection may still hold segments that point into the caller's memory: close it, so
    // that nothing reads that memory once the caller lets it go.
    try {
      rpc_.call([&]() {
        in_flight_.clear();
        sink_ = nullptr;
        links_.drop(next_.address);
      });
    } catch (const kj::Exception&) {
    }
    throw ring::RingError("cannot confirm the ring's segments with " + next_.name + " (" +
                              next_.address + "): " + wire::kj_reason(e),
                          next_.name);
  }
}

}  // namespace ravnest::daemon
