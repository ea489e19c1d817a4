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
  // The start itself (no time gone yet), else a phase still at work on its first item.
  if (p.done == 0 && seconds <= 0) return "clusterize: " + p.phase + " started";
  if (p.done == 0) return "clusterize: " + p.phase + ", " + format_duration(seconds) + " elapsed";
  return "clusterize: " + p.phase + " " + n + ", " + format_duration(seconds) + " elapsed" +
         left(p, seconds);
}

ClusterizeProgressView::ClusterizeProgressView(double record_seconds)
    : record_seconds_(record_seconds), ticker_([this] { tick(); }) {}

ClusterizeProgressView::~ClusterizeProgressView() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  ticker_.join();
}

void ClusterizeProgressView::show(const graph::ClusterizeProgress& p, bool edge,
                                  Clock::time_point now) {
  const auto start = starts_.count(p.phase) ? starts_[p.phase] : now;
  const double seconds = std::chrono::duration<double>(now - start).count();
  if (live_.tty()) {
    // One line, redrawn; the phases' times come in clusterize's summary at the end.
    if (p.finished) {
      live_.clear();
    } else {
      live_.draw({clusterize_live_line(p, seconds)}, edge);
    }
    return;
  }
  // Off a terminal each start and end, and otherwise a record at most every record_seconds.
  if (!edge && (record_seconds_ <= 0 ||
                now - last_record_ < std::chrono::duration<double>(record_seconds_))) {
    return;
  }
  last_record_ = now;
  live_.say(clusterize_record(p, seconds));
}

void ClusterizeProgressView::on_progress(const graph::ClusterizeProgress& p) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = Clock::now();
  const bool starts = p.done == 0 && !p.finished;
  if (starts) starts_[p.phase] = now;
  // A nested phase ends back in the one around it.
  auto same = std::find_if(open_.begin(), open_.end(),
                           [&](const graph::ClusterizeProgress& o) { return o.phase == p.phase; });
  if (p.finished) {
    if (same != open_.end()) open_.erase(same);
  } else if (same != open_.end()) {
    *same = p;
  } else {
    open_.push_back(p);
  }
  show(p, starts || p.finished, now);
}

void ClusterizeProgressView::tick() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, std::chrono::seconds(1));
    // The elapsed time moves on a terminal; off one, a quiet phase still writes a record.
    if (!stopping_ && !open_.empty()) show(open_.back(), false, Clock::now());
  }
}

void ClusterizeProgressView::say(const std::string& line) {
  std::lock_guard<std::mutex> lock(mutex_);
  live_.say(line);
}

void ClusterizeProgressView::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  open_.clear();
  live_.clear();
}

}  // namespace ravnest::cli
