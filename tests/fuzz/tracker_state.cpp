// Fuzz target: the tracker's state file (tracker::parse_state), as `ravnest tracker` reads it back
// at a restart from <state dir>/tracker-state.json. Errors: ConfigError, one line. A file that is
// accepted holds only members the tracker could have admitted (registration_problem), writes
// back (state_json) to a file that reads as the same pool, and converts to node_configs.json
// (pool_json) as `ravnest pool --tracker` writes it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "libs/base/config_error.h"
#include "libs/tracker/membership.h"
#include "libs/tracker/tracker_state.h"
#include "tests/fuzz/fuzz_support.h"

using namespace ravnest;

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "an accepted state file breaks: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tracker::Membership membership;
  try {
    membership = tracker::parse_state(fuzz::text_of(data, size), "tracker-state.json", 100);
  } catch (const base::ConfigError& e) {
    fuzz::check_one_line(e.what());
    return 0;
  }
  for (const auto& [name, m] : membership.members) {
    if (name != m.registration.name) broken("a member under another name");
    if (!tracker::registration_problem(m.registration).empty()) broken("a malformed member");
    if (m.last_heartbeat != 100) broken("a heartbeat not counted from the restart");
  }
  const std::string again = tracker::state_json(membership);
  if (tracker::state_json(tracker::parse_state(again, "round trip", 100)) != again) {
    broken("round trip");
  }
  (void)tracker::pool_json(membership.members);
  return 0;
}
