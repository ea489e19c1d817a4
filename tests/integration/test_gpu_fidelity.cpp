// GPU fidelity: a 3-stage pipeline of daemons computing on cuda:0 (all three share the one GPU)
// trains models of the test zoo, twice on the same daemons:
//   - with Adam: the fused weights must equal those of one PyTorch process on the same GPU
//     (tests/python/reference_train.py --device cuda:0 --deterministic: same weights, same batch
//     order, deterministic kernels, TF32 off) to 1e-5, where the job can ask the daemons for
//     deterministic algorithms too (`[train] deterministic`, being added); else printed only;
//   - with SGD: equal to PyTorch on the GPU to 1e-5 as well, and within kCpuGpuTolerance
//     (relative) of the single-process reference trainer on the CPU. SGD because Adam divides
//     each gradient by its own running magnitude: a parameter whose gradient is about 0 moves by
//     +-lr on rounding noise alone, so a nondeterministic kernel (or the CPU's other summation
//     order) shows as lr-sized differences with Adam, rounding-sized ones with SGD.
// Measured here on the CPU, as a stand-in for CPU against GPU, float32 against float64 training
// of the same jobs (4 steps): causal_lm 5e-7 with SGD (9e-2 with Adam), traced_inplace 2e-7
// (3e-5); resnet18 5e-1 with SGD already: BatchNorm over 8 random 64x64 images is so
// ill-conditioned that rounding differences grow to the weights' size, so resnet18 is compared
// with PyTorch on the GPU only.
//
// Runs only where LibTorch finds a CUDA device; elsewhere (every CI machine, Debian's CPU-only
// LibTorch 1.13) each case reports "skipped: no CUDA device" and passes. scripts/gpu-check runs
// this binary on the GPU machine. Models without dropout: the daemons carry the CPU generator's
// state between stages, not a GPU's, so a dropout computed on a GPU does not draw what one
// process would.
//
// The daemons get, through their environment (they inherit this process's):
//   CUBLAS_WORKSPACE_CONFIG=:4096:8  deterministic cuBLAS (a fixed workspace per stream);
//   NVIDIA_TF32_OVERRIDE=0           cuBLAS and cuDNN never round float32 to TF32, whatever
//                                    LibTorch asks (LibTorch's own default: TF32 on in cuDNN's
//                                    convolutions, at::globalContext().allowTF32CuDNN()).
// The daemon has no setting of its own for either yet. Where it belongs: run_daemon
// (libs/daemon/daemon.cpp), next to compute_device(config.device), for a `tf32` daemon setting;
// or make_worker_setup (libs/worker/job_setup.cpp) for the job's `[train] deterministic`
// (at::globalContext().setDeterministicAlgorithms(true, false), setAllowTF32CuBLAS(false),
// setAllowTF32CuDNN(false), setBenchmarkCuDNN(false) for the job's duration).
#include <catch2/catch.hpp>

#include <cstdlib>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/Context.h>

#include "libs/torch_support/torch_compat.h"
#include "libs/base/config_error.h"
#include "libs/config/job/job_spec.h"
#include "libs/training/reference_trainer.h"
#include "tests/support/digits.h"
#include "tests/support/local_cluster.h"
#include "tests/support/zoo.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

// GPU pipeline against PyTorch on the same GPU: the same kernels on the same numbers.
constexpr double kSameGpuTolerance = 1e-5;
// GPU against CPU, SGD job: different kernels (summation orders, cuDNN's algorithms) on float32.
// Largest difference over the tensor's largest magnitude, a tensor at a time. 200 times the
// float32-against-float64 figures above, until a GPU run measures it (scripts/gpu-check prints
// the figure; docs/performance.md#gpu).
constexpr double kCpuGpuTolerance = 1e-4;

struct GpuCase {
  std::string model;
  int batch_size = 8;
  int micro_batches = 1;
  std::string schedule = "gpipe";
  // Well-conditioned: the SGD job is checked against the CPU, and against PyTorch on the GPU
  // without deterministic daemons (resnet18 is not: see the top of this file).
  bool cpu_checked = true;
  // The Adam job is checked against PyTorch on the GPU (else printed). Not for causal_lm: over 3
  // stages it differs from one process in the last bits on LibTorch 2.x even on the CPU, which
  // Adam makes 4e-3 (docs/exactness.md, open); its SGD job is checked.
  bool adam_checked = true;
};

