// Fuzz target: node metadata (config::node_metadata_from_json), as `ravnest push` sends it to a
// daemon (pushStage) and as the daemon reads it back. Errors: ConfigError, one line. Metadata
// that is accepted must survive a round trip through to_json(), and hold what the daemon's code
// relies on without checking again (see the checks below).
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "libs/config/plan/checkpoint_keeper.h"
#include "libs/base/config_error.h"
#include "libs/config/plan/node_metadata.h"
#include "tests/fuzz/fuzz_support.h"

using namespace ravnest::config;
using namespace ravnest::base;

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "accepted metadata breaks: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  NodeMetadata m;
  try {
    m = node_metadata_from_json(ravnest::fuzz::text_of(data, size), "metadata.json");
  } catch (const ConfigError& e) {
    ravnest::fuzz::check_one_line(e.what());
    return 0;
  }
  const std::string again = to_json(m);
  if (to_json(node_metadata_from_json(again, "round trip")) != again) broken("round trip");
  // RingMember's session runs the all-reduce from `position` among `size` (ring_member.cpp).
  for (const auto& ring : m.rings) {
    if (ring.size < 1) broken("a ring without members");
    if (ring.position < 0 || ring.position >= ring.size) broken("a ring position outside it");
  }
  (void)checkpoint_keeper(m);
  return 0;
}
