// Fuzz target: the tracker's calls (schemas/tracker.capnp), decoded as the tracker decodes them
// (libs/tracker/tracker_service.cpp: register, heartbeat, leave, probe) and applied to one
// tracker's membership that lives across inputs, as `ravnest tracker`'s does; and pool()'s results
// decoded as a requester decodes them (tracker_codec.h's decode_pool, then pool_file_json, as
// `ravnest pool --tracker` and `train --elastic` do), and dialBack's answer as a daemon with
// `--relay auto` reads it (dial_back.h's relay_to_hold: what it holds its port on is an address).
//
// Input: one byte choosing the message (Message below, modulo their number; the byte divided by
// their number, modulo 8, is the host it comes from), then the message as Cap'n Proto's standard
// serialization, read with bounded ReaderOptions as a connection would.
//
// Accepted errors: kj::Exception (a message capnp cannot read), wire::WireError from decode_pool,
// one line. A refused registration is one line and changes nothing. What must hold: the pool
// stays within its bounds (members in all and per host) and each member's entry within a few
// KiB, whatever registers (the tracker's memory is bounded); what the tracker logs of a member
// is printable; the state file the tracker writes after a change reads back as the same pool; a
// pool a requester accepts converts to node_configs.json; the relay a daemon takes is an address,
// and once it is lost the daemon never takes it again. Anything else is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "libs/base/address.h"
#include "libs/tracker/dial_back.h"
#include "libs/tracker/membership.h"
#include "libs/tracker/tracker_codec.h"
#include "libs/tracker/tracker_state.h"
#include "schemas/tracker.capnp.h"
#include "tests/fuzz/fuzz_capnp.h"
#include "tests/fuzz/fuzz_support.h"

using namespace ravnest;
using schema::Tracker;

namespace {

// The messages, by the first byte of the input (tests/fuzz/make_seeds.cpp writes one of each).
enum Message : uint8_t {
  kRegister,     // Tracker.register params
  kHeartbeat,    // Tracker.heartbeat params
  kLeave,        // Tracker.leave params
  kProbe,        // Tracker.probe params
  kPoolResults,  // Tracker.pool results (requester)
  kDialBackResults,  // Tracker.dialBack results (a daemon with --relay auto)
  kMessageCount
};

// Small bounds, so that inputs reach them.
tracker::Bounds bounds() {
  tracker::Bounds b;
  b.heartbeat_seconds = 10;
  b.expiry_seconds = 30;
  b.max_members = 12;
  b.max_per_host = 4;
  return b;
}

// One member's entry in the state file: a registration that passed registration_problem is
// bounded (16 addresses of at most 261 bytes, 64 GPUs, a short memory source).
constexpr size_t kMaxMemberBytes = 8 * 1024;

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "the tracker breaks: %s\n", what);
  std::abort();
}

struct FuzzedTracker {
  tracker::Membership membership;
  double now = 0;  // steady seconds: one more each input, so that members expire
};

FuzzedTracker& fuzzed_tracker() {
  static FuzzedTracker t;
  return t;
}

void check_pool(const tracker::Membership& membership) {
  const auto b = bounds();
  if (membership.members.size() > b.max_members) broken("more members than max_members");
  std::map<std::string, size_t> per_host;
  for (const auto& [name, m] : membership.members) {
    if (name != m.registration.name) broken("a member under another name");
    if (!tracker::registration_problem(m.registration).empty()) broken("a malformed member");
    // The tracker logs these as they came (tracker_service.cpp: "node_3 joined from ...").
    for (const std::string* text : {&m.registration.addresses.front(),
                                    &m.registration.hardware.memory_source}) {
      for (unsigned char c : *text) {
        if (c < 0x20 || c > 0x7e) broken("a member whose log line shows bytes as they came");
      }
    }
    if (++per_host[m.from_host] > b.max_per_host) broken("more members of a host than max_per_host");
  }
}

