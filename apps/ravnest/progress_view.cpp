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

std::string progress_line(const requester::TrainProgress& p, int bar_width) {
  // The bar and the count are the epoch's when every epoch has as many batches (the job's epochs
  // are known and divide the total), else the whole run's.
  uint64_t done = p.batches, of = p.total_batches;
  uint32_t epoch = p.epoch;
  const bool per_epoch = p.epochs > 0 && of > 0 && of % p.epochs == 0;
  if (per_epoch) {
    const uint64_t per = of / p.epochs;
    // An epoch's last batch done still shows that epoch, full.
    epoch = p.batches == 0 ? 0
                           : static_cast<uint32_t>(std::min<uint64_t>((p.batches - 1) / per, p.epochs - 1));
    done = p.batches - epoch * per;
    of = per;
  }
  const double fraction = of ? std::min(1.0, static_cast<double>(done) / of) : 0.0;
  const int filled = static_cast<int>(fraction * bar_width);
  std::string bar(bar_width, ' ');
  for (int i = 0; i < filled; ++i) bar[i] = '=';
  if (filled < bar_width && done > 0) bar[filled] = '>';
  char text[256];
  std::string epochs = std::to_string(epoch + 1);
  if (per_epoch) epochs += "/" + std::to_string(p.epochs);
  if (p.total_batches == 0) {
    // The root has not said how many batches the run has yet.
    std::snprintf(text, sizeof text, "cluster %d starting [%s]", p.cluster, bar.c_str());
    return text;
  }
  std::snprintf(text, sizeof text, "cluster %d epoch %s [%s] %llu/%llu loss %.4f", p.cluster,
                epochs.c_str(), bar.c_str(), static_cast<unsigned long long>(done),
                static_cast<unsigned long long>(of), p.loss);
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

}  // namespace ravnest::cli
