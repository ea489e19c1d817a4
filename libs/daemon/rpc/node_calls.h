// The call contexts of schema::Node's methods, by name, for the roles NodeService forwards to
// (the generated Node::Server keeps its own aliases protected).
#pragma once

#include <capnp/capability.h>

#include "schemas/ravnest.capnp.h"

namespace ravnest::daemon {

using PushStageCall =
    capnp::CallContext<schema::Node::PushStageParams, schema::Node::PushStageResults>;
using PushMetadataCall =
    capnp::CallContext<schema::Node::PushMetadataParams, schema::Node::PushMetadataResults>;
using PushFileCall =
    capnp::CallContext<schema::Node::PushFileParams, schema::Node::PushFileResults>;
using LoadJobCall =
    capnp::CallContext<schema::Node::LoadJobParams, schema::Node::LoadJobResults>;
using StartCall =
    capnp::CallContext<schema::Node::StartParams, schema::Node::StartResults>;
using StopCall =
    capnp::CallContext<schema::Node::StopParams, schema::Node::StopResults>;
using StatusCall =
    capnp::CallContext<schema::Node::StatusParams, schema::Node::StatusResults>;
using FetchStageCall =
    capnp::CallContext<schema::Node::FetchStageParams, schema::Node::FetchStageResults>;
using SubscribeCall =
    capnp::CallContext<schema::Node::SubscribeParams, schema::Node::SubscribeResults>;
using FetchLossesCall =
    capnp::CallContext<schema::Node::FetchLossesParams, schema::Node::FetchLossesResults>;
using FetchPredictionsCall = capnp::CallContext<schema::Node::FetchPredictionsParams,
                                                schema::Node::FetchPredictionsResults>;
using SendCall =
    capnp::CallContext<schema::Node::SendParams, schema::Node::SendResults>;
using OpenRingCall =
    capnp::CallContext<schema::Node::OpenRingParams, schema::Node::OpenRingResults>;
using AbortReduceCall =
    capnp::CallContext<schema::Node::AbortReduceParams, schema::Node::AbortReduceResults>;
using BenchAllReduceCall =
    capnp::CallContext<schema::Node::BenchAllReduceParams, schema::Node::BenchAllReduceResults>;
using HoldCall = capnp::CallContext<schema::Node::HoldParams, schema::Node::HoldResults>;
using SetRingsCall =
    capnp::CallContext<schema::Node::SetRingsParams, schema::Node::SetRingsResults>;
using RingRoundsCall =
    capnp::CallContext<schema::Node::RingRoundsParams, schema::Node::RingRoundsResults>;
using CheckpointsCall =
    capnp::CallContext<schema::Node::CheckpointsParams, schema::Node::CheckpointsResults>;
using StoreCheckpointCall = capnp::CallContext<schema::Node::StoreCheckpointParams,
                                               schema::Node::StoreCheckpointResults>;
using FetchCheckpointCall = capnp::CallContext<schema::Node::FetchCheckpointParams,
                                               schema::Node::FetchCheckpointResults>;

}  // namespace ravnest::daemon
