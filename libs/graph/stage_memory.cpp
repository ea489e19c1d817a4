#include "libs/graph/stage_memory.h"

#include <stdexcept>

#include <torch/csrc/jit/serialization/pickle.h>

#include "libs/base/atomic_file.h"
#include "libs/torch_support/torch_errors.h"

namespace ravnest::graph {

void save_probe_inputs(const std::string& path,
                       const std::vector<std::vector<c10::IValue>>& micro_batches) {
  c10::impl::GenericList all(c10::AnyType::get());
  for (const auto& inputs : micro_batches) {
    c10::impl::GenericList one(c10::AnyType::get());
    for (const auto& value : inputs) {
      // Received tensors are leaves of their own: no graph, no gradient travels in the file.
      one.push_back(value.isTensor() ? c10::IValue(value.toTensor().detach()) : value);
    }
    all.push_back(c10::IValue(one));
  }
  const std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(all));
  base::write_file_atomically(path, std::string(bytes.begin(), bytes.end()));
}

std::vector<std::vector<c10::IValue>> load_probe_inputs(const std::string& path) {
  const std::string text = base::read_file(path);
  std::vector<std::vector<c10::IValue>> micro_batches;
  try {
    const c10::IValue value = torch::jit::pickle_load(std::vector<char>(text.begin(), text.end()));
    for (const auto& inputs : value.toListRef()) {
      std::vector<c10::IValue> one;
      for (const auto& input : inputs.toListRef()) one.push_back(input);
      micro_batches.push_back(std::move(one));
    }
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": not the inputs of a memory probe (" + torch_support::torch_message(e) +
                             ")");
  }
  if (micro_batches.empty()) throw std::runtime_error(path + ": holds no micro-batch");
  return micro_batches;
}

}  // namespace ravnest::graph
