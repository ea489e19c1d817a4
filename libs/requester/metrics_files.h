// MetricsFiles: the requester's record of a job's progress events as files a TensorBoard or a
// CSV reader opens (docs/metrics.md). Under `dir` (the plan directory's metrics/job_<id>), one
// folder per cluster ("cluster_0", ...) and "evaluator" for a parameter server's evaluator, each
// with metrics.csv (metrics_csv.h) and an event file (base::TensorBoardWriter) of the scalars
// train/loss, train/lr, val/loss, val/accuracy. A folder is created when its first event comes.
//
// Steps count batches, so that training and validation share an axis: a step event's is the
// batches its cluster finished; a validation round's, the updates before it times
// `update_frequency` (the job's [train] update_frequency); the evaluator's, the servers'
// updates.
//
// Files are appended to as events arrive (a job followed again by `train --attach` adds to its
// folder); a job followed with --detach writes none. Not thread-safe: the requester's event
// loop calls it. A file that cannot be written throws std::runtime_error naming it; the caller
// decides (the requester reports it once and goes on without metrics).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "libs/base/tensorboard_writer.h"
#include "libs/requester/metrics_csv.h"
#include "libs/wire/node_report.h"

namespace ravnest::requester {

class MetricsFiles {
 public:
  MetricsFiles(std::string dir, int update_frequency);

  // Step and validation events are recorded; the others are not metrics.
  void record(const wire::NodeEvent& event, double wall_time);

  const std::string& dir() const { return dir_; }

 private:
  struct Run {
    std::unique_ptr<MetricsCsv> csv;
    std::unique_ptr<base::TensorBoardWriter> events;
  };
  Run& run(const std::string& name, double wall_time);

  std::string dir_;
  int update_frequency_;
  std::map<std::string, Run> runs_;
};

}  // namespace ravnest::requester
