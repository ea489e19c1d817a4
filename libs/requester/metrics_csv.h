// MetricsCsv: one run's metrics as CSV, a row appended and flushed per event, for a spreadsheet
// or pandas.read_csv. Columns (header first):
//   wall_time,step,epoch,loss,lr,val_loss,val_accuracy
// A training row fills loss and lr (lr empty when unknown); a validation row val_loss and
// val_accuracy (empty when the task has no classes). `step` counts batches (metrics_files.h).
// Numbers are written with 17 significant digits: read back, they are the doubles sent.
// Not thread-safe. Errors: std::runtime_error naming the file.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

namespace ravnest::requester {

struct MetricsRow {
  double wall_time = 0;  // seconds since the epoch
  int64_t step = 0;
  uint32_t epoch = 0;
  std::optional<double> loss, lr, val_loss, val_accuracy;
};

class MetricsCsv {
 public:
  // Opens `path` for appending; a new (or empty) file gets the header first.
  explicit MetricsCsv(const std::string& path);
  void append(const MetricsRow& row);
  const std::string& path() const { return path_; }

  static const char* header();  // without the line's end
  static std::string line(const MetricsRow& row);  // one row, its '\n' included

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace ravnest::requester
