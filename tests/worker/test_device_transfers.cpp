// device_transfers.h: on the CPU the identity, in order; on a GPU (where one is found) pinned
// copies on the copy stream, bit-equal and in order. Also compute_device.h's exactness knobs and
// out-of-memory errors, which need no GPU.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <ATen/Context.h>
#include <c10/util/Exception.h>
#include <torch/torch.h>

#include "libs/worker/compute_device.h"
#include "libs/worker/device_transfers.h"
#include "libs/wire/value_codec.h"

using namespace ravnest;
using worker::DeviceTransfers;
using worker::TransferMessage;

namespace {

TransferMessage message_with(uint32_t step, std::vector<at::Tensor> tensors) {
  TransferMessage m;
  m.kind = wire::TransferKind::kActivations;
  m.batch.step = step;
  for (size_t i = 0; i < tensors.size(); ++i) {
    m.values.emplace_back(static_cast<uint32_t>(i), c10::IValue(tensors[i]));
  }
  return m;
}

// Tensors of several dtypes and layouts, made on the CPU from a fixed seed.
std::vector<at::Tensor> samples() {
  torch::manual_seed(7);
  return {torch::randn({64, 33}), torch::randn({5, 7}, torch::kFloat64).t(),
          torch::randint(0, 1000, {257}, torch::kInt64), torch::empty({0, 3}),
          torch::randn({3, 4, 5}).to(torch::kHalf)};
}

bool has_cuda() {
  if (at::hasCUDA()) return true;
  WARN("skipped: no CUDA device");
  return false;
}

}  // namespace

TEST_CASE("DeviceTransfers on the CPU: the identity, in order", "[daemon][device]") {
  std::vector<TransferMessage> sent;
  DeviceTransfers transfers(c10::Device(c10::kCPU),
                            [&](TransferMessage m) { sent.push_back(std::move(m)); });
  const auto tensors = samples();
  for (uint32_t step = 0; step < 5; ++step) {
    transfers.send(message_with(step, tensors));
    // Handed over at once: nothing waits on the CPU.
    REQUIRE(sent.size() == step + 1);
    CHECK(transfers.pending() == 0);
  }
  transfers.poll();
  transfers.flush();
  REQUIRE(sent.size() == 5);
  for (uint32_t step = 0; step < 5; ++step) {
    CHECK(sent[step].batch.step == step);
    REQUIRE(sent[step].values.size() == tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      // The very tensors, not copies (and so not pinned).
      const at::Tensor t = sent[step].values[i].second.toTensor();
      CHECK(t.unsafeGetTensorImpl() == tensors[i].unsafeGetTensorImpl());
    }
  }
  // Incoming: the same tensors, also inside tuples.
  c10::IValue tuple = c10::ivalue::Tuple::create({tensors[0], c10::IValue(2)});
  const c10::IValue arrived = transfers.to_device(tuple);
  CHECK(arrived.toTupleRef().elements()[0].toTensor().data_ptr() == tensors[0].data_ptr());
  CHECK(transfers.to_device(tensors[1]).toTensor().data_ptr() == tensors[1].data_ptr());
  // Rings: on the tensors themselves.
  std::vector<worker::WorkerPort::RingWork> work(1);
  at::Tensor t = torch::ones({4});
  work[0].tensors = {t};
  transfers.reduce_on_host(work, [&](std::vector<worker::WorkerPort::RingWork>& on_host) {
    CHECK(on_host[0].tensors[0].data_ptr() == t.data_ptr());
    on_host[0].tensors[0].mul_(3);
  });
  CHECK(t.equal(torch::full({4}, 3.0)));
  // What the wire encodes from: a contiguous host tensor (as the pinned copies are) passes
  // wire_form without a copy.
  CHECK(wire::wire_form(tensors[0]).data_ptr() == tensors[0].data_ptr());
}

