// Fuzz target: the tensors reader (data::read_tensors through load_dataset): a file written by
// torch.save (a zip archive holding a pickle and the tensors' storages), plain or gzipped.
// Input: the file.
#include <cstdint>

#include "tests/fuzz/dataset_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = ravnest::fuzz::write_scratch("data.pt", data, size);
  ravnest::fuzz::check_dataset({}, ravnest::config::DataFormat::kTensors, path);
  return 0;
}
