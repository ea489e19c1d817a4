// Fuzz target: the CIFAR-10 binary batch reader (data::read_cifar10 through load_dataset), plain
// or gzipped. Input: one batch file.
#include <cstdint>

#include "tests/fuzz/dataset_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = ravnest::fuzz::write_scratch("data_batch_1.bin", data, size);
  ravnest::config::DataSpec spec;
  spec.num_classes = 10;
  ravnest::fuzz::check_dataset(spec, ravnest::config::DataFormat::kCifar10, path);
  return 0;
}
