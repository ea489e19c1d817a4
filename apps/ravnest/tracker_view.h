// A tracker's live pool drawn for people: `ravnest status --tracker`'s table and the dashboard's
// "tracker" section (docs/tracker.md). Pure: from the pool as read (tracker_client.h).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "libs/tracker/tracker_client.h"

namespace ravnest::cli {

// One line a node: name, address, memory, GPUs, GFLOP/s, Mbit/s, seconds since its heartbeat;
// then how many are live, the epoch and the expiry.
std::string tracker_pool_table(const tracker::PoolSnapshot& pool);

// The dashboard's "tracker" (dashboard_server.h): {"address", "epoch", "expiry_seconds",
// "nodes": [{"name", "address", "memory_bytes", "memory_source", "gpu_memory_bytes", "gflops",
// "bandwidth_mbps", "seconds_since_heartbeat"}]}.
nlohmann::json tracker_pool_state(const tracker::PoolSnapshot& pool, const std::string& address);

}  // namespace ravnest::cli
