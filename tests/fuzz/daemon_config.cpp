// Fuzz target: ravnestd's configuration file (config::parse_daemon_config). Errors: ConfigError,
// one line. A file that parses, given a node, passes validate_daemon_config but for what the
// values need of each other, which a flag may still give (relay = "auto" and no tracker; relay
// and offer_relay both): each value alone was checked as it was read.
#include <cstdint>
#include <string>

#include "libs/base/config_error.h"
#include "libs/config/daemon/daemon_config.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ravnest::config::DaemonConfig config;
  try {
    config = ravnest::config::parse_daemon_config(ravnest::fuzz::text_of(data, size),
                                                  "ravnestd.toml");
  } catch (const ravnest::base::ConfigError& e) {
    ravnest::fuzz::check_one_line(e.what());
    return 0;
  }
  if (config.node.empty()) config.node = "node_0";
  try {
    ravnest::config::validate_daemon_config(config, "ravnestd.toml");
  } catch (const ravnest::base::ConfigError& e) {
    const std::string what = e.what();
    const bool between_values =
        what.rfind("ravnestd.toml: relay: \"auto\" asks the tracker", 0) == 0 ||
        what.rfind("ravnestd.toml: offer_relay: a daemon behind a relay", 0) == 0 ||
        what.rfind("ravnestd.toml: tls_cert: a certificate with --insecure", 0) == 0;
    if (!between_values) throw;  // a value alone the parse let through: a finding
    ravnest::fuzz::check_one_line(e.what());
  }
  return 0;
}
