// compute_device.h: the daemon config's device on this LibTorch, tensors moved there, rings
// reduced on the host.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include "libs/worker/compute_device.h"

using namespace ravnest;
using training::compute_device;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("compute device: cpu, and CUDA only where LibTorch has it", "[daemon][device]") {
  CHECK(compute_device("cpu") == c10::Device(c10::kCPU));
  CHECK(error_of([] { compute_device("gpu"); }) == "device: \"gpu\" is not cpu, cuda or cuda:N");
  if (!torch::cuda::is_available()) {
    // Debian's LibTorch: one line that says what to do.
    for (const char* name : {"cuda", "cuda:0", "cuda:7"}) {
      const std::string error = error_of([&] { compute_device(name); });
      CHECK(error.find(std::string("device: \"") + name + "\" asks for CUDA") == 0);
      CHECK(error.find("device = \"cpu\"") != std::string::npos);
      CHECK(error.find('\n') == std::string::npos);
    }
  } else {
    CHECK(compute_device("cuda:0").is_cuda());
    CHECK(error_of([] { compute_device("cuda:999"); }).find("CUDA device(s)") !=
          std::string::npos);
  }
}

TEST_CASE("to_device: every tensor of a value, in tuples and lists", "[daemon][device]") {
  const c10::Device cpu(c10::kCPU);
  const at::Tensor a = torch::ones({2});
  // Already there: the same tensor, not a copy.
  CHECK(worker::to_device(a, cpu).toTensor().data_ptr() == a.data_ptr());
  c10::IValue tuple = c10::ivalue::Tuple::create({a, c10::IValue(3), torch::zeros({1})});
  auto moved = worker::to_device(tuple, cpu);
  REQUIRE(moved.isTuple());
  CHECK(moved.toTupleRef().elements().size() == 3);
  CHECK(moved.toTupleRef().elements()[0].toTensor().equal(a));
  CHECK(moved.toTupleRef().elements()[1].toInt() == 3);
  c10::List<at::Tensor> list({a, a * 2});
  auto moved_list = worker::to_device(c10::IValue(list), cpu);
  REQUIRE(moved_list.isList());
  CHECK(moved_list.toList().size() == 2);
  CHECK(moved_list.toList().get(1).toTensor().equal(a * 2));
  CHECK(worker::to_device(c10::IValue(), cpu).isNone());
}

TEST_CASE("reduce_on_host: host tensors reduced in place", "[daemon][device]") {
  std::vector<worker::WorkerPort::RingWork> work(1);
  at::Tensor t = torch::ones({4});
  work[0].tensors = {t};
  worker::reduce_on_host(work, [&](std::vector<worker::WorkerPort::RingWork>& on_host) {
    // On the CPU, the stage's own tensors: no copies.
    CHECK(on_host[0].tensors[0].data_ptr() == t.data_ptr());
    on_host[0].tensors[0].mul_(3);
  });
  CHECK(t.equal(torch::full({4}, 3.0)));
}
