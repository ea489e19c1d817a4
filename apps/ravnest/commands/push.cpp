// ravnest push: send every node of the plan its stage and metadata.
#include <memory>

#include "apps/ravnest/commands/commands.h"
#include "apps/ravnest/commands/connection.h"
#include "apps/ravnest/commands/console.h"

namespace ravnest::cli {

Command add_push(CLI::App& app) {
  auto c = std::make_shared<Connection>();
  auto* cmd = app.add_subcommand("push", "Send every node its stage and metadata");
  add_connection_options(cmd, *c);
  return {cmd, [c] {
            c->open().push(say);
            return 0;
          }};
}

}  // namespace ravnest::cli
