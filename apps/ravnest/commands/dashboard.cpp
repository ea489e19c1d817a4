// ravnest dashboard: a local web page of the plan's nodes, losses, traffic and job, live.
#include <memory>

#include "apps/ravnest/commands/commands.h"
#include "apps/ravnest/commands/connection.h"
#include "apps/ravnest/commands/console.h"
#include "apps/ravnest/dashboard_server.h"

namespace ravnest::cli {
namespace {

struct DashboardCommand {
  Connection connection;
  std::string listen = "127.0.0.1:8650";
  std::string tracker;
};

}  // namespace

Command add_dashboard(CLI::App& app) {
  auto c = std::make_shared<DashboardCommand>();
  auto* cmd = app.add_subcommand(
      "dashboard", "A local web page: the plan's nodes, loss curves, bytes on the wire and job, "
                   "live while a job runs (docs/dashboard.md)");
  cmd->add_option("--listen", c->listen, "host:port to serve on")->capture_default_str();
  add_connection_options(cmd, c->connection);
  cmd->add_option("--tracker", c->tracker,
                  "HOST:PORT of a tracker: show its live pool too (docs/tracker.md)");
  return {cmd, [c] {
            c->connection.warn_if_insecure();
            catch_interrupts();
            DashboardOptions options;
            options.plan_dir = c->connection.plan_dir;
            options.secret = c->connection.secret();
            options.insecure = c->connection.insecure;
            options.listen = c->listen;
            options.tracker = c->tracker;
            options.log = say;
            options.interrupted = interrupted;
            run_dashboard(options);
            return 0;
          }};
}

}  // namespace ravnest::cli