// RAVNEST_GPU_TEST_DEVICE=cpu runs every case on the CPU instead (daemons and PyTorch), to test
// this file's own logic on a machine without a GPU (scripts/gpu-check's dry run).
std::string test_device() {
  const char* text = std::getenv("RAVNEST_GPU_TEST_DEVICE");
  return text && *text ? text : "cuda:0";
}

// A measurement, on one line of standard output ("gpu fidelity: ..."; scripts/gpu-check collects
// them) and as a Catch2 warning (shown with the case).
#define MEASURED(text)                                                         \
  do {                                                                         \
    std::ostringstream line_;                                                  \
    line_ << text;                                                             \
    std::printf("gpu fidelity: %s\n", line_.str().c_str());                    \
    std::fflush(stdout);                                                       \
    WARN(line_.str());                                                         \
  } while (false)

bool gpu_present() {
  if (test_device() == "cpu") {
    WARN("RAVNEST_GPU_TEST_DEVICE=cpu: the GPU cases run on the CPU (a dry run of this test)");
    return true;
  }
  if (!torch_support::kWithCuda) {
    WARN("skipped: no CUDA device (this LibTorch " << torch_support::kTorchVersion
                                                   << " was built without CUDA)");
    return false;
  }
  if (!at::hasCUDA()) {
    WARN("skipped: no CUDA device (at::hasCUDA() is false)");
    return false;
  }
  return true;
}

// Deterministic cuBLAS and no TF32 (see the top of this file), inherited by the daemons and the
// Python reference this process starts.
void set_gpu_environment() {
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 1);
  ::setenv("NVIDIA_TF32_OVERRIDE", "0", 1);
}

std::string job_text(const test::ModelFiles& files, const GpuCase& c, const std::string& optimizer,
                     bool deterministic) {
  return "[train]\nepochs = 2\nbatch_size = " + std::to_string(c.batch_size) +
         "\nmicro_batches = " + std::to_string(c.micro_batches) + "\nschedule = \"" +
         c.schedule + "\"\nseed = 11\n" + (deterministic ? "deterministic = true\n" : "") +
         "\n[data]\nformat = \"tensors\"\ntrain = \"" + files.train_file +
         "\"\n\n[loss]\nname = \"" + files.loss +
         "\"\n\n[optimizer]\nname = \"" + optimizer + "\"\nlr = 0.01\n";
}

// Writes the job with `[train] deterministic = true` where this build's job parser knows the
// key. TODO: once `deterministic` is parsed everywhere (being added in parallel), drop the probe
// and always write it; until then the daemons run LibTorch's default (nondeterministic kernels
// allowed) and the comparison relies on the same default choices on both sides.
bool write_job(const fs::path& path, const test::ModelFiles& files, const GpuCase& c,
               const std::string& optimizer) {
  test::write_text(path, job_text(files, c, optimizer, true));
  try {
    config::load_job(path.string());
    return true;
  } catch (const base::ConfigError& e) {
    if (std::string(e.what()).find("deterministic") == std::string::npos) throw;
  }
  test::write_text(path, job_text(files, c, optimizer, false));
  return false;
}

// Largest |a - b| / max |b| over the tensors of `reference` (each trained copy of one).
double relative_difference(const std::multimap<std::string, at::Tensor>& trained,
                           const std::map<std::string, at::Tensor>& reference, std::string* where) {
  double worst = 0;
  for (const auto& [name, tensor] : reference) {
    if (!tensor.is_floating_point()) continue;
    const auto b = tensor.to(at::kDouble);
    const double scale = std::max(b.abs().max().item<double>(), 1e-12);
    auto [begin, end] = trained.equal_range(name);
    if (begin == end) {
      *where = name + " (missing)";
      return INFINITY;
    }
    for (auto it = begin; it != end; ++it) {
      const auto a = it->second.to(at::kDouble);
      // Equal entries count 0, infinities too (a mask's -inf minus -inf is NaN).
      const double d = (a - b).abs().masked_fill_(a == b, 0).max().item<double>() / scale;
      if (!(d <= worst)) {
        worst = d;
        *where = name;
      }
    }
  }
  return worst;
}

