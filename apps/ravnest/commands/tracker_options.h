// The tracker's flags, one definition for the two programs that parse them: `ravnest tracker`
// (the documented command, commands/tracker.cpp) and ravnest-tracker, the program without
// LibTorch it hands the parsed options to (tracker_main.cpp). Any thread; no I/O.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "libs/tracker/tracker_service.h"

namespace ravnest::cli {

// Adds --listen, --state-dir, --secret-file, --insecure, --offer-relay, the bounds and
// --log-level to `cmd`, parsed into `options` (which must outlive the parse); `options` holds the
// defaults shown.
void add_tracker_options(CLI::App& cmd, tracker::TrackerOptions& options);

// The flags that parse back (add_tracker_options) to `options`.
std::vector<std::string> tracker_arguments(const tracker::TrackerOptions& options);

// The service's defaults (packaging/ravnest-tracker.service names the same).
tracker::TrackerOptions default_tracker_options();

}  // namespace ravnest::cli
