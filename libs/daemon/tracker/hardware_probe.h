// What a daemon registers with a tracker (docs/tracker.md): its host measured at start, not what
// its owner declares. Memory it may use: the smallest of its memory_limit, its cgroup's limit and
// MemAvailable (a memory_limit above what the host has is logged and the measured figure wins);
// the total memory of its compute device when that is a CUDA device (no GPU otherwise: a CPU
// daemon creates no CUDA context to count cards it will not use); a compute figure, float32
// matrix products on that device for about `compute_seconds`; the addresses it listens at (a
// wildcard listen: every IPv4 address of its interfaces but loopback, else 127.0.0.1). Bandwidth
// is measured later, to the tracker itself (TrackerLink's probe).
//
// Called on the daemon's main thread before it serves; blocks for about compute_seconds.
#pragma once

#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "libs/tracker/membership.h"

namespace ravnest::daemon {

// The registration of node `name` listening on `listen_host`:`port`.
tracker::Registration measure_registration(const std::string& name,
                                           const std::string& listen_host, unsigned port,
                                           int64_t memory_limit, const c10::Device& device,
                                           double compute_seconds = 0.2);

}  // namespace ravnest::daemon
