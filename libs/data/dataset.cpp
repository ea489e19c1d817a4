// Batch, Dataset, load_dataset() and read_maybe_gzip(); each reader has its own file
// (csv_reader.cpp, mnist_reader.cpp, cifar10_reader.cpp, tensors_reader.cpp).
#include "libs/data/dataset.h"

#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include <ATen/ATen.h>

#include "libs/base/config_error.h"
#include "libs/base/regular_file.h"
#include "libs/data/reader_internal.h"

namespace ravnest::data {
namespace {

namespace fs = std::filesystem;
using detail::fail;

at::Tensor index_tensor(const std::vector<int64_t>& indices) {
  return at::from_blob(const_cast<int64_t*>(indices.data()), {static_cast<int64_t>(indices.size())},
                       at::TensorOptions().dtype(at::kLong))
      .clone();
}

// Labels must be integers in [0, num_classes); `what(i)` names sample i in the message.
template <typename Describe>
void check_label_range(const at::Tensor& labels, int64_t num_classes, const std::string& origin,
                       Describe what) {
  if (num_classes <= 0) return;
  at::Tensor flat = labels.reshape({-1}).to(at::kDouble).contiguous();
  const double* v = flat.data_ptr<double>();
  const int64_t per_sample = labels.dim() == 0 || labels.size(0) == 0 ? 1 : flat.numel() / labels.size(0);
  for (int64_t i = 0; i < flat.numel(); ++i) {
    if (v[i] != std::floor(v[i]) || v[i] < 0 || v[i] >= static_cast<double>(num_classes)) {
      std::ostringstream value;
      value << v[i];
      fail(origin, what(i / per_sample) + ": label " + value.str() + " is out of range [0, " +
                       std::to_string(num_classes) + ")");
    }
  }
}

}  // namespace

// ------------------------------------------------------------------------------------ Batch

Batch Batch::slice(int64_t begin, int64_t end) const {
  Batch out;
  for (const auto& t : inputs) out.inputs.push_back(t.slice(0, begin, end));
  out.labels = labels.slice(0, begin, end);
  return out;
}

// ---------------------------------------------------------------------------------- Dataset

Dataset::Dataset(std::vector<at::Tensor> inputs, at::Tensor labels, std::string origin,
                 bool bytes_to_unit_float)
    : inputs_(std::move(inputs)), labels_(std::move(labels)), origin_(std::move(origin)),
      bytes_to_unit_float_(bytes_to_unit_float) {
  if (!labels_.defined() || labels_.dim() == 0) fail(origin_, "the labels must have one row per sample");
  if (inputs_.empty()) fail(origin_, "no inputs");
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if (!inputs_[i].defined() || inputs_[i].dim() == 0 || inputs_[i].size(0) != labels_.size(0)) {
      fail(origin_, "input " + std::to_string(i) + " has " +
                        (inputs_[i].defined() && inputs_[i].dim() ? std::to_string(inputs_[i].size(0)) : "no") +
                        " rows but there are " + std::to_string(labels_.size(0)) + " labels");
    }
  }
  if (labels_.size(0) == 0) fail(origin_, "empty dataset");
}

Batch Dataset::finish(std::vector<at::Tensor> inputs, at::Tensor labels) const {
  Batch batch;
  for (auto& t : inputs) {
    if (bytes_to_unit_float_ && t.scalar_type() == at::kByte) t = t.to(at::kFloat).div_(255);
    batch.inputs.push_back(std::move(t));
  }
  batch.labels = std::move(labels);
  return batch;
}

Batch Dataset::get(const std::vector<int64_t>& indices) const {
  const int64_t n = size();
  for (int64_t i : indices) {
    if (i < 0 || i >= n) {
      throw std::out_of_range(origin_ + ": sample index " + std::to_string(i) + " is out of range [0, " +
                              std::to_string(n) + ")");
    }
  }
  const at::Tensor index = index_tensor(indices);
  std::vector<at::Tensor> inputs;
  for (const auto& t : inputs_) inputs.push_back(t.index_select(0, index));
  return finish(std::move(inputs), labels_.index_select(0, index));
}

