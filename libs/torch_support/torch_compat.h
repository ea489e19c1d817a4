// The one place where the LibTorch versions this project builds against differ: Debian's
// LibTorch 1.13 (CPU only) and a current LibTorch 2.x (the PyPI torch wheel, with CUDA).
// Everything else is written against the API both share. cmake/TorchFlavor.cmake defines
// RAVNEST_WITH_CUDA for every target that links LibTorch.
#pragma once

#include <string>

#include <ATen/autocast_mode.h>
#include <torch/optim/optimizer.h>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <ATen/ops/linalg_vector_norm.h>
#else
#include <ATen/ops/frobenius_norm.h>
#endif

#ifndef RAVNEST_WITH_CUDA
#error "RAVNEST_WITH_CUDA comes from cmake/TorchFlavor.cmake (link ravnest_torch_compat)"
#endif

namespace ravnest::torch_support {

// The LibTorch this binary was compiled against, "1.13.0" or "2.15.0".
inline constexpr const char* kTorchVersion = TORCH_VERSION;
inline constexpr int kTorchMajor = TORCH_VERSION_MAJOR;
inline constexpr int kTorchMinor = TORCH_VERSION_MINOR;

// Whether this build compiled its CUDA paths (LibTorch has libtorch_cuda). A CUDA build may
// still find no GPU at run time: ask at::hasCUDA() for that.
inline constexpr bool kWithCuda = RAVNEST_WITH_CUDA != 0;

// "LibTorch 2.15.0 with CUDA" or "LibTorch 1.13.0, CPU only": what --version says of the build.
inline std::string torch_description() {
  return std::string("LibTorch ") + kTorchVersion + (kWithCuda ? " with CUDA" : ", CPU only");
}

// How Python's torch.optim of this version (its single-tensor path, the default for tensors on
// the CPU) moves a running average towards `value`: average.lerp_(value, 1 - decay) in 2.x
// (checked on 2.15), average.mul_(decay).add_(value, 1 - decay) in 1.13, which is also what
// LibTorch's C++ optimizers do in both. The two round differently from the second update on.
// Adam's and AdamW's first moment (decay beta1), centered RMSprop's average of gradients (decay
// alpha).
inline void python_running_average(at::Tensor& average, const at::Tensor& value, double decay) {
#if TORCH_VERSION_MAJOR >= 2
  average.lerp_(value, 1 - decay);
#else
  average.mul_(decay).add_(value, 1 - decay);
#endif
}

// What Python's torch.norm(t) (no p, no dim) computes in this version, which
// torch_optimizer.Lamb calls: linalg.vector_norm(t, 2) in 2.x, frobenius_norm(t, dim=()) in 1.13.
inline at::Tensor python_norm(const at::Tensor& t) {
#if TORCH_VERSION_MAJOR >= 2
  return at::linalg_vector_norm(t, 2);
#else
  return at::frobenius_norm(t, at::IntArrayRef{}, /*keepdim=*/false);
#endif
}

// The key under which Optimizer::state() keeps `parameter`'s state: 1.13 keys it by the
// TensorImpl's address printed as a string (c10::guts::to_string), 2.x by the address itself.
#if TORCH_VERSION_MAJOR >= 2
inline void* optimizer_state_key(const at::Tensor& parameter) {
  return parameter.unsafeGetTensorImpl();
}
#else
inline std::string optimizer_state_key(const at::Tensor& parameter) {
  return c10::guts::to_string(parameter.unsafeGetTensorImpl());
}
#endif

// `parameter`'s state of type State in an optimizer's `states` (its state_), made by `make` (a
// std::unique_ptr<State>) before the parameter's first step.
template <typename State, typename StateMap, typename Make>
State& optimizer_state(StateMap& states, const at::Tensor& parameter, Make make) {
  const auto key = optimizer_state_key(parameter);
  auto found = states.find(key);
  if (found == states.end()) found = states.emplace(key, make()).first;
  return static_cast<State&>(*found->second);
}

// Autocast on this thread for one device type (kCPU or kCUDA): 1.13 has a switch and a dtype a
// device type (set_cpu_enabled, set_autocast_gpu_dtype...), 2.x one pair taking the device type.
#if TORCH_VERSION_MAJOR >= 2
inline bool autocast_enabled(c10::DeviceType device) {
  return at::autocast::is_autocast_enabled(device);
}
inline at::ScalarType autocast_dtype(c10::DeviceType device) {
  return at::autocast::get_autocast_dtype(device);
}
inline void set_autocast(c10::DeviceType device, bool enabled, at::ScalarType dtype) {
  at::autocast::set_autocast_dtype(device, dtype);
  at::autocast::set_autocast_enabled(device, enabled);
}
#else
inline bool autocast_enabled(c10::DeviceType device) {
  return device == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled()
                                        : at::autocast::is_enabled();
}
inline at::ScalarType autocast_dtype(c10::DeviceType device) {
  return device == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                        : at::autocast::get_autocast_gpu_dtype();
}
inline void set_autocast(c10::DeviceType device, bool enabled, at::ScalarType dtype) {
  if (device == c10::DeviceType::CPU) {
    at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(enabled);
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(enabled);
  }
}
#endif

}  // namespace ravnest::torch_support
