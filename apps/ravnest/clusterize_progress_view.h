// What `ravnest clusterize` prints while it works (graph::ClusterizeProgress): on a terminal one
// line redrawn in place (LiveLines); piped or in a file, a line when each phase starts and ends,
// and every record_seconds while a long one runs. The lines are plain functions of the progress
// and the clock, tested without a terminal (test_cli_views).
#pragma once

#include <chrono>
#include <map>
#include <string>

#include "apps/ravnest/live_lines.h"
#include "libs/graph/clusterize_progress.h"

namespace ravnest::cli {

// "clusterize: verify [=====>      ] 2/6 0:12 elapsed, about 0:24 left" (the bar and what is left
// only when the total is known and something is done).
std::string clusterize_live_line(const graph::ClusterizeProgress& progress, double phase_seconds,
                                 int bar_width = 20);

// Off a terminal: "clusterize: cut started", "clusterize: cut done in 1.2 s (12)", and while a
// phase runs "clusterize: verify 2/6, 0:12 elapsed, about 0:24 left".
std::string clusterize_record(const graph::ClusterizeProgress& progress, double phase_seconds);

// Follows the phases and draws them; `say` prints clusterize's own log lines above the live line.
// One thread (clusterize's own).
class ClusterizeProgressView {
 public:
  explicit ClusterizeProgressView(double record_seconds = 10);
  void on_progress(const graph::ClusterizeProgress& progress);
  void say(const std::string& line);
  void clear() { live_.clear(); }

 private:
  double since(std::chrono::steady_clock::time_point start) const;
  LiveLines live_;
  double record_seconds_;
  // When each phase started: one nested in another ("memory probes" inside "plan") keeps its own.
  std::map<std::string, std::chrono::steady_clock::time_point> starts_;
  std::chrono::steady_clock::time_point last_record_{};
};

}  // namespace ravnest::cli
