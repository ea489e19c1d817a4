// LiveLines: lines redrawn in place at the bottom of a terminal (train's per-cluster bars,
// clusterize's phase line), with ordinary log lines printed above them. Off a terminal it draws
// nothing: callers print their own records instead. One thread (the command's); writes stdout.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace ravnest::cli {

class LiveLines {
 public:
  LiveLines();  // is stdout a terminal?
  bool tty() const { return tty_; }
  // Replaces the drawn lines with `lines`; at most ten times a second unless `force` (events may
  // come with every batch), so a call may draw nothing.
  void draw(const std::vector<std::string>& lines, bool force = false);
  // Removes the drawn lines for good (at the end, or before an error).
  void clear();
  // The line and a newline above the drawn lines, which are drawn again below it; flushed
  // (console.h's say()).
  void say(const std::string& line);

 private:
  bool tty_ = false;
  size_t drawn_ = 0;
  std::vector<std::string> shown_;  // what is drawn
  std::chrono::steady_clock::time_point last_drawn_{};
};

}  // namespace ravnest::cli
