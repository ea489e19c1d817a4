// What `ravnest clusterize` prints while it works (graph::ClusterizeProgress): on a terminal one
// line redrawn in place (LiveLines); piped or in a file, a line when each phase starts and ends,
// and every record_seconds while a long one runs. The lines are plain functions of the progress
// and the clock, tested without a terminal (test_cli_views).
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>
#include <string>

#include "apps/ravnest/live_lines.h"
#include "libs/graph/clusterize_progress.h"

namespace ravnest::cli {

// "clusterize: verify [=====>      ] 2/6 0:12 elapsed, about 0:24 left" (the bar and what is left
// only when the total is known and something is done).
std::string clusterize_live_line(const graph::ClusterizeProgress& progress, double phase_seconds,
                                 int bar_width = 20);

// Off a terminal: "clusterize: cut started" (phase_seconds 0), "clusterize: cut done in 1.2 s
// (12)", and while a phase runs "clusterize: verify 2/6, 0:12 elapsed, about 0:24 left" or, before
// its first item is done, "clusterize: cut, 0:10 elapsed".
std::string clusterize_record(const graph::ClusterizeProgress& progress, double phase_seconds);

// Follows the phases and draws them; `say` prints clusterize's own log lines above the live line.
// A phase that goes quiet (the cut, a long probe) is not left silent: a thread of the view's own
// redraws the live line every second, or off a terminal writes a record every record_seconds.
// Its calls are safe from any thread (one mutex over the output).
class ClusterizeProgressView {
 public:
  explicit ClusterizeProgressView(double record_seconds = 10);
  ~ClusterizeProgressView();  // stops the ticking thread
  ClusterizeProgressView(const ClusterizeProgressView&) = delete;
  ClusterizeProgressView& operator=(const ClusterizeProgressView&) = delete;
  void on_progress(const graph::ClusterizeProgress& progress);
  void say(const std::string& line);
  void clear();

 private:
  using Clock = std::chrono::steady_clock;
  void show(const graph::ClusterizeProgress& p, bool edge, Clock::time_point now);  // under mutex_
  void tick();
  LiveLines live_;
  double record_seconds_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<graph::ClusterizeProgress> open_;  // the phases running now, innermost last
  // When each phase started: one nested in another ("memory probes" inside "plan") keeps its own.
  std::map<std::string, Clock::time_point> starts_;
  Clock::time_point last_record_{};
  std::thread ticker_;
};

}  // namespace ravnest::cli
