#include "libs/training/random_state.h"

#include <mutex>

#include <ATen/CPUGeneratorImpl.h>

namespace ravnest::runtime {

at::Tensor cpu_random_state() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_cpu_random_state(const at::Tensor& state) {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

}  // namespace ravnest::runtime
