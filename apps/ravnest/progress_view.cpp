#include "apps/ravnest/progress_view.h"

#include <cmath>
#include <cstdio>

namespace ravnest::runtime {

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

std::string progress_line(const TrainProgress& p, int bar_width) {
  const double fraction =
      p.total_batches ? std::min(1.0, static_cast<double>(p.batches) / p.total_batches) : 0.0;
  const int filled = static_cast<int>(fraction * bar_width);
  std::string bar(bar_width, ' ');
  for (int i = 0; i < filled; ++i) bar[i] = '=';
  if (filled < bar_width && p.batches > 0) bar[filled] = '>';
  char text[256];
  std::snprintf(text, sizeof text, "cluster %d epoch %u [%s] %llu/%llu loss %.4f", p.cluster,
                p.epoch + 1, bar.c_str(), static_cast<unsigned long long>(p.batches),
                static_cast<unsigned long long>(p.total_batches), p.loss);
  std::string line = text;
  if (p.has_validation) {
    std::snprintf(text, sizeof text, " val_loss %.4f", p.validation_loss);
    line += text;
    if (std::isfinite(p.validation_accuracy)) {
      std::snprintf(text, sizeof text, " val_acc %.4f", p.validation_accuracy);
      line += text;
    }
  }
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

}  // namespace ravnest::runtime
