// ravnest losses [--cluster N] [--plot F.svg]: each cluster's losses and validation rounds of the
// last job, from whoever computes the loss (each cluster's leaf, each parameter-server worker) and
// the rounds of a parameter-server plan's evaluator.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>

#include "apps/ravnest/commands/commands.h"
#include "apps/ravnest/commands/connection.h"
#include "apps/ravnest/commands/console.h"
#include "apps/ravnest/loss_report.h"
#include "libs/base/atomic_file.h"

namespace ravnest::cli {
namespace {

int run_losses(const Connection& c, std::optional<int> cluster, const std::string& plot) {
  if (!plot.empty()) {
    const auto ext = std::filesystem::path(plot).extension().string();
    if (ext != ".svg") {
      throw std::invalid_argument("--plot " + plot + ": only .svg plots are written (open one in "
                                  "a browser, or convert it with rsvg-convert)");
    }
  }
  auto requester = c.open();
  const auto plan = requester::load_plan(c.plan_dir);
  std::vector<LossHistory> histories;
  bool found = false;
  for (const auto& node : plan.nodes) {
    // A parameter server's servers hold the whole model but compute no loss; its evaluator
    // only scores (validation rounds, no training losses) and belongs to no cluster.
    const bool evaluator = node.role == config::Role::kEvaluator;
    if (!node.returns_model_output || node.role == config::Role::kServer) continue;
    if (cluster && (evaluator || node.cluster != *cluster)) continue;
    found = true;
    const auto fetched = requester.fetch_losses(node.node_id);
    // Workers of a parameter-server plan each compute losses: one curve per cluster id.
    histories.push_back(
        parse_loss_history(node.cluster, fetched.losses, fetched.validation, node.name));
    if (evaluator) histories.back().name = "evaluator";
  }
  if (!found) {
    throw std::invalid_argument(cluster ? "--cluster " + std::to_string(*cluster) +
                                              ": no such cluster in " + c.plan_dir
                                        : "no node of " + c.plan_dir + " computes the loss");
  }
  std::printf("%s", loss_table(histories).c_str());
  if (!plot.empty()) {
    base::write_file_atomically(plot, loss_svg(histories, "ravnest: " + c.plan_dir));
    say("wrote " + plot);
  }
  return 0;
}

struct LossesCommand {
  Connection connection;
  int cluster = -1;
  std::string plot;
  CLI::Option* cluster_given = nullptr;
};

}  // namespace

Command add_losses(CLI::App& app) {
  auto c = std::make_shared<LossesCommand>();
  auto* cmd = app.add_subcommand(
      "losses", "Each cluster's training losses and validation rounds of the last job, from its leaf");
  add_connection_options(cmd, c->connection);
  c->cluster_given = cmd->add_option("--cluster", c->cluster, "only this cluster");
  cmd->add_option("--plot", c->plot, "also write the curves to this .svg file");
  return {cmd, [c] {
            return run_losses(c->connection,
                              *c->cluster_given ? std::optional<int>(c->cluster) : std::nullopt,
                              c->plot);
          }};
}

}  // namespace ravnest::cli
