// ravnestd: serves one provider node of a ravnest plan. Thin: flags and file, then the library.
#include <iostream>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "apps/cli_support/cli_description.h"
#include "apps/cli_support/unknown_argument.h"
#include "libs/torch_support/torch_compat.h"
#include "libs/config/daemon/daemon_config.h"
#include "libs/base/process_memory.h"
#include "libs/daemon/daemon.h"
#include "libs/torch_support/torch_errors.h"
#include "ravnest_version.h"

int main(int argc, char** argv) {
  // Before any allocation worth keeping and before threads (process_memory.h): freed tensors go
  // back to the kernel, so that the resident figures the budget is checked with follow use.
  ravnest::base::return_freed_memory_to_kernel();
  CLI::App app{"ravnestd: serves one provider node of a ravnest plan"};
  app.set_version_flag("--version", "ravnestd " RAVNEST_VERSION " (commit " RAVNEST_COMMIT ", " +
                                        ravnest::torch_support::torch_description() + ")");
  std::string config_file;
  ravnest::config::DaemonConfigOverrides flags;
  std::string node, listen, data_dir, log_level, log_file, secret_file, tls_cert, tls_key;
  app.add_option("--config", config_file, "daemon configuration (TOML), e.g. configs/ravnestd.toml");
  auto* node_opt = app.add_option("--node", node, "node name, e.g. node_3");
  auto* listen_opt = app.add_option("--listen", listen, "host:port (default: from the stage's metadata)");
  auto* data_opt = app.add_option("--data-dir", data_dir, "where received stages and data are kept");
  auto* level_opt = app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  auto* file_opt = app.add_option("--log-file", log_file, "log file (default: stderr)");
  auto* secret_opt = app.add_option("--secret-file", secret_file, "file holding the shared secret");
  auto* cert_opt = app.add_option(
      "--tls-cert", tls_cert, "this node's own TLS certificate (PEM), pinned by the pool file's "
      "\"tls_fingerprint\" (docs/security.md)");
  auto* key_opt = app.add_option("--tls-key", tls_key, "the private key of --tls-cert (PEM)");
  int threads = 0;
  auto* threads_opt = app.add_option(
      "--threads", threads,
      "LibTorch's intra-op threads (default: the cores divided among the plan's daemons on this host)");
  std::string device;
  auto* device_opt = app.add_option(
      "--device", device, "where stages compute: cpu (default), cuda or cuda:N");
  std::string memory_limit;
  auto* memory_opt = app.add_option(
      "--memory-limit", memory_limit,
      "this daemon's memory budget: bytes, or a size such as 600MiB or 1.4GB (default: the "
      "cgroup's limit or the machine's RAM; docs/daemon.md#memory)");
  std::string tracker;
  auto* tracker_opt = app.add_option(
      "--tracker", tracker,
      "HOST:PORT of a tracker (ravnest tracker) to register what this daemon measured with, and "
      "heartbeat to (docs/tracker.md)");
  std::string relay, offer_relay;
  auto* relay_opt = app.add_option(
      "--relay", relay,
      "HOST:PORT of a relay (a daemon started with --offer-relay): this daemon is behind NAT, "
      "listens nowhere, and is reached at the relay's host on its --listen port; or auto (with "
      "--tracker): the tracker dials this daemon back and names a relay if it cannot "
      "(docs/relay.md)");
  auto* offer_relay_opt = app.add_option(
      "--offer-relay", offer_relay,
      "HOST:PORT to relay on for daemons behind NAT (docs/relay.md)");
  app.add_flag("--no-shared-memory", flags.no_shared_memory,
               "ring segments to daemons on this host go through the connection, not shared memory");
  app.add_flag("--insecure", flags.insecure,
               "plain TCP instead of TLS, for benchmarks only (the secret still never travels)");
  if (ravnest::cli::wants_cli_description(argc, argv)) {  // for the man page and completion
    std::cout << ravnest::cli::describe_cli(app).dump(2) << '\n';
    return 0;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0) {
      if (auto message = ravnest::cli::unknown_argument_message("ravnestd", app, argc, argv)) {
        std::cerr << *message << '\n';
        return ravnest::cli::kUnknownArgumentExit;
      }
    }
    return app.exit(e);
  }
  try {
    if (*node_opt) flags.node = node;
    if (*listen_opt) flags.listen = listen;
    if (*data_opt) flags.data_dir = data_dir;
    if (*level_opt) flags.log_level = log_level;
    if (*file_opt) flags.log_file = log_file;
    if (*secret_opt) flags.secret_file = secret_file;
    if (*cert_opt) flags.tls_cert = tls_cert;
    if (*key_opt) flags.tls_key = tls_key;
    if (*threads_opt) flags.threads = threads;
    if (*device_opt) flags.device = device;
    if (*tracker_opt) flags.tracker = tracker;
    if (*relay_opt) flags.relay = relay;
    if (*offer_relay_opt) flags.offer_relay = offer_relay;
    if (*memory_opt) {
      flags.memory_limit = ravnest::config::parse_memory_limit(memory_limit, "--memory-limit");
    }
    ravnest::config::DaemonConfig file;
    if (!config_file.empty()) file = ravnest::config::load_daemon_config(config_file);
    auto config = ravnest::config::merge(file, flags);
    ravnest::config::validate_daemon_config(config, config_file.empty() ? "flags" : config_file);
    return ravnest::daemon::run_daemon(config);
  } catch (const std::exception& e) {
    std::cerr << "ravnestd: error: " << ravnest::torch_support::torch_message(e) << '\n';
    return 1;
  }
}
