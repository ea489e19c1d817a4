#include "libs/torch_support/torch_load_file.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

namespace ravnest::torch_support {

void write_torch_load_file(const c10::IValue& value,
                           const std::function<void(const void*, size_t)>& write) {
  // What torch::jit::pickle_save does, with tag_aggregates off. The pickle holds no tensor
  // bytes (those follow it as records of their own), so it is small.
  std::string pickle;
  torch::jit::Pickler pickler(
      [&](const char* bytes, size_t size) { pickle.append(bytes, size); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
      /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();

  caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, size_t size) {
    write(bytes, size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(),
                                     writer);
  writer.writeEndOfFile();
}

std::string torch_load_file(const c10::IValue& value) {
  std::string file;
  write_torch_load_file(value, [&](const void* bytes, size_t size) {
    file.append(static_cast<const char*>(bytes), size);
  });
  return file;
}

}  // namespace ravnest::torch_support
