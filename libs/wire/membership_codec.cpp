#include "libs/wire/membership_codec.h"

#include <climits>
#include <string>

namespace ravnest::wire {

namespace {

int ring_id(uint32_t ring) {
  if (ring > static_cast<uint32_t>(INT_MAX)) {
    throw WireError("ring " + std::to_string(ring) + ": a ring id outside an int");
  }
  return static_cast<int>(ring);
}

}  // namespace

void encode_ring_view(const membership::RingView& view, schema::RingView::Builder out) {
  const config::RingMembership& ring = view.ring;
  out.setRing(static_cast<uint32_t>(ring.id));
  out.setSize(static_cast<uint32_t>(ring.size));
  out.setPosition(static_cast<uint32_t>(ring.position));
  out.setNextNode(ring.next.node);
  out.setNextCluster(ring.next.cluster);
  out.setNextAddress(ring.next.address);
  out.setPrevNode(ring.prev.node);
  out.setPrevCluster(ring.prev.cluster);
  out.setPrevAddress(ring.prev.address);
  out.setRunFromKnown(view.run_from.has_value());
  out.setRunFrom(view.run_from.value_or(0));
}

membership::RingView decode_ring_view(schema::RingView::Reader view) {
  membership::RingView out;
  config::RingMembership& ring = out.ring;
  ring.id = ring_id(view.getRing());
  const std::string where = "ring " + std::to_string(ring.id) + ": ";
  if (view.getSize() < 1 || view.getSize() > static_cast<uint32_t>(INT_MAX)) {
    throw WireError(where + "a view of " + std::to_string(view.getSize()) + " members");
  }
  ring.size = static_cast<int>(view.getSize());
  if (view.getPosition() >= view.getSize()) {
    throw WireError(where + "position " + std::to_string(view.getPosition()) + " outside its " +
                    std::to_string(view.getSize()) + " members");
  }
  ring.position = static_cast<int>(view.getPosition());
  ring.next = {view.getNextNode(), view.getNextCluster(), view.getNextAddress()};
  ring.prev = {view.getPrevNode(), view.getPrevCluster(), view.getPrevAddress()};
  if (ring.size > 1 && (ring.next.address.empty() || ring.prev.address.empty())) {
    throw WireError(where + "a neighbour without an address in a ring of " +
                    std::to_string(ring.size) + " members");
  }
  if (view.getRunFromKnown()) out.run_from = view.getRunFrom();
  return out;
}

void encode_completed_rounds(const std::map<int, uint64_t>& completed,
                             capnp::List<schema::RingRound>::Builder out) {
  unsigned i = 0;
  for (const auto& [ring, rounds] : completed) {
    out[i].setRing(static_cast<uint32_t>(ring));
    out[i].setCompleted(rounds);
    ++i;
  }
}

std::map<int, uint64_t> decode_completed_rounds(capnp::List<schema::RingRound>::Reader rounds) {
  std::map<int, uint64_t> out;
  for (auto r : rounds) {
    const int ring = ring_id(r.getRing());
    if (!out.emplace(ring, r.getCompleted()).second) {
      throw WireError("ring " + std::to_string(ring) + ": its completed rounds listed twice");
    }
  }
  return out;
}

}  // namespace ravnest::wire
