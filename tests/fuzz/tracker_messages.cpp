// Fuzz target: the Cap'n Proto messages of providers finding each other, as their receivers decode
// them: a registration as the tracker reads it (tracker_codec.h's decode_registration, then the
// membership's checks and register_member), the pool and a dial-back's answer as a requester or
// a daemon reads them (decode_member, dial_back.h's relay_to_hold), and a requester's new ring
// membership as a daemon reads it (membership_codec.h: setRings' views, ringRounds' answer).
//
// Input: one byte choosing the message (Message below, modulo their number), then the message as
// Cap'n Proto's standard serialization, read with bounded ReaderOptions as a connection would
// (tests/fuzz/make_seeds.cpp writes one of each). Accepted errors: kj::Exception (capnp cannot
// read it, or over the limits) and wire::WireError, one line. A registration the tracker accepts
// must read back the same after its encoding, and the membership must stay within its bounds.
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "libs/tracker/dial_back.h"
#include "libs/tracker/membership.h"
#include "libs/tracker/tracker_codec.h"
#include "libs/wire/membership_codec.h"
#include "libs/wire/wire_error.h"
#include "schemas/ravnest.capnp.h"
#include "schemas/tracker.capnp.h"
#include "tests/fuzz/fuzz_capnp.h"
#include "tests/fuzz/fuzz_support.h"

using namespace ravnest;

namespace {

// The messages, by the first byte of the input.
enum Message : uint8_t {
  kRegister,           // Tracker.register params (tracker)
  kPoolResults,        // Tracker.pool results (requester)
  kDialBackResults,    // Tracker.dialBack results (daemon, --relay auto)
  kSetRings,           // Node.setRings params (daemon)
  kRingRoundsResults,  // Node.ringRounds results (requester)
  kMessageCount
};

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "tracker messages: %s\n", what);
  std::abort();
}

// The tracker's membership across inputs, with small bounds: full, per host, expiring.
tracker::Membership& membership() {
  static tracker::Membership m;
  return m;
}

tracker::Bounds bounds() {
  tracker::Bounds b;
  b.heartbeat_seconds = 1;
  b.expiry_seconds = 3;
  b.max_members = 8;
  b.max_per_host = 3;
  return b;
}

void registered(schema::Registration::Reader reader) {
  const tracker::Registration r = tracker::decode_registration(reader);
  static double now = 0;
  now += 1;
  const char* hosts[] = {"10.0.0.1", "10.0.0.2", "::1"};
  auto& m = membership();
  (void)tracker::expire(m, now, bounds());
  const auto outcome = tracker::register_member(m, r, hosts[static_cast<int>(now) % 3], now,
                                                1.7e9, bounds());
  if (!outcome.accepted) {
    if (outcome.refusal.rfind("refused: ", 0) != 0) broken("a refusal that does not say so");
    fuzz::check_one_line(outcome.refusal.c_str());
    return;
  }
  if (!tracker::registration_problem(r).empty()) broken("a registration accepted with a problem");
  if (m.members.size() > bounds().max_members) broken("the pool past its bound");
  capnp::MallocMessageBuilder message;
  tracker::encode_registration(r, message.initRoot<schema::Registration>());
  const auto back = tracker::decode_registration(message.getRoot<schema::Registration>().asReader());
  if (back.name != r.name || back.addresses != r.addresses || !(back.hardware == r.hardware) ||
      back.relay_offered != r.relay_offered) {
    broken("a registration that does not read back");
  }
}

void decode(Message which, capnp::MessageReader& message) {
  switch (which) {
    case kRegister:
      registered(message.getRoot<schema::Tracker::RegisterParams>().getRegistration());
      break;
    case kPoolResults: {
      auto results = message.getRoot<schema::Tracker::PoolResults>();
      (void)results.getEpoch();
      for (auto member : results.getMembers()) (void)tracker::decode_member(member);
      break;
    }
    case kDialBackResults: {
      auto results = message.getRoot<schema::Tracker::DialBackResults>();
      tracker::DialBack answer;
      answer.reached = results.getReached();
      answer.why = results.getWhy();
      for (auto relay : results.getRelays()) answer.relays.emplace_back(relay);
      for (const char* tracker_address : {"10.0.0.9:8600", "[fd00::9]:8600"}) {
        if (auto relay = tracker::relay_to_hold(answer, tracker_address)) {
          if (relay->empty() || relay->find_first_of(" \n") != std::string::npos) {
            broken("a relay to hold that is no address");
          }
        }
      }
      break;
    }
    case kSetRings: {
      auto params = message.getRoot<schema::Node::SetRingsParams>();
      for (auto view : params.getViews()) {
        const auto decoded = wire::decode_ring_view(view);
        if (decoded.ring.size < 1) broken("a view of a ring without members");
        if (decoded.ring.position < 0 || decoded.ring.position >= decoded.ring.size) {
          broken("a view whose position is outside its ring");
        }
      }
      break;
    }
    case kRingRoundsResults:
      (void)wire::decode_completed_rounds(
          message.getRoot<schema::Node::RingRoundsResults>().getRings());
      break;
    case kMessageCount:
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto which = static_cast<Message>(data[0] % kMessageCount);
  auto words = fuzz::words_of(data + 1, size - 1);
  try {
    capnp::FlatArrayMessageReader message(words, fuzz::reader_options());
    decode(which, message);
  } catch (const kj::Exception&) {
  } catch (const wire::WireError& e) {
    fuzz::check_one_line(e.what());
  }
  return 0;
}