void check_on_gpu(const GpuCase& c) {
  if (!gpu_present()) return;
  set_gpu_environment();
  WARN("LibTorch " << torch_support::kTorchVersion << " defaults in this process: TF32 in cuBLAS "
                   << at::globalContext().allowTF32CuBLAS() << ", in cuDNN "
                   << at::globalContext().allowTF32CuDNN()
                   << "; the daemons run with NVIDIA_TF32_OVERRIDE=0");

  const test::ModelFiles files = test::model_files(c.model);
  const auto initial = training::state_of(torch::jit::load(files.model));
  test::LocalCluster cluster(files.model, {test::LocalCluster::even_cuts(files.model, 3)},
                             files.example_inputs);
  const std::string device = test_device();
  for (int node = 0; node < cluster.nodes(); ++node) {
    cluster.set_daemon_flags(node, {"--device", device});
  }
  cluster.start_all();
  auto push = cluster.ravnest("push");
  INFO(push.out << push.err);
  REQUIRE(push.exit_code == 0);

  // Trains `optimizer`'s job on the daemons and returns the fused weights; `deterministic`:
  // whether the job could ask for deterministic algorithms.
  bool deterministic = false;
  auto train = [&](const std::string& optimizer, fs::path* job_path) {
    *job_path = cluster.dir() / ("job_" + optimizer + ".toml");
    deterministic = write_job(*job_path, files, c, optimizer);
    const auto out_dir = cluster.dir() / ("trained_" + optimizer);
    INFO(c.model << " over 3 stages on " << device << ", batch " << c.batch_size << " in "
                 << c.micro_batches << " micro-batch(es), " << c.schedule << ", " << optimizer);
    REQUIRE_NOTHROW(cluster.train_and_fuse(job_path->string(), out_dir.string()));
    const auto state = test::load_state_dict(out_dir / "trained_state_dict.pt");
    return std::multimap<std::string, at::Tensor>(state.begin(), state.end());
  };
  // One PyTorch process on the same device, the same job.
  auto pytorch = [&](const fs::path& job_path, const std::string& optimizer) {
    const auto out = cluster.dir() / ("python_" + optimizer + ".pt");
    auto python = test::run_command(test::python() + " " + test::source_dir() +
                                    "/tests/python/reference_train.py " + job_path.string() +
                                    " " + files.model + " " + out.string() + " --device " +
                                    device + " --deterministic");
    INFO(python.out << python.err);
    REQUIRE(python.exit_code == 0);
    if (!python.err.empty()) WARN("PyTorch said on stderr:\n" << python.err.substr(0, 3000));
    return test::load_state_dict(out);
  };

  fs::path adam_job;
  const auto adam = train("adam", &adam_job);
  if (!deterministic) {
    WARN("the job parser does not know [train] deterministic yet: the daemons run without "
         "deterministic algorithms, so Adam against PyTorch is printed, not checked (TODO in "
         "test_gpu_fidelity.cpp)");
  }
  for (int node = 0; node < cluster.nodes(); ++node) {
    const std::string log = cluster.log(node);
    INFO("daemon " << node << " log:\n" << log.substr(0, 2000));
    CHECK(log.find("stages compute on " + device.substr(0, device.find(':'))) !=
          std::string::npos);
  }
  // Adam turns rounding differences into +-lr moves (see the top of this file): equal to 1e-5
  // only when both sides run the same kernels, which a nondeterministic kernel (atomics in
  // memory-efficient attention's backward, some of cuDNN's) does not promise.
  const bool adam_checked = deterministic && c.adam_checked;
  const auto p = test::compare_state(adam, pytorch(adam_job, "adam"), initial);
  MEASURED(c.model << ", Adam: GPU pipeline against PyTorch on the GPU: largest difference "
                   << p.worst << " in " << p.name << " (limit " << kSameGpuTolerance
                   << (adam_checked ? ""
                       : !c.adam_checked
                           ? ", printed, not checked: the open defect of docs/exactness.md"
                           : ", printed, not checked: no deterministic daemons")
                   << "); training moved weights by " << p.moved);
  if (adam_checked) CHECK(p.worst <= kSameGpuTolerance);
  CHECK(p.moved > 1e-3);

  // The single-process reference trainer on the CPU (equal to CPU pipelines to 1e-5:
  // test_training_fidelity).
  std::string where;
  const auto cpu_adam =
      training::train_reference(files.model, config::load_job(adam_job.string()));
  const double adam_relative = relative_difference(adam, cpu_adam.state, &where);
  MEASURED(c.model << ", Adam: GPU pipeline against the CPU: largest relative difference "
                   << adam_relative << " in " << where << " (printed, not checked)");

  fs::path sgd_job;
  const auto sgd = train("sgd", &sgd_job);
  // SGD keeps rounding differences rounding-sized: checked against PyTorch whatever the kernels,
  // except for an ill-conditioned model (resnet18), which needs deterministic daemons.
  const bool sgd_checked = c.cpu_checked || deterministic;
  const auto q = test::compare_state(sgd, pytorch(sgd_job, "sgd"), initial);
  MEASURED(c.model << ", SGD: GPU pipeline against PyTorch on the GPU: largest difference "
                   << q.worst << " in " << q.name << " (limit " << kSameGpuTolerance
                   << (sgd_checked ? "" : ", printed, not checked: no deterministic daemons")
                   << "); training moved weights by " << q.moved);
  if (sgd_checked) CHECK(q.worst <= kSameGpuTolerance);
  const auto cpu_sgd = training::train_reference(files.model, config::load_job(sgd_job.string()));
  const auto a = test::compare_state(sgd, cpu_sgd.state, initial);
  const double relative = relative_difference(sgd, cpu_sgd.state, &where);
  MEASURED(c.model << ", SGD: GPU pipeline against the CPU: largest relative difference "
                   << relative << " in " << where << " (limit " << kCpuGpuTolerance
                   << (c.cpu_checked ? "" : ", printed, not checked") << "); largest absolute "
                   << a.worst << " in " << a.name << "; training moved weights by " << a.moved);
  if (c.cpu_checked) CHECK(relative <= kCpuGpuTolerance);
}

