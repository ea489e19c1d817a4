// ravnest status: where every node of the plan is, its memory, and the bytes on the wire.
#include <cstdio>
#include <memory>

#include "apps/ravnest/commands/commands.h"
#include "apps/ravnest/commands/connection.h"
#include "apps/ravnest/commands/tracker_pool.h"
#include "apps/ravnest/memory_view.h"
#include "apps/ravnest/tracker_view.h"
#include "apps/ravnest/traffic_view.h"

namespace ravnest::cli {
namespace {

// Exit code 1 when a node did not answer.
int run_status(const Connection& c) {
  auto requester = c.open();
  std::printf("%-8s %-22s %-8s %-10s %-11s %6s %12s %10s %10s\n", "node", "address", "cluster",
              "role", "state", "epoch", "batches", "loss", "samples/s");
  bool all_reachable = true;
  const auto reports = requester.status();
  for (const auto& r : reports) {
    all_reachable = all_reachable && r.reachable;
    // Only a root knows the run's batches and its samples/s, only a leaf the loss: the others
    // show "-" rather than a 0 that reads as a measurement.
    // A node that holds no job's numbers (idle, or its job stopped and released) has measured
    // nothing either: "-" too, not "batches 0, loss 0.0000".
    const bool measured = r.status.batches > 0 || r.status.total_batches > 0;
    char batches[48], loss[24], rate[24], epoch[16];
    if (!measured) {
      std::snprintf(batches, sizeof batches, "-");
    } else if (r.status.total_batches > 0) {
      std::snprintf(batches, sizeof batches, "%llu/%llu",
                    static_cast<unsigned long long>(r.status.batches),
                    static_cast<unsigned long long>(r.status.total_batches));
    } else {
      std::snprintf(batches, sizeof batches, "%llu", static_cast<unsigned long long>(r.status.batches));
    }
    if (r.node.returns_model_output && measured) {
      std::snprintf(loss, sizeof loss, "%.4f", r.status.last_loss);
    } else {
      std::snprintf(loss, sizeof loss, "-");
    }
    if (measured) std::snprintf(epoch, sizeof epoch, "%u", r.status.epoch + 1);
    else std::snprintf(epoch, sizeof epoch, "-");
    if (r.node.position == 0 && r.node.cluster >= 0 && measured) {
      std::snprintf(rate, sizeof rate, "%.1f", r.status.samples_per_second);
    } else {
      std::snprintf(rate, sizeof rate, "-");
    }
    std::printf("%-8s %-22s %-8d %-10s %-11s %6s %12s %10s %10s\n", r.node.name.c_str(),
                r.node.address.c_str(), r.node.cluster, config::role_name(r.node.role).c_str(),
                r.state.c_str(), epoch, batches, loss, rate);
    if (!r.error.empty()) std::printf("         %s\n", explain_refusal(r.error).c_str());
    const std::string memory = r.reachable ? memory_line(r.status) : "";
    if (!memory.empty()) std::printf("         %s\n", memory.c_str());
  }
  std::printf("%s", traffic_table(reports).c_str());
  return all_reachable ? 0 : 1;
}

}  // namespace

Command add_status(CLI::App& app) {
  auto c = std::make_shared<Connection>();
  auto tracker = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("status", "Show where every node of the plan is");
  add_connection_options(cmd, *c);
  cmd->add_option("--tracker", *tracker,
                  "HOST:PORT of a tracker: show its live pool instead of the plan's nodes");
  return {cmd, [c, tracker] {
            if (tracker->empty()) return run_status(*c);
            std::printf("%s", tracker_pool_table(read_tracker_pool(*tracker, *c)).c_str());
            return 0;
          }};
}

}  // namespace ravnest::cli