Batch Dataset::get_range(int64_t start, int64_t count) const {
  if (start < 0 || count < 0 || start + count > size()) {
    throw std::out_of_range(origin_ + ": samples [" + std::to_string(start) + ", " +
                            std::to_string(start + count) + ") are out of range [0, " +
                            std::to_string(size()) + ")");
  }
  std::vector<at::Tensor> inputs;
  for (const auto& t : inputs_) inputs.push_back(t.narrow(0, start, count).clone());
  return finish(std::move(inputs), labels_.narrow(0, start, count).clone());
}

// ------------------------------------------------------------------------------ read helpers

std::string read_maybe_gzip(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail(path, "is a directory, expected a file");
  if (!fs::exists(path, ec)) fail(path, "no such file");
  // Never a FIFO (the open would block) nor a device (/dev/zero never ends): refused in one line.
  const int fd = base::open_regular_file(path);
  gzFile file = gzdopen(fd, "rb");
  if (!file) {
    ::close(fd);
    fail(path, std::string("cannot open: ") + std::strerror(errno));
  }
  gzbuffer(file, 1 << 17);
  std::string out;
  std::vector<char> chunk(1 << 20);
  while (true) {
    const int got = gzread(file, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (got < 0) {
      int code = 0;
      std::string message = gzerror(file, &code);
      gzclose(file);
      fail(path, "read error: " + message);
    }
    if (got == 0) break;
    out.append(chunk.data(), static_cast<size_t>(got));
  }
  int code = 0;
  const char* message = gzerror(file, &code);
  if (code != Z_OK && code != Z_BUF_ERROR) {
    std::string text = message;
    gzclose(file);
    fail(path, "read error: " + text);
  }
  // A truncated gzip stream ends without error from gzread; gzclose reports it.
  if (gzclose(file) != Z_OK) fail(path, "read error: truncated or corrupt gzip data");
  return out;
}

// --------------------------------------------------------------------------- load_dataset

Dataset load_dataset(const config::DataSpec& spec, Split split, Labels labels) {
  const config::JobPath& where = split == Split::kTrain ? spec.train : spec.validation;
  if (where.empty()) {
    throw base::ConfigError(std::string("data.") + (split == Split::kTrain ? "train" : "validation") +
                              ": not set");
  }
  const std::string& path = where.resolved;
  const int64_t num_classes = spec.num_classes.value_or(0);
  switch (spec.format) {
    case config::DataFormat::kCsv: {
      CsvOptions options;
      options.header = spec.header;
      options.label_column = spec.label_column;
      options.label_index = spec.label_index;
      options.input_shape = spec.input_shape;
      options.scale = spec.scale;
      options.num_classes = num_classes;
      options.labels_optional = labels == Labels::kOptional;
      return read_csv(path, options);
    }
    case config::DataFormat::kMnist: {
      Dataset d = read_mnist(path, split);
      check_label_range(d.labels(), num_classes, d.origin(),
                        [](int64_t i) { return "image " + std::to_string(i + 1); });
      return d;
    }
    case config::DataFormat::kCifar10: {
      Dataset d = read_cifar10(path, split);
      check_label_range(d.labels(), num_classes, d.origin(),
                        [](int64_t i) { return "image " + std::to_string(i + 1); });
      return d;
    }
    case config::DataFormat::kTensors: {
      Dataset d = read_tensors(path, labels == Labels::kOptional);
      check_label_range(d.labels(), num_classes, d.origin(),
                        [](int64_t i) { return "sample " + std::to_string(i + 1); });
      return d;
    }
  }
  throw std::logic_error("load_dataset: unknown format");
}

}  // namespace ravnest::data
