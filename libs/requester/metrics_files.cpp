#include "libs/requester/metrics_files.h"

#include <cmath>
#include <filesystem>

namespace ravnest::requester {

MetricsFiles::MetricsFiles(std::string dir, int update_frequency)
    : dir_(std::move(dir)), update_frequency_(update_frequency < 1 ? 1 : update_frequency) {}

MetricsFiles::Run& MetricsFiles::run(const std::string& name, double wall_time) {
  auto found = runs_.find(name);
  if (found != runs_.end()) return found->second;
  const std::string folder = (std::filesystem::path(dir_) / name).string();
  Run r;
  r.events = std::make_unique<base::TensorBoardWriter>(folder, wall_time);  // creates the folder
  r.csv = std::make_unique<MetricsCsv>((std::filesystem::path(folder) / "metrics.csv").string());
  return runs_.emplace(name, std::move(r)).first->second;
}

void MetricsFiles::record(const wire::NodeEvent& sent, double wall_time) {
  const auto& e = sent.event;
  const bool evaluator = sent.cluster < 0;
  if (e.kind == wire::EventKind::kStep && !evaluator) {
    Run& r = run("cluster_" + std::to_string(sent.cluster), wall_time);
    MetricsRow row;
    row.wall_time = wall_time;
    row.step = static_cast<int64_t>(e.samples);  // the leaf's batches finished (LeafMetrics)
    row.epoch = e.epoch;
    row.loss = e.loss;
    if (std::isfinite(e.lr)) row.lr = e.lr;
    r.csv->append(row);
    r.events->add_scalar("train/loss", row.step, e.loss, wall_time);
    if (row.lr) r.events->add_scalar("train/lr", row.step, *row.lr, wall_time);
  } else if (e.kind == wire::EventKind::kValidation) {
    Run& r = run(evaluator ? std::string("evaluator") : "cluster_" + std::to_string(sent.cluster), wall_time);
    MetricsRow row;
    row.wall_time = wall_time;
    row.step = static_cast<int64_t>(e.step) * (evaluator ? 1 : update_frequency_);
    row.epoch = e.epoch;
    row.val_loss = e.loss;
    if (std::isfinite(e.accuracy)) row.val_accuracy = e.accuracy;
    r.csv->append(row);
    r.events->add_scalar("val/loss", row.step, e.loss, wall_time);
    if (row.val_accuracy) r.events->add_scalar("val/accuracy", row.step, *row.val_accuracy, wall_time);
  }
}

}  // namespace ravnest::requester
