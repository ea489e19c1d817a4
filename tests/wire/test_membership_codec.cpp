// Elastic membership's messages through their one codec (libs/wire/membership_codec.h).
#include <catch2/catch.hpp>

#include <capnp/message.h>

#include "libs/wire/membership_codec.h"

using namespace ravnest;

namespace {

membership::RingView some_view() {
  membership::RingView view;
  view.ring.id = 4;
  view.ring.size = 3;
  view.ring.position = 2;
  view.ring.next = {1, 0, "10.0.0.1:7000"};
  view.ring.prev = {9, 1, "10.0.0.9:7000"};
  view.run_from = 17;
  return view;
}

membership::RingView round_trip(const membership::RingView& view) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::RingView>();
  wire::encode_ring_view(view, out);
  return wire::decode_ring_view(out.asReader());
}

}  // namespace

TEST_CASE("membership codec: a ring view round-trips", "[wire][membership]") {
  const membership::RingView view = some_view();
  const membership::RingView back = round_trip(view);
  CHECK(back.ring.id == 4);
  CHECK(back.ring.size == 3);
  CHECK(back.ring.position == 2);
  CHECK(back.ring.next.node == 1);
  CHECK(back.ring.next.cluster == 0);
  CHECK(back.ring.next.address == "10.0.0.1:7000");
  CHECK(back.ring.prev.node == 9);
  CHECK(back.ring.prev.cluster == 1);
  CHECK(back.ring.prev.address == "10.0.0.9:7000");
  CHECK(back.ring.parameters.empty());
  REQUIRE(back.run_from.has_value());
  CHECK(*back.run_from == 17);
  // Without a round to run from: none comes back (not round 0).
  membership::RingView unknown = view;
  unknown.run_from.reset();
  CHECK_FALSE(round_trip(unknown).run_from.has_value());
  // Round 0 known is not "unknown".
  membership::RingView zero = view;
  zero.run_from = 0;
  CHECK(round_trip(zero).run_from == std::optional<uint64_t>(0));
}

TEST_CASE("membership codec: a malformed ring view is refused with one line",
          "[wire][membership]") {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::RingView>();
  wire::encode_ring_view(some_view(), out);
  out.setPosition(3);
  CHECK_THROWS_WITH(wire::decode_ring_view(out.asReader()),
                    "ring 4: position 3 outside its 3 members");
  out.setPosition(0);
  out.setSize(0);
  CHECK_THROWS_WITH(wire::decode_ring_view(out.asReader()), "ring 4: a view of 0 members");
  out.setSize(3);
  out.setPrevAddress("");
  CHECK_THROWS_WITH(wire::decode_ring_view(out.asReader()),
                    "ring 4: a neighbour without an address in a ring of 3 members");
  out.setPrevAddress("10.0.0.9:7000");
  out.setRing(0x80000000u);
  CHECK_THROWS_AS(wire::decode_ring_view(out.asReader()), wire::WireError);
}

TEST_CASE("membership codec: completed rounds round-trip, a ring twice is refused",
          "[wire][membership]") {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::Node::RingRoundsResults>();
  const std::map<int, uint64_t> completed{{0, 5}, {3, 4}};
  auto list = out.initRings(static_cast<unsigned>(completed.size()));
  wire::encode_completed_rounds(completed, list);
  CHECK(wire::decode_completed_rounds(out.asReader().getRings()) == completed);
  list[1].setRing(0);
  CHECK_THROWS_WITH(wire::decode_completed_rounds(out.asReader().getRings()),
                    "ring 0: its completed rounds listed twice");
}
