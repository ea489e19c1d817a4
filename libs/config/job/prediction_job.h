// The job `ravnest predict` runs (docs/predict.md): a training job's text made into a prediction
// over other data. Its [data] keeps the format and how to read it (input shape, scale, label
// column, ...) with `train` pointing at the data to predict on and no validation; its [train]
// keeps the batch size (or takes `batch_size`) and micro-batches, one epoch; [predict] is added;
// the tables a prediction has no use for ([scheduler], [ps], [sparse_optimizer]) go.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ravnest::config {

// Throws ConfigError naming `origin` when `job_toml` is not a job file (as parse_job would), or
// when `batch_size` is below 1.
std::string prediction_job_text(const std::string& job_toml, const std::string& origin,
                                const std::string& data_path,
                                std::optional<int64_t> batch_size = std::nullopt);

}  // namespace ravnest::config
