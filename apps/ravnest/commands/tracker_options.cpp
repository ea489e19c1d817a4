#include "apps/ravnest/commands/tracker_options.h"

#include <sstream>

namespace ravnest::cli {

namespace {

// A number as CLI11 reads it back exactly (17 significant digits for a double).
template <typename T>
std::string exact(T value) {
  std::ostringstream out;
  out.precision(17);
  out << value;
  return out.str();
}

}  // namespace

tracker::TrackerOptions default_tracker_options() {
  tracker::TrackerOptions o;
  o.listen = "0.0.0.0:8090";
  o.state_dir = "/var/lib/ravnest-tracker";
  return o;
}

void add_tracker_options(CLI::App& cmd, tracker::TrackerOptions& o) {
  cmd.add_option("--listen", o.listen, "HOST:PORT to serve on")->capture_default_str();
  cmd.add_option("--state-dir", o.state_dir,
                 "where the pool is kept (tracker-state.json), so that a restart loses nothing")
      ->capture_default_str();
  cmd.add_option("--secret-file", o.secret_file,
                 "the shared secret the daemons and requesters hold (TLS and the gate)");
  cmd.add_flag("--insecure", o.insecure, "plain TCP instead of TLS (benchmarks only)");
  cmd.add_option("--offer-relay", o.offer_relay,
                 "HOST:PORT to relay on for daemons behind NAT (ravnestd --relay; docs/relay.md)");
  cmd.add_option("--heartbeat-seconds", o.bounds.heartbeat_seconds,
                 "how often daemons are told to heartbeat")
      ->capture_default_str();
  cmd.add_option("--expiry-seconds", o.bounds.expiry_seconds,
                 "a node without a heartbeat for this long leaves the pool")
      ->capture_default_str();
  cmd.add_option("--max-nodes", o.bounds.max_members, "registrations kept in all")
      ->capture_default_str();
  cmd.add_option("--max-nodes-per-host", o.bounds.max_per_host,
                 "registrations kept from one host")
      ->capture_default_str();
  cmd.add_option("--log-level", o.log_level, "trace, debug, info, warn, error")
      ->capture_default_str();
}

std::vector<std::string> tracker_arguments(const tracker::TrackerOptions& o) {
  std::vector<std::string> args = {"--listen", o.listen, "--state-dir", o.state_dir,
                                   "--heartbeat-seconds", exact(o.bounds.heartbeat_seconds),
                                   "--expiry-seconds", exact(o.bounds.expiry_seconds),
                                   "--max-nodes", exact(o.bounds.max_members),
                                   "--max-nodes-per-host", exact(o.bounds.max_per_host),
                                   "--log-level", o.log_level};
  if (!o.secret_file.empty()) args.insert(args.end(), {"--secret-file", o.secret_file});
  if (o.insecure) args.push_back("--insecure");
  if (!o.offer_relay.empty()) args.insert(args.end(), {"--offer-relay", o.offer_relay});
  return args;
}

}  // namespace ravnest::cli
