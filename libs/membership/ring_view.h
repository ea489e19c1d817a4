// RingView: one node's view of one of its cross-cluster rings over a new membership, as the
// requester that follows a job sends it (Node.setRings; docs/faults.md#providers-that-come-and-go):
// the ring's size, the node's position and two neighbours (config::RingMembership without
// parameters: a node keeps its own), and the round the ring runs from over this membership when
// the requester could name one. Its wire form has one codec, libs/wire/membership_codec.h.
// A plain value: any thread.
#pragma once

#include <cstdint>
#include <optional>

#include "libs/config/plan/node_metadata.h"

namespace ravnest::membership {

struct RingView {
  config::RingMembership ring;      // `parameters` empty
  std::optional<uint64_t> run_from;  // none: each member runs the round it is at
};

}  // namespace ravnest::membership
