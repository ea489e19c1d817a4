#include "libs/data/dataset_files.h"

#include <algorithm>

#include "libs/base/config_error.h"
#include "libs/base/regular_file.h"
#include "libs/data/reader_internal.h"

namespace ravnest::data {

namespace fs = std::filesystem;

namespace {

// `file` relative to `root` (which holds it).
std::string relative_to(const fs::path& root, const std::string& file) {
  return fs::path(file).lexically_relative(root).generic_string();
}

}  // namespace

DatasetFiles dataset_files(const config::DataSpec& spec, Split split) {
  const config::JobPath& where = split == Split::kTrain ? spec.train : spec.validation;
  if (where.empty()) {
    throw base::ConfigError(std::string("data.") +
                              (split == Split::kTrain ? "train" : "validation") + ": not set");
  }
  const fs::path path = fs::path(where.resolved).lexically_normal();
  std::error_code ec;
  const bool directory = fs::is_directory(path, ec);
  DatasetFiles out;
  out.root = directory ? path : path.parent_path();
  out.entry = directory ? "" : path.filename().string();
  std::vector<std::string> opened;
  switch (spec.format) {
    case config::DataFormat::kMnist: {
      const auto [images, labels] = detail::mnist_files(path.string(), split);
      opened = {images, labels};
      break;
    }
    case config::DataFormat::kCifar10:
      opened = detail::cifar10_files(path.string(), split);
      break;
    default:
      if (directory) detail::fail(path.string(), "a directory, where a file is expected");
      opened = {path.string()};
      break;
  }
  const std::string field =
      std::string("data.") + (split == Split::kTrain ? "train" : "validation");
  for (const auto& file : opened) {
    // Before anything reads or ships it: a FIFO would block `ravnest train`, /dev/zero never ends.
    const std::string kind = base::not_regular_file(file);
    if (!kind.empty()) {
      throw base::ConfigError(field + ": " + file + " is " + kind +
                                ", not a regular file; data is read from regular files only");
    }
    out.files.push_back(relative_to(out.root, fs::path(file).lexically_normal().string()));
  }
  std::sort(out.files.begin(), out.files.end());
  out.files.erase(std::unique(out.files.begin(), out.files.end()), out.files.end());
  return out;
}

}  // namespace ravnest::data
