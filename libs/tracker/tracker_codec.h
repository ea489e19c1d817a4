// Membership's values <-> the tracker's capnp messages (schemas/tracker.capnp): one codec, used
// by the tracker, the daemons and the requester. Pure conversions; any thread.
#pragma once

#include "libs/tracker/membership.h"
#include "schemas/tracker.capnp.h"

namespace ravnest::tracker {

void encode_registration(const Registration& registration, schema::Registration::Builder out);
Registration decode_registration(schema::Registration::Reader in);

// `seconds_since_heartbeat` as the tracker measures it at the call.
void encode_member(const Member& member, double seconds_since_heartbeat,
                   schema::Member::Builder out);

// A member as the requester reads it from pool().
struct PoolMember {
  Registration registration;
  std::string from_host;
  double seconds_since_heartbeat = 0;
  double registered_at_unix = 0;
};
PoolMember decode_member(schema::Member::Reader in);

}  // namespace ravnest::tracker
