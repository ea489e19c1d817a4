#include "libs/worker/compute_device.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include <ATen/Context.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include "libs/config/daemon/daemon_config.h"

namespace ravnest::worker {

c10::IValue to_device(const c10::IValue& value, const c10::Device& device) {
  auto move = [&](const at::Tensor& t) { return t.defined() ? t.to(device) : t; };
  return map_tensors(value, move);
}

void reduce_on_host(std::vector<WorkerPort::RingWork>& work,
                    const std::function<void(std::vector<WorkerPort::RingWork>&)>& reduce) {
  bool on_host = true;
  for (const auto& w : work) {
    for (const auto& t : w.tensors) on_host = on_host && t.device().is_cpu();
  }
  if (on_host) return reduce(work);
  std::vector<WorkerPort::RingWork> host = work;
  for (auto& w : host) {
    for (auto& t : w.tensors) t = t.to(c10::kCPU, /*non_blocking=*/false, /*copy=*/true);
  }
  reduce(host);
  for (size_t i = 0; i < work.size(); ++i) {
    for (size_t j = 0; j < work[i].tensors.size(); ++j) {
      work[i].tensors[j].copy_(host[i].tensors[j]);
    }
  }
}

bool prepare_cuda_environment(const std::string& device_name) {
  const auto parsed = config::parse_device(device_name);
  if (!parsed || !parsed->cuda || std::getenv("CUBLAS_WORKSPACE_CONFIG") != nullptr) return false;
  return ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0) == 0;
}

DeterministicAlgorithms::DeterministicAlgorithms(bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
  auto& context = at::globalContext();
  algorithms_ = context.deterministicAlgorithms();
  warn_only_ = context.deterministicAlgorithmsWarnOnly();
  cudnn_deterministic_ = context.deterministicCuDNN();
  cudnn_benchmark_ = context.benchmarkCuDNN();
  context.setDeterministicAlgorithms(true, /*warn_only=*/false);
  context.setDeterministicCuDNN(true);
  context.setBenchmarkCuDNN(false);
}

DeterministicAlgorithms::~DeterministicAlgorithms() {
  if (!enabled_) return;
  auto& context = at::globalContext();
  context.setDeterministicAlgorithms(algorithms_, warn_only_);
  context.setDeterministicCuDNN(cudnn_deterministic_);
  context.setBenchmarkCuDNN(cudnn_benchmark_);
}

std::optional<std::string> out_of_memory(const std::exception& e) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  const std::string text = torch_error ? torch_error->what_without_backtrace() : e.what();
  // LibTorch's CUDA allocator says "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has
  // ..."; the TorchScript interpreter rethrows it as a std::runtime_error with that text.
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) == nullptr &&
      text.find("CUDA out of memory") == std::string::npos) {
    return std::nullopt;
  }
  const std::string tried = "Tried to allocate ";
  const size_t at = text.find(tried);
  if (at == std::string::npos) return std::string();
  // Up to the end of its sentence: "Tried to allocate 2.00 GiB. GPU 0 has ..." (2.x) or
  // "Tried to allocate 2.00 GiB (GPU 0; ...)" (1.13).
  size_t end = std::string::npos;
  for (const char* stop : {". ", " (", "\n", ";"}) end = std::min(end, text.find(stop, at));
  std::string what = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
  while (!what.empty() && (what.back() == '.' || what.back() == ' ')) what.pop_back();
  what[0] = 't';
  return what;
}

}  // namespace ravnest::worker
