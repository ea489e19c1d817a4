// DaemonConfig: how one ravnestd process runs, read from a small TOML file (by default
// /etc/ravnest/ravnestd.toml; configs/ravnestd.toml is the documented example). Command-line
// flags override the file: the app parses both and calls merge().
//
//   node = "node_3"                 # which node of the plan this daemon serves
//   listen = "0.0.0.0:8083"         # host:port; empty = the node's address in its metadata
//   data_dir = "/var/lib/ravnest"   # plan, checkpoints, trained output
//   log_level = "info"              # trace, debug, info, warn, error, critical, off
//   log_file = ""                   # empty = stderr (the journal under systemd)
//   secret_file = "/etc/ravnest/secret"
//   tls_cert = ""                   # the daemon's own certificate and key, both or neither: a pool
//   tls_key = ""                    #   file can then pin it (docs/security.md)
//   threads = 0                     # LibTorch's intra-op threads; 0 = the cores divided among
//                                   #   the plan's daemons on this host (docs/daemon.md#threads)
//   device = "cpu"                  # where stages compute: cpu, cuda or cuda:N (docs/daemon.md#device)
//   shared_memory = true            # ring segments to daemons on this host through shared memory
//   memory_limit = "600MiB"         # this daemon's memory budget: bytes, or a size with a unit
//                                   #   (byte_size.h); absent = the cgroup's limit or MemTotal
//                                   #   (docs/daemon.md#memory)
//   tracker = ""                    # host:port of a tracker to register with and heartbeat to
//                                   #   (docs/tracker.md); empty = none
//   relay = ""                      # host:port of a relay: this daemon is behind NAT, accepts no
//                                   #   connection itself, and is reached at the relay's host on
//                                   #   its listen port (docs/relay.md); empty = listens itself;
//                                   #   "auto" (with tracker) = the tracker dials it back, and
//                                   #   names a relay when it cannot (docs/relay.md#auto)
//   offer_relay = ""                # host:port to relay on for daemons behind NAT; empty = none
//   [limits]                        # what a peer may make the daemon hold (daemon_limits.h)
//   idle_seconds = 600
//
// `insecure` (TLS off, for benchmarks only: docs/security.md) is a flag, --insecure, and never a
// key of the file: a service's configuration cannot turn TLS off.
//
// Every key is optional in the file; unknown keys are errors (a typo must not silently fall back
// to a default). Errors are ConfigError, one line naming the file and the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "libs/config/daemon/daemon_limits.h"

namespace ravnest::config {

// `relay = "auto"`: behind a relay only if the tracker cannot dial this daemon back.
inline constexpr const char* kRelayAuto = "auto";

struct DaemonConfig {
  std::string node;                         // "node_<id>"; required once file and flags merge
  std::string listen;                       // "host:port"; empty = from the node metadata
  std::string data_dir = "/var/lib/ravnest";
  std::string log_level = "info";
  std::string log_file;                     // empty = stderr
  std::string secret_file;                  // empty = no shared secret
  std::string tls_cert;                     // PEM; empty = only the secret's certificate
  std::string tls_key;                      // PEM, unencrypted; with tls_cert
  bool insecure = false;                    // plain TCP instead of TLS (--insecure only)
  int threads = 0;                          // intra-op threads; 0 = automatic
  std::string device = "cpu";               // "cpu", "cuda", "cuda:N" (parse_device)
  bool shared_memory = true;                // rings to daemons on this host (shared_segments.h)
  int64_t memory_limit = 0;                 // bytes; 0 = none (memory_budget.h)
  std::string tracker;                      // "host:port"; empty = no tracker
  std::string relay;                        // "host:port", "auto" (kRelayAuto); empty = not
                                            // behind a relay
  std::string offer_relay;                  // "host:port"; empty = relays for no one
  DaemonLimits limits;                      // [limits]; not overridden by flags
};

// Values given on the command line; unset ones keep the file's (or the default) value.
struct DaemonConfigOverrides {
  std::optional<std::string> node;
  std::optional<std::string> listen;
  std::optional<std::string> data_dir;
  std::optional<std::string> log_level;
  std::optional<std::string> log_file;
  std::optional<std::string> secret_file;
  std::optional<std::string> tls_cert;
  std::optional<std::string> tls_key;
  bool insecure = false;
  std::optional<int> threads;
  std::optional<std::string> device;
  bool no_shared_memory = false;  // --no-shared-memory
  std::optional<int64_t> memory_limit;  // --memory-limit, read by parse_memory_limit
  std::optional<std::string> tracker;   // --tracker
  std::optional<std::string> relay;     // --relay
  std::optional<std::string> offer_relay;  // --offer-relay
};

// A device's name as the config writes it: "cpu", "cuda" (the current CUDA device) or "cuda:N".
struct DeviceName {
  bool cuda = false;
  int index = -1;  // cuda:N; -1 otherwise
};
std::optional<DeviceName> parse_device(const std::string& text);  // nullopt: not one of those

constexpr int kMaxThreads = 1024;

// A memory_limit as the file or the flag gives it: a whole number of bytes, or a size with a unit
// (parse_byte_size). Throws ConfigError "<where>: ..." for zero, a negative number, garbage, an
// ambiguous unit or more than INT64_MAX bytes; `where` names the file and key
// ("/etc/ravnest/ravnestd.toml: memory_limit") or the flag ("--memory-limit").
int64_t parse_memory_limit(const std::string& text, const std::string& where);

// Reads and checks the file (each present value is checked as validate_daemon_config does,
// except that `node` may be absent; what values need of each other -- relay = "auto" and a
// tracker, not relay and offer_relay both -- is validate_daemon_config's, once flags are in).
DaemonConfig load_daemon_config(const std::string& toml_path);
DaemonConfig parse_daemon_config(const std::string& text, const std::string& origin);

// `flags` over `file`. The result is not validated: call validate_daemon_config on it.
DaemonConfig merge(DaemonConfig file, const DaemonConfigOverrides& flags);

// Throws ConfigError "<origin>: <field>: ..." for a missing node, a malformed listen, tracker,
// relay or offer_relay address, both relay and offer_relay, an unknown log level, an empty data_dir or a device that is not cpu, cuda or cuda:N. `origin` names where the values came from, e.g.
// "/etc/ravnest/ravnestd.toml and the command line".
void validate_daemon_config(const DaemonConfig& config, const std::string& origin);

// The log levels accepted, as spdlog spells them.
bool is_log_level(const std::string& level);

}  // namespace ravnest::config
