// ravnest replace NODE --with SPARE: put a spare of the pool in the place of a dead node.
#include <algorithm>
#include <memory>
#include <stdexcept>

#include "apps/ravnest/commands/commands.h"
#include "apps/ravnest/commands/connection.h"
#include "apps/ravnest/commands/console.h"
#include "libs/requester/replacement.h"

namespace ravnest::cli {
namespace {

struct ReplaceCommand {
  Connection connection;
  PoolNodes pool;
  std::string old_name, spare_name;

  int run() const {
    const auto spare = pool.named({spare_name}).front();
    const auto& c = connection;
    c.warn_if_insecure();
    const auto done =
        requester::replace_node(c.plan_dir, c.secret(), old_name, spare, say, c.insecure);
    std::string line = done.spare_name + " replaces " + done.old_name + " (cluster " +
                       std::to_string(done.cluster) + ", position " +
                       std::to_string(done.position) + ")";
    if (done.rejoined_by) {
      say(line + "; the `ravnest train` that follows the job (pid " +
          std::to_string(done.rejoined_by) + ") brings cluster " + std::to_string(done.cluster) +
          " back at the next update boundary");
      return 0;
    }
    line += done.checkpoint ? "; `ravnest resume` continues the job after update " +
                                  std::to_string(*done.checkpoint)
                            : "; `ravnest train` starts a job";
    say(line);
    return 0;
  }
};

}  // namespace

Command add_replace(CLI::App& app) {
  auto c = std::make_shared<ReplaceCommand>();
  auto* cmd = app.add_subcommand(
      "replace", "Put a spare node from the pool in the place of a dead one (docs/faults.md)");
  cmd->add_option("node", c->old_name, "the plan's node to replace, e.g. node_2")->required();
  cmd->add_option("--with", c->spare_name, "the spare, a pool node not in the plan")->required();
  add_pool_option(cmd, c->pool);
  add_connection_options(cmd, c->connection);
  return {cmd, [c] { return c->run(); }};
}

}  // namespace ravnest::cli
