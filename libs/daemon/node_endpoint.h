// NodeEndpoint: the daemon's Node (schemas/ravnest.capnp) as one connection sees it, made by
// the connection's gate once its peer proved the secret (libs/wire/gate.h). Holding it is the
// permission to call it: no method checks a secret. It forwards each method to the NodeService
// role that serves it, and counts the streams the peer opens (files, checkpoints, a transfer's
// tensors, ring sinks) against the limit of the peer's host, with every other connection of that
// host (wire::StreamLimits). RPC thread only.
#pragma once

#include <string>

#include "libs/daemon/node_service.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::daemon {

class NodeEndpoint final : public schema::Node::Server {
 public:
  // `peer`: the connection's peer ("127.0.0.1:43210"). `service` outlives it. A call refused
  // at once (a check of its parameters, a limit) is logged with the peer's address.
  NodeEndpoint(NodeService& service, std::string peer);

 protected:
  kj::Promise<void> pushStage(PushStageContext context) override;
  kj::Promise<void> pushMetadata(PushMetadataContext context) override;
  kj::Promise<void> pushFile(PushFileContext context) override;
  kj::Promise<void> loadJob(LoadJobContext context) override;
  kj::Promise<void> start(StartContext context) override;
  kj::Promise<void> stop(StopContext context) override;
  kj::Promise<void> status(StatusContext context) override;
  kj::Promise<void> fetchStage(FetchStageContext context) override;
  kj::Promise<void> subscribe(SubscribeContext context) override;
  kj::Promise<void> fetchLosses(FetchLossesContext context) override;
  kj::Promise<void> fetchPredictions(FetchPredictionsContext context) override;
  kj::Promise<void> hold(HoldContext context) override;
  kj::Promise<void> setRings(SetRingsContext context) override;
  kj::Promise<void> ringRounds(RingRoundsContext context) override;
  kj::Promise<void> send(SendContext context) override;
  kj::Promise<void> openRing(OpenRingContext context) override;
  kj::Promise<void> abortReduce(AbortReduceContext context) override;
  kj::Promise<void> benchAllReduce(BenchAllReduceContext context) override;
  kj::Promise<void> checkpoints(CheckpointsContext context) override;
  kj::Promise<void> storeCheckpoint(StoreCheckpointContext context) override;
  kj::Promise<void> fetchCheckpoint(FetchCheckpointContext context) override;

 private:
  wire::StreamSlot open_stream(const std::string& what);
  // Runs `call`, logging the reason it throws (a refusal) once, with the peer and `method`.
  template <typename Call>
  kj::Promise<void> forward(const char* method, Call&& call);

  NodeService& service_;
  std::string peer_;
  std::string peer_host_;
};

}  // namespace ravnest::daemon
