// What the daemon's RpcServer enforces on each connection, from the [limits] of its
// configuration (config::DaemonLimits): the largest message of each kind (by the schema's
// interface ids and method numbers), the times, the number of connections. Pure: no sockets.
#pragma once

#include "libs/config/daemon/daemon_limits.h"
#include "libs/wire/rpc_connection.h"

namespace ravnest::daemon {

// The options of the daemon's server (security and on_refused left for the caller).
wire::RpcServer::Options endpoint_options(const config::DaemonLimits& limits);

}  // namespace ravnest::daemon