// What TrackerCore::save writes, read back as a restarted tracker reads it.
void check_state_file(const tracker::Membership& membership) {
  for (const auto& [name, m] : membership.members) {
    if (tracker::state_json(tracker::Membership{{}, {{name, m}}}).size() > kMaxMemberBytes) {
      broken("a member's entry above 8 KiB");
    }
  }
  const std::string text = tracker::state_json(membership);
  const auto back = tracker::parse_state(text, "tracker-state.json", 0);
  if (back.epoch != membership.epoch) broken("the state file's epoch");
  if (back.members.size() != membership.members.size()) broken("the state file's members");
  for (const auto& [name, m] : membership.members) {
    const auto& again = back.members.at(name);
    if (again.registration.addresses != m.registration.addresses ||
        !(again.registration.hardware == m.registration.hardware) ||
        again.from_host != m.from_host) {
      broken("a member read back differs");
    }
  }
  (void)tracker::pool_json(membership.members);
}

void decode(Message which, const std::string& host, capnp::MessageReader& message) {
  FuzzedTracker& t = fuzzed_tracker();
  t.now += 1;
  switch (which) {
    case kRegister: {
      const auto registration =
          tracker::decode_registration(message.getRoot<Tracker::RegisterParams>().getRegistration());
      (void)tracker::expire(t.membership, t.now, bounds());
      const tracker::Membership before = t.membership;
      // Every other registration as if over the connection that registered the name last: a
      // live member may move to another address then (a daemon whose relay changed).
      const bool same_session = static_cast<uint64_t>(t.now) % 2 == 0;
      const auto outcome = tracker::register_member(t.membership, registration, host, t.now,
                                                    1.7e9 + t.now, bounds(), same_session);
      if (!outcome.accepted) {
        if (outcome.refusal.rfind("refused: ", 0) != 0) broken("a refusal without \"refused: \"");
        fuzz::check_one_line(outcome.refusal.c_str());
        if (t.membership.epoch != before.epoch || t.membership.members.size() !=
                                                      before.members.size()) {
          broken("a refused registration changed the pool");
        }
      }
      check_pool(t.membership);
      if (outcome.changed) check_state_file(t.membership);
      break;
    }
    case kHeartbeat: {
      const tracker::Epoch epoch = t.membership.epoch;
      (void)tracker::heartbeat(t.membership, message.getRoot<Tracker::HeartbeatParams>().getName(),
                               t.now);
      if (t.membership.epoch != epoch) broken("a heartbeat changed the epoch");
      check_pool(t.membership);
      break;
    }
    case kLeave: {
      const std::string name = message.getRoot<Tracker::LeaveParams>().getName();
      const auto found = t.membership.members.find(name);
      if (found != t.membership.members.end() && found->second.from_host == host) {
        (void)tracker::leave(t.membership, name);
      }
      check_pool(t.membership);
      break;
    }
    case kProbe: {
      (void)message.getRoot<Tracker::ProbeParams>().getPayload().size();
      break;
    }
    case kPoolResults: {
      const auto pool = tracker::decode_pool(message.getRoot<Tracker::PoolResults>());
      (void)tracker::pool_file_json(pool);
      break;
    }
    case kDialBackResults: {
      auto results = message.getRoot<Tracker::DialBackResults>();
      tracker::DialBack answer;
      answer.reached = results.getReached();
      answer.why = results.getWhy();
      for (auto relay : results.getRelays()) answer.relays.emplace_back(relay);
      for (const char* tracker_address : {"10.0.0.9:8600", "[fd00::9]:8600"}) {
        // What the daemon then holds its port on: an address, parsed again as the link does.
        if (auto relay = tracker::relay_to_hold(answer, tracker_address)) {
          if (!base::Address::try_parse(*relay)) broken("a relay to hold that is no address");
          // That one lost: another, never it (daemon.cpp's switch).
          const auto other = tracker::relay_to_hold(answer, tracker_address, *relay);
          if (other && *other == *relay) broken("the lost relay taken again");
          if (other && !base::Address::try_parse(*other)) {
            broken("a relay to hold that is no address");
          }
        }
      }
      break;
    }
    case kMessageCount: break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    ravnest::fuzz::decode_after_first_byte(data, size, [](uint8_t first, capnp::MessageReader& m) {
      decode(static_cast<Message>(first % kMessageCount),
             "10.0.0." + std::to_string(first / kMessageCount % 8), m);
    });
  } catch (const wire::WireError& e) {
    ravnest::fuzz::check_one_line(e.what());
  }
  return 0;
}