// [train] autocast on the GPU (fp16 with its loss scaler, bf16), with clipping by norm across the
// 3 stages, SGD: against PyTorch on the same GPU under torch.autocast("cuda", dtype) with a
// GradScaler (fp16) and clip_grad_norm_ (reference_train.py). Both sides run the same kernels on
// the same half-precision numbers, so the limit stays kSameGpuTolerance. Whether a gradient
// overflows at GradScaler's default 2^16 depends on the model: fp16 starts at 2^40 instead (the
// logits' gradient times 2^40 is far above fp16's 65504), so that its first updates overflow and
// are skipped on every stage, the scale backing off by 2^-12 to 2^28 and 2^16 (checked on
// PyTorch's side: its scale after each update); a stage that stepped on an inf would end in nan.
void check_autocast_on_gpu(const std::string& model) {
  if (!gpu_present()) return;
  set_gpu_environment();
  const test::ModelFiles files = test::model_files(model);
  const auto initial = training::state_of(torch::jit::load(files.model));
  test::LocalCluster cluster(files.model, {test::LocalCluster::even_cuts(files.model, 3)},
                             files.example_inputs);
  const std::string device = test_device();
  for (int node = 0; node < cluster.nodes(); ++node) {
    cluster.set_daemon_flags(node, {"--device", device});
  }
  cluster.start_all();
  auto push = cluster.ravnest("push");
  INFO(push.out << push.err);
  REQUIRE(push.exit_code == 0);
  for (const std::string dtype : {"fp16", "bf16"}) {
    if (dtype == "fp16" && device == "cpu" && torch_support::kTorchMajor < 2) {
      WARN("fp16 skipped on the CPU: LibTorch 1.13's CPU autocast has no float16");
      continue;
    }
    INFO(model << " over 3 stages on " << device << ", autocast " << dtype
               << ", grad_clip_norm 1.0, SGD");
    const GpuCase c{model, 8, 2, "1f1b"};
    std::string text = job_text(files, c, "sgd", true);
    const std::string scaler = dtype == "fp16" ? "scaler_init_scale = 1099511627776\n"
                                                 "scaler_backoff_factor = 0.000244140625\n"
                                               : "";
    text.insert(text.find("[train]\n") + 8,
                "autocast = \"" + dtype + "\"\ngrad_clip_norm = 1.0\n" + scaler);
    const auto job_path = cluster.dir() / ("job_" + dtype + ".toml");
    test::write_text(job_path, text);
    const auto out_dir = cluster.dir() / ("trained_" + dtype);
    REQUIRE_NOTHROW(cluster.train_and_fuse(job_path.string(), out_dir.string()));
    const auto state = test::load_state_dict(out_dir / "trained_state_dict.pt");
    const auto python_out = cluster.dir() / ("python_" + dtype + ".pt");
    const auto scales_out = cluster.dir() / ("scales_" + dtype + ".json");
    auto python = test::run_command(test::python() + " " + test::source_dir() +
                                    "/tests/python/reference_train.py " + job_path.string() +
                                    " " + files.model + " " + python_out.string() +
                                    " --device " + device + " --deterministic --scales " +
                                    scales_out.string());
    INFO(python.out << python.err);
    REQUIRE(python.exit_code == 0);
    if (dtype == "fp16") {
      // PyTorch skipped the first two updates: 2^40 -> 2^28 -> 2^16.
      const std::string scales = test::read_text(scales_out);
      INFO("PyTorch's scale after each update: " << scales);
      CHECK(scales.rfind("[268435456.0, 65536.0", 0) == 0);
    }
    const auto q = test::compare_state({state.begin(), state.end()},
                                       test::load_state_dict(python_out), initial);
    MEASURED(model << ", autocast " << dtype << " + clipping: GPU pipeline against PyTorch on "
                   << "the GPU: largest difference " << q.worst << " in " << q.name << " (limit "
                   << kSameGpuTolerance << "); training moved weights by " << q.moved);
    CHECK(q.worst <= kSameGpuTolerance);
    CHECK(q.moved > 1e-4);
  }
}

}  // namespace

