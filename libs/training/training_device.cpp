#include "libs/training/training_device.h"

#include <stdexcept>

#include <ATen/Context.h>
#include <c10/core/DeviceGuard.h>

#include "libs/config/daemon/daemon_config.h"

namespace ravnest::training {

c10::Device compute_device(const std::string& name) {
  const auto parsed = config::parse_device(name);
  if (!parsed) throw std::runtime_error("device: \"" + name + "\" is not cpu, cuda or cuda:N");
  if (!parsed->cuda) return c10::Device(c10::kCPU);
  if (!at::hasCUDA()) {
    throw std::runtime_error("device: \"" + name +
                             "\" asks for CUDA, but this LibTorch was built without it (or finds "
                             "no GPU); use device = \"cpu\"");
  }
  const int count = static_cast<int>(c10::impl::getDeviceGuardImpl(c10::kCUDA)->deviceCount());
  if (parsed->index >= count) {
    throw std::runtime_error("device: \"" + name + "\": this machine has " +
                             std::to_string(count) + " CUDA device(s)");
  }
  return parsed->index < 0 ? c10::Device(c10::kCUDA)
                           : c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(parsed->index));
}

}  // namespace ravnest::training
