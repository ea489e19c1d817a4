// Membership's values <-> the tracker's capnp messages (schemas/tracker.capnp): one codec, used
// by the tracker, the daemons and the requester. Pure conversions; any thread.
//
// decode_registration takes any message (the tracker checks it: register_member); decode_pool
// throws wire::WireError, one line, for a pool no tracker could have answered (below).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "libs/tracker/membership.h"
#include "libs/wire/wire_error.h"
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

// The live pool as the requester reads it (pool()'s results).
struct PoolSnapshot {
  Epoch epoch;
  double expiry_seconds = 0;
  std::vector<PoolMember> members;  // sorted by name
};
// Throws WireError "pool member I: WHY" for a member the tracker could not have admitted
// (registration_problem) or a name listed twice: what the requester does with the pool
// (members_of, pool_json, elastic_choice) relies on both.
PoolSnapshot decode_pool(schema::Tracker::PoolResults::Reader in);

// The members as node_configs.json (tracker_state.h's pool_json).
std::string pool_file_json(const PoolSnapshot& pool);

// The snapshot's members as the membership's plain data (what elastic_choice and pool_json
// take), by name; last_heartbeat is left 0 (the snapshot counts seconds since it instead).
std::map<std::string, Member> members_of(const PoolSnapshot& pool);

}  // namespace ravnest::tracker
