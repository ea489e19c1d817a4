#include "libs/daemon/node_endpoint.h"

#include <spdlog/spdlog.h>

#include "libs/wire/kj_reason.h"

namespace ravnest::daemon {

NodeEndpoint::NodeEndpoint(NodeService& service, std::string peer)
    : service_(service), peer_(std::move(peer)), peer_host_(wire::peer_host(peer_)) {}

wire::StreamSlot NodeEndpoint::open_stream(const std::string& what) {
  return service_.streams().open(peer_host_, what);
}

template <typename Call>
kj::Promise<void> NodeEndpoint::forward(const char* method, Call&& call) {
  try {
    return call();
  } catch (const kj::Exception& e) {
    std::string why = wire::kj_reason(e);
    if (why.rfind("refused: ", 0) == 0) why = why.substr(9);
    if (why.rfind(std::string(method) + ": ", 0) != 0) why = std::string(method) + ": " + why;
    spdlog::warn("refused {}: {}", peer_, why);
    throw;
  }
}

kj::Promise<void> NodeEndpoint::pushStage(PushStageContext context) {
  return forward("pushStage", [&] {
    return service_.files().push_stage(context, open_stream("pushStage"),
                                     service_.limits().file_bytes);
  });
}
kj::Promise<void> NodeEndpoint::pushMetadata(PushMetadataContext context) {
  return forward("pushMetadata", [&] { return service_.files().push_metadata(context); });
}
kj::Promise<void> NodeEndpoint::pushFile(PushFileContext context) {
  return forward("pushFile", [&] {
    return service_.files().push_file(context, open_stream("pushFile"), service_.limits().file_bytes);
  });
}
kj::Promise<void> NodeEndpoint::loadJob(LoadJobContext context) {
  return forward("loadJob", [&] { return service_.job().load_job(context); });
}
kj::Promise<void> NodeEndpoint::start(StartContext context) {
  return forward("start", [&] { return service_.job().start(context); });
}
kj::Promise<void> NodeEndpoint::stop(StopContext context) {
  return forward("stop", [&] { return service_.job().stop(context); });
}
kj::Promise<void> NodeEndpoint::status(StatusContext context) {
  return forward("status", [&] { return service_.job().status(context); });
}
kj::Promise<void> NodeEndpoint::fetchStage(FetchStageContext context) {
  return forward("fetchStage", [&] { return service_.files().fetch_stage(context); });
}
kj::Promise<void> NodeEndpoint::subscribe(SubscribeContext context) {
  return forward("subscribe", [&] { return service_.job().events().subscribe(context); });
}
kj::Promise<void> NodeEndpoint::fetchLosses(FetchLossesContext context) {
  return forward("fetchLosses", [&] { return service_.files().fetch_losses(context); });
}
kj::Promise<void> NodeEndpoint::fetchPredictions(FetchPredictionsContext context) {
  return forward("fetchPredictions", [&] { return service_.files().fetch_predictions(context); });
}
kj::Promise<void> NodeEndpoint::hold(HoldContext context) {
  return forward("hold", [&] { return service_.job().hold(context); });
}

kj::Promise<void> NodeEndpoint::setRings(SetRingsContext context) {
  return forward("setRings", [&] { return service_.membership().set_rings(context); });
}
kj::Promise<void> NodeEndpoint::ringRounds(RingRoundsContext context) {
  return forward("ringRounds", [&] { return service_.membership().ring_rounds(context); });
}
kj::Promise<void> NodeEndpoint::checkpoints(CheckpointsContext context) {
  return forward("checkpoints", [&] { return service_.checkpoints().checkpoints(context); });
}
kj::Promise<void> NodeEndpoint::storeCheckpoint(StoreCheckpointContext context) {
  return forward("storeCheckpoint", [&] {
    return service_.checkpoints().store_checkpoint(context, open_stream("storeCheckpoint"),
                                                   service_.limits().file_bytes);
  });
}
kj::Promise<void> NodeEndpoint::fetchCheckpoint(FetchCheckpointContext context) {
  return forward("fetchCheckpoint",
                 [&] { return service_.checkpoints().fetch_checkpoint(context); });
}
kj::Promise<void> NodeEndpoint::send(SendContext context) {
  return forward("send", [&] {
    return service_.transfer().send(context, [this]() { return open_stream("send"); });
  });
}
kj::Promise<void> NodeEndpoint::openRing(OpenRingContext context) {
  return forward("openRing",
                 [&] { return service_.ring().open_ring(context, open_stream("openRing")); });
}
kj::Promise<void> NodeEndpoint::abortReduce(AbortReduceContext context) {
  return forward("abortReduce", [&] { return service_.ring().abort_reduce(context); });
}
kj::Promise<void> NodeEndpoint::benchAllReduce(BenchAllReduceContext context) {
  return forward("benchAllReduce", [&] { return service_.bench().bench_all_reduce(context); });
}

}  // namespace ravnest::daemon