// Three clusters of two stages on cuda:0 (one GPU shared by six daemons), their rings over data
// channels (--no-shared-memory: the path between hosts; at N = 3 the all-gather relays sealed
// segments): what a CUDA stage hands its rings (gradients, parameters, buffers, copied to the
// host) and takes back. Two SGD jobs: the gradients averaged at every update, and DiLoCo (an outer
// Nesterov step every 2 updates). Each checked against the one-process emulation of the same
// clusters on the CPU (training::train_reference_clusters) within kCpuGpuTolerance (relative),
// and the three clusters against one another: bitwise equal (every member of a ring gets the
// same bytes, and applies them the same way).
void check_rings_on_gpu(const std::string& model) {
  if (!gpu_present()) return;
  set_gpu_environment();
  const test::ModelFiles files = test::model_files(model);
  const auto initial = training::state_of(torch::jit::load(files.model));
  const auto cuts = test::LocalCluster::even_cuts(files.model, 2);
  test::LocalCluster cluster(files.model, {cuts, cuts, cuts}, files.example_inputs);
  const std::string device = test_device();
  for (int node = 0; node < cluster.nodes(); ++node) {
    std::vector<std::string> flags = {"--device", device};
    // In the hosts mode the daemons are apart already, and refuse each other's shared memory.
    if (!cluster.hosts()) flags.push_back("--no-shared-memory");
    cluster.set_daemon_flags(node, flags);
  }
  cluster.start_all();
  auto push = cluster.ravnest("push");
  INFO(push.out << push.err);
  REQUIRE(push.exit_code == 0);

  const GpuCase c{model, 8, 2, "1f1b"};
  const std::vector<std::pair<std::string, std::string>> jobs = {
      {"gradients", ""},
      {"diloco", "\n[outer]\nname = \"nesterov\"\nlr = 0.7\nmomentum = 0.9\nevery = 2\n"}};
  for (const auto& [name, outer] : jobs) {
    INFO(model << ", 3 clusters of 2 stages on " << device << ", rings over data channels, SGD, "
               << name);
    std::string text = job_text(files, c, "sgd", /*deterministic=*/false) + outer;
    if (name == "gradients") {
      text.replace(text.find("\n[data]"), 0, "reduce = \"gradients\"\n");
    }
    const auto job_path = cluster.dir() / ("job_rings_" + name + ".toml");
    test::write_text(job_path, text);
    auto train = cluster.ravnest("train", job_path.string());
    INFO(train.out << train.err);
    REQUIRE(train.exit_code == 0);
    const auto reference =
        training::train_reference_clusters(files.model, config::load_job(job_path.string()), 3);
    std::map<std::string, at::Tensor> first;
    for (int k = 0; k < 3; ++k) {
      const auto out = cluster.dir() / ("trained_rings_" + name + "_" + std::to_string(k));
      auto fuse =
          cluster.ravnest("fuse", "--cluster " + std::to_string(k) + " --out " + out.string());
      INFO(fuse.out << fuse.err);
      REQUIRE(fuse.exit_code == 0);
      const auto state = test::load_state_dict(out / "trained_state_dict.pt");
      std::string where;
      if (k == 0) {
        first = state;
        const std::multimap<std::string, at::Tensor> trained(state.begin(), state.end());
        const double relative = relative_difference(trained, reference.state, &where);
        const auto moved = test::compare_state(trained, reference.state, initial);
        MEASURED(model << ", rings (" << name << ", 3 clusters, data channels): against the CPU "
                       << "emulation: largest relative difference " << relative << " in "
                       << where << " (limit " << kCpuGpuTolerance
                       << "); training moved weights by " << moved.moved);
        CHECK(relative <= kCpuGpuTolerance);
        CHECK(moved.moved > 1e-3);
      } else {
        const double apart = test::largest_difference(first, state, &where);
        INFO("cluster " << k << " against cluster 0: " << apart << " in " << where);
        CHECK(apart == 0);
      }
    }
  }
  if (!cluster.hosts()) {
    bool channel = false;
    for (int node = 0; node < cluster.nodes(); ++node) {
      channel = channel ||
                cluster.log(node).find("over a data channel (AES-256-GCM)") != std::string::npos;
    }
    CHECK(channel);
  }
}

