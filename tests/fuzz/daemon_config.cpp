// Fuzz target: ravnestd's configuration file (config::parse_daemon_config). Errors: ConfigError,
// one line. A file that parses, given a node, passes validate_daemon_config.
#include <cstdint>

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
  ravnest::config::validate_daemon_config(config, "ravnestd.toml");  // throws: a finding
  return 0;
}
