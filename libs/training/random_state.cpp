#include "libs/training/random_state.h"

#include <mutex>

#include <ATen/Context.h>

namespace ravnest::training {

namespace {

at::Generator generator_of(const c10::Device& device) {
  // defaultGenerator of a CUDA device without an index is the current device's: name it.
  return at::globalContext().defaultGenerator(device);
}

}  // namespace

at::Tensor random_state(const c10::Device& device) {
  auto generator = generator_of(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_random_state(const c10::Device& device, const at::Tensor& state) {
  auto generator = generator_of(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

}  // namespace ravnest::training
