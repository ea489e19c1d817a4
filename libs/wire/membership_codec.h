// Elastic membership's messages <-> their schema types (schemas/ravnest.capnp): a node's view of
// one ring over a new membership (membership::RingView <-> RingView, as Node.setRings carries
// them) and the rounds each ring completed (ring id -> rounds <-> List(RingRound), as
// Node.ringRounds answers): the one place where their fields are copied. No torch.
//
// Decoding throws WireError, one line naming the ring, for a malformed view: a ring id or node
// outside an int, no member, a position outside the ring, or a neighbour without an address in
// a ring of several members; and for a ring listed twice among the rounds.
#pragma once

#include <cstdint>
#include <map>

#include "libs/membership/ring_view.h"
#include "libs/wire/wire_error.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::wire {

void encode_ring_view(const membership::RingView& view, schema::RingView::Builder out);
membership::RingView decode_ring_view(schema::RingView::Reader view);

// `out`: initialized with completed.size() elements (initRings).
void encode_completed_rounds(const std::map<int, uint64_t>& completed,
                             capnp::List<schema::RingRound>::Builder out);
std::map<int, uint64_t> decode_completed_rounds(capnp::List<schema::RingRound>::Reader rounds);

}  // namespace ravnest::wire
