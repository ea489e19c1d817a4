// The live pool a tracker holds, as the requester's subcommands use it (`--tracker HOST:PORT` on
// pool, status and clusterize; docs/tracker.md): read over the daemons' TLS and secret
// (Connection's --secret-file, --insecure), written as node_configs.json; tracker_view.h shows it.
#pragma once

#include <string>

#include "apps/ravnest/commands/connection.h"
#include "libs/tracker/tracker_client.h"

namespace ravnest::cli {

// The tracker's pool; throws one line "tracker HOST:PORT: ..." when it cannot be read.
tracker::PoolSnapshot read_tracker_pool(const std::string& address, const Connection& connection);

// Writes the pool as node_configs.json to `path` atomically (its folder made if missing); throws
// naming the tracker when the pool is empty (nothing to plan on), leaving `path` as it was.
void write_tracker_pool(const tracker::PoolSnapshot& pool, const std::string& address,
                        const std::string& path);

}  // namespace ravnest::cli
