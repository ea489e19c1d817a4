#include "libs/daemon/compute_device.h"

#include <stdexcept>

#include <ATen/Context.h>
#include <c10/core/DeviceGuard.h>

#include "libs/config/daemon_config.h"

namespace ravnest::runtime {

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

c10::IValue to_device(const c10::IValue& value, const c10::Device& device) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    return t.defined() ? c10::IValue(t.to(device)) : value;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> items;
    for (const auto& item : value.toTupleRef().elements()) items.push_back(to_device(item, device));
    return c10::ivalue::Tuple::create(std::move(items));
  }
  if (value.isList()) {
    auto list = value.toList();
    c10::impl::GenericList out(list.elementType());
    out.reserve(list.size());
    for (const c10::IValue item : list) out.push_back(to_device(item, device));
    return out;
  }
  if (value.isGenericDict()) {
    auto dict = value.toGenericDict();
    c10::impl::GenericDict out(dict.keyType(), dict.valueType());
    for (const auto& entry : dict) out.insert(entry.key(), to_device(entry.value(), device));
    return out;
  }
  return value;
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

}  // namespace ravnest::runtime