TEST_CASE("gpu fidelity: autocast fp16 (loss scaler) and bf16 with clipping, 3 stages", "[gpu]") {
  check_autocast_on_gpu("traced_inplace");
}

TEST_CASE("gpu fidelity: cnn (traced_inplace: convolutions, in-place ReLU, max pooling)",
          "[gpu]") {
  check_on_gpu({"traced_inplace", 8, 2, "1f1b"});
}

TEST_CASE("gpu fidelity: resnet18 (BatchNorm, one micro-batch)", "[gpu]") {
  if (!gpu_present()) return;
  if (!fs::exists(fs::path(test::models_dir()) / "resnet18.json")) {
    WARN("skipped: resnet18 was not exported (torchvision missing where the models were made)");
    return;
  }
  // BatchNorm: one micro-batch (each micro-batch would have its own statistics). Against the
  // CPU printed only (see the top of this file).
  check_on_gpu({"resnet18", 8, 1, "gpipe", false});
}

TEST_CASE("gpu fidelity: transformer (causal_lm, 3 stages on cuda:0)", "[gpu]") {
  check_on_gpu({"causal_lm", 8, 2, "1f1b", true, /*adam_checked=*/false});
}

// Last: scripts/gpu-check runs the cases in this order within one time limit.
TEST_CASE("gpu fidelity: rings (3 clusters of 2 stages, data channels, gradients and DiLoCo)",
          "[gpu]") {
  check_rings_on_gpu("traced_inplace");
}
