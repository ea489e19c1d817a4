// The files a dataset reader opens for a job's training or validation data, so that the
// requester ships every one of them and nothing else: an MNIST images file comes with its labels
// file, a CIFAR-10 directory with its batch files, a CSV or tensors file alone.
//
// Errors are the readers' (dataset.h): one line naming the path and what is missing.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "libs/config/job/job_spec.h"
#include "libs/data/dataset.h"

namespace ravnest::data {

struct DatasetFiles {
  std::filesystem::path root;      // the directory the files are relative to
  std::string entry;               // the job's path relative to root; "" when it is root itself
  std::vector<std::string> files;  // relative to root ("MNIST/raw/train-images-idx3-ubyte"),
                                   // sorted, without duplicates
};

// The files load_dataset(spec, split) reads (data.train or data.validation, which must be set).
// One that is not a regular file (a FIFO, a device) is refused: ConfigError
// "data.train: /tmp/d.csv is a FIFO, not a regular file; ...".
DatasetFiles dataset_files(const config::DataSpec& spec, Split split);

}  // namespace ravnest::data
