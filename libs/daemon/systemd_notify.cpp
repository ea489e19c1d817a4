#include "libs/daemon/systemd_notify.h"

#include <cstdlib>

#include <systemd/sd-daemon.h>

namespace ravnest::daemon {

bool notify_state(const std::string& state) {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  if (socket == nullptr || *socket == '\0') return false;
  return sd_notify(/*unset_environment=*/0, state.c_str()) > 0;
}

void notify_ready() { notify_state("READY=1"); }

void notify_stopping() { notify_state("STOPPING=1"); }

void notify_status(const std::string& status) {
  // STATUS is one line: a newline would start another assignment.
  std::string line = status;
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  notify_state("STATUS=" + line);
}

}  // namespace ravnest::daemon
