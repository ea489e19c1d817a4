// ravnest probe-memory: clusterize's memory probe, one stage in a process of its own
// (memory_probe_process.h); not for people, so not in the help.
#include <memory>

#include "apps/ravnest/commands/commands.h"
#include "apps/ravnest/memory_probe_process.h"

namespace ravnest::cli {

Command add_probe_memory(CLI::App& app) {
  auto a = std::make_shared<ProbeMemoryArgs>();
  auto* cmd = app.add_subcommand("probe-memory", "")->group("");
  cmd->add_option("--stage", a->stage)->required();
  cmd->add_option("--inputs", a->inputs)->required();
  cmd->add_option("--scratch", a->scratch)->required();
  cmd->add_option("--result", a->result)->required();
  cmd->add_option("--in-flight", a->in_flight);
  cmd->add_option("--stash", a->stash_versions);
  cmd->add_flag("--root", a->root);
  cmd->add_flag("--leaf", a->leaf);
  cmd->add_flag("--ring", a->ring);
  cmd->add_option("--device", a->device);
  // run_probe_memory reports its own errors into --result.
  return {cmd, [a] { return run_probe_memory(*a); }};
}

}  // namespace ravnest::cli
