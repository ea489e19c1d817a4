// Dataset: the samples of a job's [data] section held in memory, read from CSV (optionally
// gzipped), MNIST idx files, CIFAR-10 binary batches, or tensors saved with torch.save.
// See docs/job-file.md for the formats and what each reader checks.
//
// Read errors are std::runtime_error with one line naming the file and what is wrong, e.g.
//   /data/digits.csv: line 7: expected 65 columns, got 64
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "libs/config/job/job_spec.h"

namespace ravnest::data {

// Samples picked from a dataset: one tensor per model input (first dimension = samples, in the
// order asked for), and the labels (first dimension = samples).
struct Batch {
  std::vector<at::Tensor> inputs;
  at::Tensor labels;
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
  // The samples [begin, end) of this batch (views, no copy), e.g. a micro-batch.
  Batch slice(int64_t begin, int64_t end) const;
};

class Dataset {
 public:
  Dataset() = default;
  // `inputs`: one tensor per model input, all with `labels.size(0)` rows. With
  // `bytes_to_unit_float`, uint8 inputs come out of get() as float32 divided by 255 (MNIST,
  // CIFAR-10 keep their pixels as bytes in memory). `origin` names the data in errors.
  Dataset(std::vector<at::Tensor> inputs, at::Tensor labels, std::string origin,
          bool bytes_to_unit_float = false);

  int64_t size() const { return labels_.defined() ? labels_.size(0) : 0; }
  // The samples at `indices` (each in [0, size())), in that order; copies.
  Batch get(const std::vector<int64_t>& indices) const;
  // The samples [start, start + count), e.g. for evaluation in order.
  Batch get_range(int64_t start, int64_t count) const;

  const std::string& origin() const { return origin_; }
  const std::vector<at::Tensor>& raw_inputs() const { return inputs_; }
  const at::Tensor& labels() const { return labels_; }

 private:
  Batch finish(std::vector<at::Tensor> inputs, at::Tensor labels) const;

  std::vector<at::Tensor> inputs_;
  at::Tensor labels_;
  std::string origin_;
  bool bytes_to_unit_float_ = false;
};

enum class Split { kTrain, kValidation };

// The job's training data (data.train) or validation data (data.validation, which must be set),
// read with the reader of data.format; labels checked against data.num_classes when set.
// `labels` kOptional (prediction): data files without labels are read too (read_csv's
// CsvOptions::labels_optional, read_tensors'); their labels are zeros, one per sample.
enum class Labels { kRequired, kOptional };
Dataset load_dataset(const config::DataSpec& spec, Split split,
                     Labels labels = Labels::kRequired);

// --- the readers, for direct use (paths as given; errors name them) ---

struct CsvOptions {
  bool header = true;
  std::string label_column;          // by name (header needed); empty: label_index
  int64_t label_index = -1;          // negative counts from the end
  std::vector<int64_t> input_shape;  // per sample; empty: [features]
  double scale = 1.0;
  int64_t num_classes = 0;           // > 0: labels must be integers in [0, num_classes)
  // Prediction: a file without the label column is read too (the label named is not in the
  // header, or, by index, every column is a feature of input_shape); its labels are zeros.
  bool labels_optional = false;
};
// Comma-separated numbers, gzip or plain (detected from the content). Features become float32
// (parsed as double, rounded to float, then multiplied by `scale` as a float32 tensor op);
// labels int64 when every label is an integer, else float32.
Dataset read_csv(const std::string& path, const CsvOptions& options);

// `path`: a directory holding {train|t10k}-images-idx3-ubyte[.gz] and the matching labels
// (also looked for under MNIST/raw/ and raw/), or an images file whose labels file is named
// alike with "labels-idx1" for "images-idx3". Images [N,1,rows,cols] uint8 -> float /255.
Dataset read_mnist(const std::string& path, Split split);

// `path`: one CIFAR-10 binary batch file, or a directory (or its cifar-10-batches-bin/) whose
// data_batch_*.bin form the training split and test_batch.bin the validation split.
// Images [N,3,32,32] uint8 -> float /255, labels int64 in [0,10).
Dataset read_cifar10(const std::string& path, Split split);

// A file written by torch.save holding a tuple (inputs, labels) or a dict {"inputs": ...,
// "labels": ...}; inputs are a tensor or a tuple of tensors (one per model input). With
// `labels_optional` (prediction) also the inputs alone: a tensor, or a tuple (inputs,).
Dataset read_tensors(const std::string& path, bool labels_optional = false);

// The bytes of a file, gunzipped when it is gzip (checked by content, not by name). The file must
// be a regular file: a FIFO or a device is refused ("<path>: is a FIFO, not a regular file")
// without blocking (base/regular_file.h).
std::string read_maybe_gzip(const std::string& path);

}  // namespace ravnest::data