TEST_CASE("DeviceTransfers on the CPU: drop takes back nothing handed over", "[daemon][device]") {
  int sent = 0;
  DeviceTransfers transfers(c10::Device(c10::kCPU), [&](TransferMessage) { ++sent; });
  transfers.send(message_with(0, {torch::ones({2})}));
  transfers.drop();
  transfers.flush();
  CHECK(sent == 1);
}

TEST_CASE("DeviceTransfers on CUDA: host, device, host again, bit-equal", "[daemon][device][cuda]") {
  if (!has_cuda()) return;
  std::vector<TransferMessage> sent;
  DeviceTransfers transfers(c10::Device(c10::kCUDA, 0),
                            [&](TransferMessage m) { sent.push_back(std::move(m)); });
  const auto tensors = samples();
  std::vector<at::Tensor> on_device;
  for (const auto& t : tensors) {
    const at::Tensor d = transfers.to_device(t).toTensor();
    CHECK(d.is_cuda());
    on_device.push_back(d);
  }
  // Computed on the compute stream after the copies: the compute stream waited for them.
  std::vector<at::Tensor> computed;
  for (const auto& d : on_device) computed.push_back(d.clone());
  transfers.send(message_with(1, computed));
  transfers.flush();
  REQUIRE(sent.size() == 1);
  REQUIRE(sent[0].values.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor back = sent[0].values[i].second.toTensor();
    CHECK(back.is_cpu());
    CHECK(back.is_pinned());
    CHECK(back.scalar_type() == tensors[i].scalar_type());
    CHECK(back.sizes() == tensors[i].sizes());
    // Bit-equal: the bytes, not a tolerance.
    const at::Tensor expected = tensors[i].contiguous();
    REQUIRE(back.is_contiguous());
    if (expected.numel() > 0) {
      CHECK(std::memcmp(back.data_ptr(), expected.data_ptr(),
                        static_cast<size_t>(expected.numel()) * expected.element_size()) == 0);
    }
    // The wire encodes the pinned copy itself.
    CHECK(wire::wire_form(back).data_ptr() == back.data_ptr());
  }
}

TEST_CASE("DeviceTransfers on CUDA: messages leave in the order they were sent",
          "[daemon][device][cuda]") {
  if (!has_cuda()) return;
  std::vector<TransferMessage> sent;
  DeviceTransfers transfers(c10::Device(c10::kCUDA, 0),
                            [&](TransferMessage m) { sent.push_back(std::move(m)); });
  const c10::Device gpu(c10::kCUDA, 0);
  constexpr uint32_t kMessages = 24;
  for (uint32_t step = 0; step < kMessages; ++step) {
    std::vector<at::Tensor> tensors;
    if (step % 3 == 1) {
      tensors = {torch::full({3}, static_cast<double>(step))};  // host only: waits its turn
    } else {
      // Large and small, so that copies finish at different times.
      const int64_t n = step % 2 == 0 ? (1 << 22) : 17;
      tensors = {torch::full({n}, static_cast<double>(step), torch::TensorOptions().device(gpu))};
    }
    transfers.send(message_with(step, tensors));
    transfers.poll();
    for (size_t i = 0; i < sent.size(); ++i) CHECK(sent[i].batch.step == i);
  }
  transfers.flush();
  CHECK(transfers.pending() == 0);
  REQUIRE(sent.size() == kMessages);
  for (uint32_t step = 0; step < kMessages; ++step) {
    CHECK(sent[step].batch.step == step);
    const at::Tensor t = sent[step].values[0].second.toTensor();
    CHECK(t.is_cpu());
    CHECK(t.min().item<double>() == step);
    CHECK(t.max().item<double>() == step);
  }
}

