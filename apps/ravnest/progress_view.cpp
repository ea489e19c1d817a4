#include "apps/ravnest/progress_view.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ravnest::cli {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long total = static_cast<long>(seconds + 0.5);
  char text[32];
  if (total >= 3600) {
    std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", total / 3600, total / 60 % 60, total % 60);
  } else {
    std::snprintf(text, sizeof text, "%ld:%02ld", total / 60, total % 60);
  }
  return text;
}

namespace {

// Where a run is, as both views say it: the epoch ("2/4", or "2" when epochs are unknown) and the
// batches done of how many.
struct Position {
  std::string epoch;
  uint64_t done = 0, of = 0;
};

Position position_of(const requester::TrainProgress& p) {
  // The count is the epoch's when every epoch has as many batches (the job's epochs are known
  // and divide the total), else the whole run's.
  Position at{"", p.batches, p.total_batches};
  uint32_t epoch = p.epoch;
  const bool per_epoch = p.epochs > 0 && at.of > 0 && at.of % p.epochs == 0;
  if (per_epoch) {
    const uint64_t per = at.of / p.epochs;
    // An epoch's last batch done still shows that epoch, full.
    epoch = p.batches == 0 ? 0
                           : static_cast<uint32_t>(std::min<uint64_t>((p.batches - 1) / per, p.epochs - 1));
    at.done = p.batches - epoch * per;
    at.of = per;
  }
  at.epoch = std::to_string(epoch + 1);
  if (per_epoch) at.epoch += "/" + std::to_string(p.epochs);
  return at;
}

std::string validation_words(const requester::TrainProgress& p) {
  if (!p.has_validation) return "";
  char text[64];
  std::snprintf(text, sizeof text, " val_loss %.4f", p.validation_loss);
  std::string words = text;
  if (std::isfinite(p.validation_accuracy)) {
    std::snprintf(text, sizeof text, " val_acc %.4f", p.validation_accuracy);
    words += text;
  }
  return words;
}

}  // namespace

std::string progress_record(const requester::TrainProgress& p) {
  if (p.total_batches == 0) return "cluster " + std::to_string(p.cluster) + " starting";
  const Position at = position_of(p);
  char text[256];
  std::snprintf(text, sizeof text, "cluster %d epoch %s batch %llu/%llu loss %.4f", p.cluster,
                at.epoch.c_str(), static_cast<unsigned long long>(at.done),
                static_cast<unsigned long long>(at.of), p.loss);
  std::string line = text + validation_words(p);
  std::snprintf(text, sizeof text, " %.0f samples/s elapsed %s", p.samples_per_second,
                format_duration(p.elapsed_seconds).c_str());
  return line + text;
}

std::string progress_line(const requester::TrainProgress& p, int bar_width) {
  const Position at = position_of(p);
  const uint64_t done = at.done, of = at.of;
  const double fraction = of ? std::min(1.0, static_cast<double>(done) / of) : 0.0;
  const int filled = static_cast<int>(fraction * bar_width);
  std::string bar(bar_width, ' ');
  for (int i = 0; i < filled; ++i) bar[i] = '=';
  if (filled < bar_width && done > 0) bar[filled] = '>';
  char text[256];
  if (p.total_batches == 0) {
    // The root has not said how many batches the run has yet.
    std::snprintf(text, sizeof text, "cluster %d starting [%s]", p.cluster, bar.c_str());
    return text;
  }
  std::snprintf(text, sizeof text, "cluster %d epoch %s [%s] %llu/%llu loss %.4f", p.cluster,
                at.epoch.c_str(), bar.c_str(), static_cast<unsigned long long>(done),
                static_cast<unsigned long long>(of), p.loss);
  std::string line = text + validation_words(p);
  std::snprintf(text, sizeof text, " %.0f samples/s", p.samples_per_second);
  line += text;
  if (p.batches > 0 && p.total_batches > p.batches) {
    const double eta = p.elapsed_seconds / p.batches * (p.total_batches - p.batches);
    line += " ETA " + format_duration(eta);
  } else {
    line += " " + format_duration(p.elapsed_seconds);
  }
  return line;
}

}  // namespace ravnest::cli
