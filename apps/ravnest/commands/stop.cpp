// ravnest stop: stop the running job on every node, at one update boundary (docs/faults.md).
#include <iostream>
#include <memory>

#include "apps/ravnest/commands/commands.h"
#include "apps/ravnest/commands/connection.h"
#include "apps/ravnest/commands/console.h"

namespace ravnest::cli {

Command add_stop(CLI::App& app) {
  auto c = std::make_shared<Connection>();
  auto* cmd = app.add_subcommand("stop", "Stop the running job on every node");
  add_connection_options(cmd, *c);
  return {cmd, [c] {
            auto requester = c->open();
            const auto not_stopped = requester.stop_all();
            if (!not_stopped.empty()) {
              std::cerr << "ravnest: error: not stopped on " << joined(not_stopped) << '\n';
              return 1;
            }
            say("stopped");
            return 0;
          }};
}

}  // namespace ravnest::cli