TEST_CASE("DeviceTransfers on CUDA: reduce_on_host equals the reduce on the CPU",
          "[daemon][device][cuda]") {
  if (!has_cuda()) return;
  DeviceTransfers transfers(c10::Device(c10::kCUDA, 0), [](TransferMessage) {});
  torch::manual_seed(3);
  const std::vector<at::Tensor> start = {torch::randn({1000}), torch::randn({31, 7}),
                                         torch::randn({1})};
  // What a ring does to them: here, a sum with fixed others and an average.
  auto reduce = [](std::vector<worker::WorkerPort::RingWork>& work) {
    for (auto& w : work) {
      for (auto& t : w.tensors) t.add_(torch::ones_like(t) * 0.25).div_(2);
    }
  };
  std::vector<worker::WorkerPort::RingWork> on_cpu(1), on_gpu(1);
  for (const auto& t : start) {
    on_cpu[0].tensors.push_back(t.clone());
    on_gpu[0].tensors.push_back(t.to(c10::Device(c10::kCUDA, 0)));
  }
  reduce(on_cpu);
  const std::vector<at::Tensor> kept = on_gpu[0].tensors;  // the stage's own tensors
  transfers.reduce_on_host(on_gpu, [&](std::vector<worker::WorkerPort::RingWork>& host) {
    for (const auto& t : host[0].tensors) {
      CHECK(t.is_cpu());
      CHECK(t.is_pinned());
    }
    reduce(host);
  });
  for (size_t i = 0; i < start.size(); ++i) {
    // In place: the same device tensors hold the result.
    CHECK(on_gpu[0].tensors[i].data_ptr() == kept[i].data_ptr());
    CHECK(on_gpu[0].tensors[i].is_cuda());
    CHECK(torch::equal(on_gpu[0].tensors[i].cpu(), on_cpu[0].tensors[i]));
  }
}

TEST_CASE("deterministic algorithms for a job, and back after", "[daemon][device]") {
  auto& context = at::globalContext();
  const bool before = context.deterministicAlgorithms();
  const bool benchmark = context.benchmarkCuDNN();
  {
    worker::DeterministicAlgorithms off(false);
    CHECK(context.deterministicAlgorithms() == before);
  }
  {
    worker::DeterministicAlgorithms on(true);
    CHECK(context.deterministicAlgorithms());
    CHECK_FALSE(context.deterministicAlgorithmsWarnOnly());
    CHECK(context.deterministicCuDNN());
    CHECK_FALSE(context.benchmarkCuDNN());
  }
  CHECK(context.deterministicAlgorithms() == before);
  CHECK(context.benchmarkCuDNN() == benchmark);
}

TEST_CASE("CUBLAS_WORKSPACE_CONFIG only for CUDA, and never over the user's", "[daemon][device]") {
  ::unsetenv("CUBLAS_WORKSPACE_CONFIG");
  CHECK_FALSE(worker::prepare_cuda_environment("cpu"));
  CHECK(std::getenv("CUBLAS_WORKSPACE_CONFIG") == nullptr);
  CHECK(worker::prepare_cuda_environment("cuda:1"));
  CHECK(std::string(std::getenv("CUBLAS_WORKSPACE_CONFIG")) == ":4096:8");
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8", 1);
  CHECK_FALSE(worker::prepare_cuda_environment("cuda"));
  CHECK(std::string(std::getenv("CUBLAS_WORKSPACE_CONFIG")) == ":16:8");
  ::unsetenv("CUBLAS_WORKSPACE_CONFIG");
}

TEST_CASE("out_of_memory: what a device out of memory tried, other errors not", "[daemon][device]") {
  CHECK_FALSE(worker::out_of_memory(std::runtime_error("shape mismatch")));
  // LibTorch 2.x's allocator, and the TorchScript interpreter passing its text on.
  const std::string torch2 =
      "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB "
      "of which 1.06 GiB is free.";
  CHECK(worker::out_of_memory(c10::OutOfMemoryError({__func__, __FILE__, __LINE__}, torch2)) ==
        "tried to allocate 2.00 GiB");
  CHECK(worker::out_of_memory(std::runtime_error(torch2)) == "tried to allocate 2.00 GiB");
  // LibTorch 1.13's wording.
  CHECK(worker::out_of_memory(std::runtime_error(
            "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capacity; "
            "6.90 GiB already allocated)")) == "tried to allocate 20.00 MiB");
  CHECK(worker::out_of_memory(
            c10::OutOfMemoryError({__func__, __FILE__, __LINE__}, "out of memory")) == "");
}
