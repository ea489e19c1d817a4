#include "libs/daemon/tracker/hardware_probe.h"

#include <ifaddrs.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <torch/torch.h>
#include <spdlog/spdlog.h>

#include "libs/base/byte_size.h"
#include "libs/base/clock.h"
#include "libs/base/atomic_file.h"
#include "libs/config/daemon/memory_budget.h"
#include "libs/tracker/reachable_addresses.h"
#include "libs/training/device_memory.h"

namespace ravnest::daemon {

namespace {

std::vector<std::string> interface_ipv4() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) != nullptr) out.emplace_back(text);
  }
  freeifaddrs(list);
  return out;
}

// Float32 matrix products of 256 x 256 on `device`, GFLOP/s over about `seconds`.
double measure_gflops(const c10::Device& device, double seconds) {
  torch::NoGradGuard no_grad;
  constexpr int64_t n = 256;
  const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  auto a = torch::rand({n, n}, options);
  auto b = torch::rand({n, n}, options);
  auto c = torch::mm(a, b);  // warm-up
  if (device.is_cuda()) c.cpu();
  uint64_t products = 0;
  const double start = base::now_seconds();
  double elapsed = 0;
  do {
    for (int i = 0; i < 8; ++i) c = torch::mm(a, b);
    if (device.is_cuda()) c.cpu();  // waits for the device
    products += 8;
    elapsed = base::now_seconds() - start;
  } while (elapsed < seconds);
  return 2.0 * n * n * n * static_cast<double>(products) / elapsed / 1e9;
}

}  // namespace

tracker::Registration measure_registration(const std::string& name,
                                           const std::string& listen_host, unsigned port,
                                           int64_t memory_limit, const c10::Device& device,
                                           double compute_seconds) {
  tracker::Registration r;
  r.name = name;
  r.addresses = tracker::reachable_addresses(listen_host, port, interface_ipv4());
  auto& h = r.hardware;
  h.declared_memory_bytes = memory_limit > 0 ? static_cast<uint64_t>(memory_limit) : 0;
  std::string meminfo;
  try {
    meminfo = base::read_file("/proc/meminfo");
  } catch (const std::exception&) {
  }
  const int64_t available = config::parse_meminfo_bytes(meminfo, "MemAvailable");
  auto budget = config::choose_budget(memory_limit, config::read_cgroup_memory(), available);
  if (budget.source == "MemTotal") budget.source = "MemAvailable";  // what was passed in its place
  h.memory_bytes = budget.bytes > 0 ? static_cast<uint64_t>(budget.bytes) : 0;
  h.memory_source = budget.source;
  if (memory_limit > 0 && budget.source != "memory_limit") {
    spdlog::warn("memory_limit {} is more than this host has now ({}, {}): the tracker is told "
                 "{}, as measured",
                 base::format_bytes(static_cast<uint64_t>(memory_limit)),
                 base::format_bytes(h.memory_bytes), budget.source,
                 base::format_bytes(h.memory_bytes));
  }
  if (training::device_memory_measurable(device)) {
    h.gpu_memory_bytes.push_back(
        static_cast<uint64_t>(training::read_device_memory(device).total_bytes));
  }
  h.gflops = measure_gflops(device, compute_seconds);
  spdlog::info("measured for the tracker: {} memory ({}), {} GPU(s), {:.1f} GFLOP/s float32 "
               "matmul on {}, reachable at {}",
               base::format_bytes(h.memory_bytes), h.memory_source, h.gpu_memory_bytes.size(),
               h.gflops, device.str(), r.addresses.front());
  return r;
}

}  // namespace ravnest::daemon
