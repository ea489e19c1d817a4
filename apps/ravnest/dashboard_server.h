// `ravnest dashboard`: a local web page (dashboard_page.h) over a small HTTP/1.1 server (Asio,
// on one thread, every connection served as its bytes arrive: one that sends nothing delays no
// other; at most 64 at once, one more is closed at once). GET / serves the page, GET
// /api/state the plan's state as JSON (dashboard_state.h), gathered from the daemons at most
// twice a second, with a tracker's live pool under "tracker" when one is named (docs/tracker.md;
// a tracker that does not answer: {"address", "error"}). Anything else: 404 (405 for another method); a request is at most 8 KiB and
// must arrive within 5 s. No authentication: it listens on loopback unless told otherwise, and
// says so when told. A request whose Host names neither the listen address nor localhost is
// refused (403), so that a web page rebinding its name to this address (DNS rebinding) reads
// nothing.
#pragma once

#include <functional>
#include <string>

namespace ravnest::cli {

struct DashboardOptions {
  std::string plan_dir;
  std::string secret;
  bool insecure = false;
  std::string listen = "127.0.0.1:8650";  // host:port; port 0 picks a free one
  std::function<void(const std::string&)> log;
  std::function<bool()> interrupted;  // polled about ten times a second: true ends the server
  std::string tracker;  // host:port of a tracker whose live pool the page shows; empty: none
};

// Serves until `interrupted` says so. Throws std::runtime_error for an address it cannot listen
// on or a plan it cannot read.
void run_dashboard(const DashboardOptions& options);

}  // namespace ravnest::cli
