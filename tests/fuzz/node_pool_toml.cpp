// Fuzz target: node_configs.toml (config::parse_node_pool, TOML). Errors: ConfigError, one line.
#include <cstdint>
#include <cstdlib>

#include "libs/base/config_error.h"
#include "libs/config/pool/node_pool.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto pool = ravnest::config::parse_node_pool(ravnest::fuzz::text_of(data, size),
                                                       "node_configs.toml", /*toml=*/true);
    if (pool.empty()) std::abort();  // documented: a pool has nodes
  } catch (const ravnest::base::ConfigError& e) {
    ravnest::fuzz::check_one_line(e.what());
  }
  return 0;
}
