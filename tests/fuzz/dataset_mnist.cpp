// Fuzz target: the MNIST idx reader (data::read_mnist through load_dataset), plain or gzipped.
// Input: the labels file's length (2 bytes, little-endian), the labels file, the images file;
// they are written as train-labels-idx1-ubyte and train-images-idx3-ubyte of one directory.
#include <algorithm>
#include <cstdint>

#include "tests/fuzz/dataset_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t labels = std::min<size_t>(size - 2, data[0] | (size_t{data[1]} << 8));
  namespace fz = ravnest::fuzz;
  fz::write_scratch("train-labels-idx1-ubyte", data + 2, labels);
  fz::write_scratch("train-images-idx3-ubyte", data + 2 + labels, size - 2 - labels);
  ravnest::config::DataSpec spec;
  spec.num_classes = 10;
  fz::check_dataset(spec, ravnest::config::DataFormat::kMnist, fz::scratch_dir().string());
  return 0;
}
