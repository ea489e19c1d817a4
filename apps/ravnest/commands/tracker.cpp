// ravnest tracker: the long-running service daemons register with and heartbeat to, and
// requesters read the live pool from (libs/tracker/tracker_service.h, docs/tracker.md;
// packaging/ravnest-tracker.service runs it under systemd).
#include <memory>

#include "apps/ravnest/commands/commands.h"
#include "libs/tracker/tracker_service.h"

namespace ravnest::cli {

Command add_tracker(CLI::App& app) {
  auto o = std::make_shared<tracker::TrackerOptions>();
  o->listen = "0.0.0.0:8090";
  o->state_dir = "/var/lib/ravnest-tracker";
  auto* cmd = app.add_subcommand(
      "tracker", "Serve the live pool: daemons (ravnestd --tracker) register what they measured "
                 "and heartbeat; `pool/status/clusterize --tracker` read it");
  cmd->add_option("--listen", o->listen, "HOST:PORT to serve on")->capture_default_str();
  cmd->add_option("--state-dir", o->state_dir,
                  "where the pool is kept (tracker-state.json), so that a restart loses nothing")
      ->capture_default_str();
  cmd->add_option("--secret-file", o->secret_file,
                  "the shared secret the daemons and requesters hold (TLS and the gate)");
  cmd->add_flag("--insecure", o->insecure, "plain TCP instead of TLS (benchmarks only)");
  cmd->add_option("--offer-relay", o->offer_relay,
                  "HOST:PORT to relay on for daemons behind NAT (ravnestd --relay; docs/relay.md)");
  cmd->add_option("--heartbeat-seconds", o->bounds.heartbeat_seconds,
                  "how often daemons are told to heartbeat")
      ->capture_default_str();
  cmd->add_option("--expiry-seconds", o->bounds.expiry_seconds,
                  "a node without a heartbeat for this long leaves the pool")
      ->capture_default_str();
  cmd->add_option("--max-nodes", o->bounds.max_members, "registrations kept in all")
      ->capture_default_str();
  cmd->add_option("--max-nodes-per-host", o->bounds.max_per_host,
                  "registrations kept from one host")
      ->capture_default_str();
  cmd->add_option("--log-level", o->log_level, "trace, debug, info, warn, error")
      ->capture_default_str();
  return {cmd, [o] { return tracker::run_tracker(*o); }};
}

}  // namespace ravnest::cli
