#include "apps/ravnest/clusterize_progress_view.h"

#include <algorithm>
#include <cstdio>

#include "apps/ravnest/progress_view.h"

namespace ravnest::cli {
namespace {

// "2/6" or "2" when the total is not known; "" before anything is done of an unknown total.
std::string count(const graph::ClusterizeProgress& p) {
  if (p.total) return std::to_string(p.done) + "/" + std::to_string(p.total);
  return p.done ? std::to_string(p.done) : std::string();
}

// ", about 0:24 left" once a known total is partly done (the rate so far, kept up).
std::string left(const graph::ClusterizeProgress& p, double seconds) {
  if (!p.total || !p.done || p.done >= p.total) return "";
  return ", about " + format_duration(seconds / p.done * (p.total - p.done)) + " left";
}

}  // namespace

std::string clusterize_live_line(const graph::ClusterizeProgress& p, double seconds,
                                 int bar_width) {
  std::string line = "clusterize: " + p.phase;
  if (p.total) {
    const double fraction = std::min(1.0, static_cast<double>(p.done) / p.total);
    const int filled = static_cast<int>(fraction * bar_width);
    std::string bar(bar_width, ' ');
    for (int i = 0; i < filled; ++i) bar[i] = '=';
    if (filled < bar_width && p.done > 0) bar[filled] = '>';
    line += " [" + bar + "]";
  }
  const std::string n = count(p);
  if (!n.empty()) line += " " + n;
  return line + " " + format_duration(seconds) + " elapsed" + left(p, seconds);
}

std::string clusterize_record(const graph::ClusterizeProgress& p, double seconds) {
  const std::string n = count(p);
  if (p.finished) {
    char text[64];
    std::snprintf(text, sizeof text, " done in %.1f s", seconds);
    return "clusterize: " + p.phase + text + (n.empty() ? "" : " (" + n + ")");
  }
  if (p.done == 0) return "clusterize: " + p.phase + " started";
  return "clusterize: " + p.phase + " " + n + ", " + format_duration(seconds) + " elapsed" +
         left(p, seconds);
}

ClusterizeProgressView::ClusterizeProgressView(double record_seconds)
    : record_seconds_(record_seconds) {}

double ClusterizeProgressView::since(std::chrono::steady_clock::time_point start) const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void ClusterizeProgressView::on_progress(const graph::ClusterizeProgress& p) {
  const auto now = std::chrono::steady_clock::now();
  // A nested phase ("memory probes" in "plan") and the one around it each time themselves.
  if (p.done == 0 && !p.finished) starts_[p.phase] = now;
  const auto start = starts_.count(p.phase) ? starts_[p.phase] : now;
  const double seconds = since(start);
  if (live_.tty()) {
    // One line, redrawn; the phases' times come in clusterize's summary at the end.
    if (p.finished) {
      live_.clear();
    } else {
      live_.draw({clusterize_live_line(p, seconds)}, p.done == 0);
    }
    return;
  }
  // Off a terminal each start and end, and an advance at most every record_seconds.
  const bool edge = p.finished || p.done == 0;
  if (!edge && (record_seconds_ <= 0 ||
                now - last_record_ < std::chrono::duration<double>(record_seconds_))) {
    return;
  }
  if (!p.finished) last_record_ = now;
  live_.say(clusterize_record(p, seconds));
}

void ClusterizeProgressView::say(const std::string& line) { live_.say(line); }

}  // namespace ravnest::cli
