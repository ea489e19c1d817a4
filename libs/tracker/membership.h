// Membership: the tracker's live pool as plain data, and the only ways it changes: a daemon
// registers, heartbeats, or expires after `expiry_seconds` without a heartbeat. Pure functions on
// plain values, no clock and no I/O: the caller passes `now` (steady seconds), so the tests drive
// time themselves (docs/tracker.md).
//
// Every change of who is in the pool (a join, a leave, an expiry, a registration that changes a
// member's addresses or hardware) raises the pool's Epoch by one; a heartbeat never does. A
// requester that planned at epoch E knows the pool changed when the tracker says E' > E.
//
// Bounds (a tracker must not grow without limit, whoever calls it): at most `max_members` in all
// and `max_per_host` registered from one host (the connection's peer, not what the registration
// claims); a registration beyond either is refused with one line, changing nothing. A name is one
// daemon: registered again from its first address it is updated, from another address it is
// refused while the first one is live, unless the registration comes over the very connection
// that registered the name (the same daemon, moved: its relay changed under --relay auto).
//
// Any thread, as values are; Membership itself is not synchronized (the tracker's event loop owns
// it).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ravnest::tracker {

// The pool's version: raised by every change of membership. Typed so that it is never mixed up
// with a count or a time.
struct Epoch {
  uint64_t value = 0;
  friend bool operator==(Epoch a, Epoch b) { return a.value == b.value; }
  friend bool operator!=(Epoch a, Epoch b) { return a.value != b.value; }
  friend bool operator<(Epoch a, Epoch b) { return a.value < b.value; }
};

// What a daemon measured of its host (libs/daemon/tracker/hardware_probe.h).
struct MeasuredHardware {
  uint64_t memory_bytes = 0;           // what it may use: min(memory_limit, cgroup, MemAvailable)
  std::string memory_source;           // which of them
  uint64_t declared_memory_bytes = 0;  // its memory_limit; 0: none
  std::vector<uint64_t> gpu_memory_bytes;  // per CUDA device it computes on; empty: none
  double gflops = 0;                   // float32 matmul on its compute device
  double bandwidth_mbps = 0;           // its upload to the tracker
  bool operator==(const MeasuredHardware& o) const;
};

struct Registration {
  std::string name;                    // "node_<id>"
  std::vector<std::string> addresses;  // host:port, the first preferred; never empty
  MeasuredHardware hardware;
  std::string relay_offered;           // host:port it relays on for others; "": none
};

struct Member {
  Registration registration;
  std::string from_host;        // the peer host it registered from
  double last_heartbeat = 0;    // steady seconds (the caller's clock)
  double registered_at_unix = 0;  // wall clock, for people
};

struct Bounds {
  double heartbeat_seconds = 10;   // what daemons are told to heartbeat at
  double expiry_seconds = 30;      // a member without a heartbeat for this long leaves
  size_t max_members = 1024;
  size_t max_per_host = 16;
};

// Throws std::invalid_argument naming the field when a bound is not positive or the expiry is
// not above the heartbeat interval.
void check_bounds(const Bounds& bounds);

struct Membership {
  Epoch epoch;
  std::map<std::string, Member> members;  // by name
};

// Why a registration may be refused before it reaches the pool: a name that is not node_<id>,
// no address, an address that is not host:port (or longer than a host name allows), a memory
// source that is not a short printable name (the tracker logs it and writes it to its state
// file), figures out of range. Empty: well formed; its size is then bounded (a few KiB).
std::string registration_problem(const Registration& registration);

struct RegisterOutcome {
  bool accepted = false;
  bool joined = false;   // new to the pool (else an update, or refused)
  bool changed = false;  // the epoch was raised
  bool moved = false;    // a live member's first address changed (same_session)
  std::string refusal;   // one line, when not accepted
};

// Registers (or updates) `registration` from `from_host` at `now`. Expired members are not
// removed here (call expire first): a live name from another address is refused, unless
// `same_session` (the caller's word: it comes over the connection whose registration of this name
// was accepted last), when the member takes its new addresses (`moved`).
RegisterOutcome register_member(Membership& membership, const Registration& registration,
                                const std::string& from_host, double now, double now_unix,
                                const Bounds& bounds, bool same_session = false);

// A heartbeat of `name` at `now`: true when it is a member (its time renewed), false when the
// tracker holds no such member (the daemon registers again). Never changes the epoch.
bool heartbeat(Membership& membership, const std::string& name, double now);

// Removes every member whose last heartbeat is `expiry_seconds` or more before `now`; returns
// their names (the epoch is raised once when any left).
std::vector<std::string> expire(Membership& membership, double now, const Bounds& bounds);

// Removes `name` (a daemon leaving); false when it was not a member.
bool leave(Membership& membership, const std::string& name);

// A token bucket: `burst` calls at once, then `per_second`. For a connection's calls (a heartbeat
// storm is answered "refused: too many calls" rather than served).
struct RateLimit {
  double burst = 10;
  double per_second = 2;
  double tokens = -1;     // -1: full at the first take
  double updated_at = 0;
  // Takes one token at `now` (steady seconds); false when none is left.
  bool take(double now);
};

}  // namespace ravnest::tracker
