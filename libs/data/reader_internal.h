// Private to libs/data: what the readers of dataset.h (one file each: csv_reader.cpp,
// mnist_reader.cpp, cifar10_reader.cpp, tensors_reader.cpp) share.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "libs/data/dataset.h"

namespace ravnest::data::detail {

// Every read error: one line naming the file (dataset.h).
[[noreturn]] inline void fail(const std::string& origin, const std::string& message) {
  throw std::runtime_error(origin + ": " + message);
}

// "[2, 3]"
inline std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// The files read_mnist opens: the images file and its labels file (dataset_files.h ships both).
std::pair<std::string, std::string> mnist_files(const std::string& path, Split split);

// The batch files read_cifar10 opens, in order.
std::vector<std::string> cifar10_files(const std::string& path, Split split);

// A torch.save file holding a tensor, or a tuple or list of tensors, read as safely as
// read_tensors reads one (tensors_reader.cpp): each contiguous, within its storage. Errors name
// the path ("PATH: holds a String, expected a tensor or a list of tensors").
std::vector<at::Tensor> read_saved_tensors(const std::string& path);

}  // namespace ravnest::data::detail
