// How many threads LibTorch's operators may use on a daemon's compute thread (intra-op
// parallelism): the daemon config's `threads`, or, when it is 0 (the default), the machine's
// cores divided among the plan's daemons that share this host, so that several daemons on one
// machine do not oversubscribe it. Which daemons share a host is read from the job's metadata
// (the nodes whose addresses this daemon knows: its cluster, its rings' neighbours, its parameter
// servers; when all those neighbours share this host, every cluster is taken to).
#pragma once

#include <string>

#include "libs/config/plan/node_metadata.h"

namespace ravnest::worker {

// The nodes of `metadata`'s plan (this one included) whose address has this node's host. An
// address "0.0.0.0" or empty shares with nobody but itself.
int daemons_sharing_host(const config::NodeMetadata& metadata);

// `configured` > 0: that. Else cores / sharing, at least 1.
int compute_threads(int configured, int cores, int sharing);

// Sets the intra-op threads of the calling thread's LibTorch operators; returns what it set.
int apply_compute_threads(int configured, const config::NodeMetadata* metadata);

}  // namespace ravnest::worker
