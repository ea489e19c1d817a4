// Daemon: one provider node's process. Runs the RPC endpoint on the calling thread (KJ event
// loop) and the compute on an Asio thread, handles SIGTERM/SIGINT (stop cleanly, exit 0) and
// SIGHUP (reopen the log file), and tells systemd when it is ready and when it stops.
#pragma once

#include "libs/config/daemon/daemon_config.h"

namespace ravnest::daemon {

// Returns the process exit code. Throws std::exception with a one-line reason when it cannot
// start (no listen address, unreadable secret, port taken, ...).
int run_daemon(const config::DaemonConfig& config);

}  // namespace ravnest::daemon
