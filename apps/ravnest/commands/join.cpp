// ravnest join NODE... --like C: new providers of the pool become one more cluster, cut as C is.
#include <algorithm>
#include <memory>
#include <stdexcept>

#include "apps/ravnest/commands/commands.h"
#include "apps/ravnest/commands/connection.h"
#include "apps/ravnest/commands/console.h"
#include "libs/requester/joining.h"

namespace ravnest::cli {
namespace {

struct JoinCommand {
  Connection connection;
  PoolNodes pool;
  std::vector<std::string> names;
  int like = 0;

  int run() const {
    const auto newcomers = pool.named(names);
    const auto& c = connection;
    c.warn_if_insecure();
    const auto joining =
        requester::join_nodes(c.plan_dir, c.secret(), newcomers, like, say, c.insecure);
    const std::string cluster = "cluster " + std::to_string(joining.joined.cluster);
    if (joining.job_id != 0) {
      say(cluster + " joins the plan, cut like cluster " + std::to_string(like) + "; `ravnest " +
          "train` (pid " + std::to_string(joining.follower_pid) + ") brings it into job " +
          std::to_string(joining.job_id) + " at the next update boundary, the data dealt into " +
          "one more shard from there");
    } else {
      say(cluster + " joins the plan, cut like cluster " + std::to_string(like) +
          "; the next `ravnest train` deals the data into one more shard");
    }
    return 0;
  }
};

}  // namespace

Command add_join(CLI::App& app) {
  auto c = std::make_shared<JoinCommand>();
  auto* cmd = app.add_subcommand(
      "join", "New pool nodes become one more cluster, cut like another (docs/faults.md)");
  cmd->add_option("new_nodes", c->names, "the pool's nodes to join, one per stage, root first")->required();
  cmd->add_option("--like", c->like, "the cluster whose cut and stages they take")
      ->capture_default_str();
  add_pool_option(cmd, c->pool);
  add_connection_options(cmd, c->connection);
  return {cmd, [c] { return c->run(); }};
}

}  // namespace ravnest::cli
