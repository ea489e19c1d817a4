// Telling systemd how the daemon is doing (Type=notify units): a thin wrapper over sd_notify(3).
// Each call is a no-op when NOTIFY_SOCKET is unset (not started by systemd), and never throws:
// a failure to notify must not stop the daemon.
#pragma once

#include <string>

namespace ravnest::daemon {

void notify_ready();                             // READY=1: startup finished, serving
void notify_stopping();                          // STOPPING=1: shutting down
void notify_status(const std::string& status);   // STATUS=<one line>, shown by systemctl status

// Sends `state` (newline-separated VAR=value assignments) as is. Returns true when a message
// was sent, false when NOTIFY_SOCKET is unset or sending failed.
bool notify_state(const std::string& state);

}  // namespace ravnest::daemon
