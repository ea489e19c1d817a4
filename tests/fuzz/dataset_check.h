// What the dataset fuzz targets share: the dataset of a job's [data] section read as a daemon's
// root reads it (data::load_dataset), the errors it may throw, and what a dataset that was
// accepted must hold.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "libs/base/config_error.h"
#include "libs/config/job/job_spec.h"
#include "libs/data/dataset.h"
#include "tests/fuzz/fuzz_support.h"

namespace ravnest::fuzz {

// Reads the data at `path` as `format` with `spec`'s other fields; accepted errors are the
// documented ones (std::runtime_error, ConfigError), one line. An accepted dataset has as many
// rows in every input as labels, and its first and last samples can be taken.
inline void check_dataset(config::DataSpec spec, config::DataFormat format, const std::string& path) {
  spec.format = format;
  spec.train.raw = path;
  spec.train.resolved = path;
  data::Dataset dataset;
  try {
    dataset = data::load_dataset(spec, data::Split::kTrain);
  } catch (const std::runtime_error& e) {  // ConfigError too
    check_one_line(e.what());
    return;
  }
  const int64_t n = dataset.size();
  if (n <= 0) std::abort();
  for (const auto& input : dataset.raw_inputs()) {
    if (input.dim() == 0 || input.size(0) != n) std::abort();
  }
  const auto batch = dataset.get({0, n - 1});
  if (batch.size() != 2) std::abort();
  (void)dataset.get_range(0, n);
}

}  // namespace ravnest::fuzz
