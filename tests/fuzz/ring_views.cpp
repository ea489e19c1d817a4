// Fuzz target: elastic membership's messages (libs/wire/membership_codec.h), decoded as a daemon
// decodes Node.setRings' views (libs/daemon/membership/membership_service.cpp) and as a
// requester decodes Node.ringRounds' results (libs/requester/membership/ring_coordination.cpp).
//
// Input: one byte choosing the message (Message below, modulo their number), then the message as
// Cap'n Proto's standard serialization, read with bounded ReaderOptions as a connection would.
//
// Accepted errors: kj::Exception (a message capnp cannot read), wire::WireError, one line. A view
// that is accepted holds what the ring's code relies on without checking again (a position
// inside a ring of at least one member, neighbours with addresses in a ring of several) and
// encodes back to itself; accepted rounds are one entry a ring and encode back to themselves.
#include <capnp/message.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "libs/wire/membership_codec.h"
#include "schemas/ravnest.capnp.h"
#include "tests/fuzz/fuzz_capnp.h"
#include "tests/fuzz/fuzz_support.h"

using namespace ravnest;

namespace {

// The messages, by the first byte of the input (tests/fuzz/make_seeds.cpp writes one of each).
enum Message : uint8_t {
  kSetRings,           // Node.setRings params (daemon)
  kRingRoundsResults,  // Node.ringRounds results (requester)
  kMessageCount
};

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "an accepted message breaks: %s\n", what);
  std::abort();
}

bool same(const config::RingPeer& a, const config::RingPeer& b) {
  return a.node == b.node && a.cluster == b.cluster && a.address == b.address;
}

void check_view(const membership::RingView& view) {
  const config::RingMembership& ring = view.ring;
  if (ring.id < 0) broken("a negative ring id");
  if (ring.size < 1) broken("a ring without members");
  if (ring.position < 0 || ring.position >= ring.size) broken("a position outside the ring");
  if (ring.size > 1 && (ring.next.address.empty() || ring.prev.address.empty())) {
    broken("a neighbour without an address");
  }
  if (!ring.parameters.empty()) broken("parameters in a view");
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::RingView>();
  wire::encode_ring_view(view, out);
  const auto again = wire::decode_ring_view(out.asReader());
  if (again.ring.id != ring.id || again.ring.size != ring.size ||
      again.ring.position != ring.position || !same(again.ring.next, ring.next) ||
      !same(again.ring.prev, ring.prev) || again.run_from != view.run_from) {
    broken("a view's round trip");
  }
}

void decode(Message which, capnp::MessageReader& message) {
  switch (which) {
    case kSetRings: {
      auto p = message.getRoot<schema::Node::SetRingsParams>();
      (void)p.getJobId();
      (void)p.getEpoch();
      for (auto v : p.getViews()) check_view(wire::decode_ring_view(v));
      break;
    }
    case kRingRoundsResults: {
      auto rings = message.getRoot<schema::Node::RingRoundsResults>().getRings();
      const std::map<int, uint64_t> completed = wire::decode_completed_rounds(rings);
      if (completed.size() != rings.size()) broken("rounds of a ring lost or made up");
      capnp::MallocMessageBuilder again;
      auto out = again.initRoot<schema::Node::RingRoundsResults>().initRings(
          static_cast<unsigned>(completed.size()));
      wire::encode_completed_rounds(completed, out);
      if (wire::decode_completed_rounds(out.asReader()) != completed) broken("rounds' round trip");
      break;
    }
    case kMessageCount: break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    ravnest::fuzz::decode_after_first_byte(data, size, [](uint8_t first, capnp::MessageReader& m) {
      decode(static_cast<Message>(first % kMessageCount), m);
    });
  } catch (const wire::WireError& e) {
    ravnest::fuzz::check_one_line(e.what());
  }
  return 0;
}
