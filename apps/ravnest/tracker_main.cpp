// ravnest-tracker: `ravnest tracker` without LibTorch (commands/tracker.cpp hands it its parsed
// flags, which it parses again: the same add_tracker_options). It links the tracker, the wire
// and their configuration only, so the service holds a few MB instead of LibTorch's 160. Errors
// as `ravnest`'s: one line "ravnest: error: ..." on stderr, exit code 1.
#include <iostream>

#include <CLI/CLI.hpp>

#include "apps/ravnest/commands/tracker_options.h"
#include "libs/tracker/tracker_service.h"
#include "ravnest_version.h"

int main(int argc, char** argv) {
  using namespace ravnest;
  CLI::App app{"ravnest-tracker: `ravnest tracker` without LibTorch (docs/tracker.md)"};
  app.set_version_flag("--version", "ravnest-tracker " RAVNEST_VERSION " (commit " RAVNEST_COMMIT
                                    ")");
  tracker::TrackerOptions options = cli::default_tracker_options();
  cli::add_tracker_options(app, options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return tracker::run_tracker(options);
  } catch (const std::exception& e) {
    std::cerr << "ravnest: error: " << e.what() << '\n';
    return 1;
  }
}
