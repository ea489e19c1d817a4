// Fuzz target: the tracker's state file (tracker::parse_state), which `ravnest tracker` reads at
// its start: a file left by a crash, edited by hand or damaged on disk. Errors: ConfigError, one
// line. A state that parses holds only members the tracker would have accepted
// (registration_problem), and survives a round trip through state_json; the pool file written
// from it (pool_json) is read back by clusterize's reader without an error of ours.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "libs/base/config_error.h"
#include "libs/config/pool/node_pool.h"
#include "libs/tracker/dial_back.h"
#include "libs/tracker/membership.h"
#include "libs/tracker/tracker_state.h"
#include "tests/fuzz/fuzz_support.h"

using namespace ravnest;

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "an accepted state breaks: %s\n", what);
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
  for (const auto& [name, member] : membership.members) {
    if (name != member.registration.name) broken("a member under another name");
    if (!tracker::registration_problem(member.registration).empty()) broken("a refused member");
    if (member.last_heartbeat != 100) broken("a heartbeat not counted from the restart");
  }
  const std::string again = tracker::state_json(membership);
  if (tracker::state_json(tracker::parse_state(again, "round trip", 100)) != again) {
    broken("round trip");
  }
  (void)tracker::relays_offered(membership, ":1");
  if (!membership.members.empty()) {
    try {
      (void)config::parse_node_pool(tracker::pool_json(membership.members), "pool", false);
    } catch (const base::ConfigError& e) {
      // The pool file of accepted members could still break the pool's own rules (two members
      // at one address): said in one line, as clusterize --tracker says it.
      fuzz::check_one_line(e.what());
    }
  }
  return 0;
}
