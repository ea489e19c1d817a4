// ravnest tracker: the long-running service daemons register with and heartbeat to, and
// requesters read the live pool from (libs/tracker/tracker_service.h, docs/tracker.md;
// packaging/ravnest-tracker.service runs it under systemd).
//
// It needs nothing of LibTorch, which `ravnest` loads at its start (about 160 MB resident), so
// once its flags are parsed it becomes ravnest-tracker (tracker_main.cpp, built without LibTorch:
// a few MB) with the same flags: beside this program (the build tree), or in ../lib/ravnest/
// (installed). Without one there, it serves in this process.
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <filesystem>
#include <memory>
#include <vector>

#include <spdlog/spdlog.h>

#include "apps/ravnest/commands/commands.h"
#include "apps/ravnest/commands/tracker_options.h"
#include "libs/tracker/tracker_service.h"

namespace ravnest::cli {

namespace {

namespace fs = std::filesystem;

// ravnest-tracker beside this program, or in ../lib/ravnest/; empty when neither is there.
std::string lean_tracker() {
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (error) return "";
  for (const fs::path& candidate :
       {self.parent_path() / "ravnest-tracker",
        self.parent_path().parent_path() / "lib" / "ravnest" / "ravnest-tracker"}) {
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

}  // namespace

Command add_tracker(CLI::App& app) {
  auto o = std::make_shared<tracker::TrackerOptions>(default_tracker_options());
  auto* cmd = app.add_subcommand(
      "tracker", "Serve the live pool: daemons (ravnestd --tracker) register what they measured "
                 "and heartbeat; `pool/status/clusterize --tracker` read it");
  add_tracker_options(*cmd, *o);
  return {cmd, [o] {
            const std::string lean = lean_tracker();
            if (!lean.empty()) {
              std::vector<std::string> args = tracker_arguments(*o);
              args.insert(args.begin(), lean);
              std::vector<char*> argv;
              for (auto& a : args) argv.push_back(a.data());
              argv.push_back(nullptr);
              ::execv(lean.c_str(), argv.data());
              // Only on failure: serve here instead, saying why.
              spdlog::warn("cannot run {} ({}); serving in this process", lean,
                           std::strerror(errno));
            }
            return tracker::run_tracker(*o);
          }};
}

}  // namespace ravnest::cli
