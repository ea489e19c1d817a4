// Fuzz target: the CSV reader (data::read_csv through load_dataset), plain or gzipped. The first
// input byte picks the [data] options (header, label column, input shape, scale, num_classes);
// the rest is the file.
#include <cstdint>

#include "tests/fuzz/dataset_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t options = data[0];
  ravnest::config::DataSpec spec;
  spec.header = options & 1;
  if (spec.header && (options & 2)) spec.label_column = "label";
  spec.label_index = (options & 4) ? 0 : -1;
  if (options & 8) spec.input_shape = {1, 2, 2};
  if (options & 16) spec.scale = 0.5;
  if (options & 32) spec.num_classes = 10;
  if (options & 64) spec.input_shape = {int64_t{1} << 32, int64_t{1} << 32, 2};  // wraps 64 bits
  const auto path = ravnest::fuzz::write_scratch("data.csv", data + 1, size - 1);
  ravnest::fuzz::check_dataset(spec, ravnest::config::DataFormat::kCsv, path);
  return 0;
}
