// bench_exported_runtime DIR [--reps N] [--models a,b]: one micro-batch's forward + backward
// (train mode, the gradient of the outputs' sum) through libs/exported's runtime and through
// TorchScript (torch::jit::load) on one thread, beside eager PyTorch's time that
// exported_runtime.py wrote just before, for the models it wrote (default digits,resblock).
// Prints one line a model: median milliseconds and the ratios to eager (exported_runtime.py
// --summarize parses it). Run by bench/exported_runtime.sh, once a round.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/script.h>
#include <torch/serialize.h>

#include "libs/exported/exported_module.h"

namespace {

// The median milliseconds of each step, the steps taken in turn each repetition (a machine's
// load drifts; it then weighs on both alike).
std::vector<double> median_ms(int reps, const std::vector<std::function<void()>>& steps) {
  std::vector<std::vector<double>> times(steps.size());
  for (int rep = 0; rep < reps + 2; ++rep) {
    for (size_t s = 0; s < steps.size(); ++s) {
      const auto start = std::chrono::steady_clock::now();
      steps[s]();
      const auto end = std::chrono::steady_clock::now();
      if (rep >= 2) times[s].push_back(std::chrono::duration<double, std::milli>(end - start).count());
    }
  }
  std::vector<double> medians;
  for (auto& t : times) {
    std::sort(t.begin(), t.end());
    medians.push_back(t[t.size() / 2]);
  }
  return medians;
}

at::Tensor load_tensor(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return torch::pickle_load(bytes).toTensor();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: bench_exported_runtime DIR [--reps N] [--models a,b]\n";
    return 2;
  }
  const std::string dir = argv[1];
  int reps = 50;
  std::vector<std::string> models = {"digits", "resblock"};
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--reps") {
      reps = std::stoi(argv[i + 1]);
    } else if (flag == "--models") {
      models.clear();
      std::stringstream list(argv[i + 1]);
      for (std::string name; std::getline(list, name, ',');) models.push_back(name);
    } else {
      std::cerr << "bench_exported_runtime: unknown argument " << flag << "\n";
      return 2;
    }
  }
  at::set_num_threads(1);
  for (const std::string& name : models) {
    const at::Tensor x = load_tensor(dir + "/" + name + ".input.pt");
    double eager = 0;
    std::ifstream(dir + "/" + name + ".eager_ms") >> eager;

    ravnest::exported::ExportedModule exported =
        ravnest::exported::ExportedModule::load(dir + "/" + name + ".pt2");
    torch::jit::Module script = torch::jit::load(dir + "/" + name + ".ts");
    script.train();
    const std::vector<double> ms = median_ms(
        reps, {[&] {
                 const at::Tensor out = exported.forward({x})[0].toTensor();
                 out.sum().backward();
                 for (const auto& [n, p] : exported.named_parameters()) p.mutable_grad().reset();
               },
               [&] {
                 const at::Tensor out = script.forward({x}).toTensor();
                 out.sum().backward();
                 for (const auto& p : script.parameters()) p.mutable_grad().reset();
               }});
    const double ours = ms[0], ts = ms[1];
    std::printf("%-9s micro-batch %lld: eager %.3f ms, .pt2 runtime %.3f ms (%.3fx eager), "
                "TorchScript %.3f ms (%.3fx eager); .pt2/TorchScript %.3f\n",
                name.c_str(), static_cast<long long>(x.size(0)), eager, ours, ours / eager, ts,
                ts / eager, ours / ts);
  }
  return 0;
}
