// The tracker's pool as files: its state file (what a restart reads back, so that it loses
// nothing) and the pool as Ravnest's node_configs.json (what `ravnest pool --tracker` writes and
// clusterize plans from). Pure C++ and nlohmann-json; reading and writing files is the caller's
// (base::write_file_atomically).
//
// The state file, <state dir>/tracker-state.json:
//   {"format": 1, "epoch": 7, "members": [{"name": "node_0", "addresses": ["10.0.0.2:8080"],
//     "from_host": "10.0.0.2", "registered_at_unix": 1.7e9,
//     "hardware": {"memory_bytes": ..., "memory_source": "MemAvailable", "declared_memory_bytes": 0,
//                  "gpu_memory_bytes": [], "gflops": 41.5, "bandwidth_mbps": 930}}]}
// Heartbeat times are not kept: a tracker that starts again counts every member as heard from at
// its start, so each has a whole expiry to heartbeat again.
//
// The pool file: {"0": {"IP": "<first address>", "benchmarks": {"ram": GB, "bandwidth": Mbps,
//   "gflops": ..., "gpu_memory": GB}, "measured": {...the hardware above, "addresses": [...]}}}.
// ram is the memory the daemon may use in GB (10^9 bytes); gflops and gpu_memory (the largest
// device's) only when measured; "measured" is ours (node_pool.h ignores it).
#pragma once

#include <string>

#include "libs/tracker/membership.h"

namespace ravnest::tracker {

inline constexpr const char* kStateFileName = "tracker-state.json";

std::string state_json(const Membership& membership);

// Reads a state file's text; every member's last heartbeat is `now`. Throws ConfigError
// "<origin>: <field>: ..." (base::JsonReader) when it is not one this tracker wrote.
Membership parse_state(const std::string& text, const std::string& origin, double now);

// The members as node_configs.json (header), keyed by the id of their name node_<id>.
std::string pool_json(const std::map<std::string, Member>& members);

}  // namespace ravnest::tracker
