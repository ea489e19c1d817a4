// The training knobs of [train] on real daemons, against PyTorch itself: gradient clipping over
// every stage of a pipeline (clip_grad_norm_ and clip_grad_value_ on the whole model, Debian's
// PyTorch through tests/python/reference_train.py), across two clusters (the one-process
// emulation, training::train_reference_clusters), bf16 autocast on the CPU (the forward under
// torch.autocast("cpu", dtype=torch.bfloat16)) and, with LibTorch 2.x, fp16 autocast on the CPU
// with its loss scaler (torch.amp.GradScaler("cpu"), the current PyTorch as the reference).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/jit/serialization/import.h>

#include "libs/base/secret.h"
#include "libs/config/job/job_spec.h"
#include "libs/requester/requester.h"
#include "libs/torch_support/torch_compat.h"
#include "libs/training/reference_trainer.h"
#include "tests/support/digits.h"
#include "tests/support/local_cluster.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

// SGD with a large step over a few batches of the digits: the gradients' norm is well above
// the max_norm the cases give, so clipping changes every update.
std::string job_text(const std::string& train_extra, const std::string& schedule, int micro) {
  return "[train]\nepochs = 1\nbatch_size = 32\nmicro_batches = " + std::to_string(micro) +
         "\nseed = 5\nmax_steps = 6\nschedule = \"" + schedule + "\"\n" + train_extra +
         "\n\n[data]\nformat = \"csv\"\ntrain = \"" +
         (test::digits_dir() / "digits_train.csv").string() +
         "\"\nlabel_column = \"label\"\ninput_shape = [1, 8, 8]\nscale = 0.0625\n"
         "num_classes = 10\n\n[loss]\nname = \"cross_entropy\"\n\n[optimizer]\nname = \"sgd\"\n"
         "lr = 0.5\nmomentum = 0.9\n";
}

// reference_train.py's state dict for `job` (`extra`: more of its options).
std::map<std::string, at::Tensor> python_state(const fs::path& job, const fs::path& out,
                                               const std::string& extra = "") {
  auto run = test::run_command(test::python() + " " + test::source_dir() +
                               "/tests/python/reference_train.py " + job.string() + " " +
                               test::digits_model() + " " + out.string() + extra);
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  return test::load_state_dict(out);
}

// Trains `job` on `cluster` (pushed), fuses cluster `c`, and returns its state dict.
std::map<std::string, at::Tensor> trained_state(test::LocalCluster& cluster, const fs::path& job,
                                                const std::string& tag, int c = 0) {
  const auto out = cluster.dir() / tag;
  REQUIRE_NOTHROW(cluster.train_and_fuse(job.string(), out.string(), c));
  return test::load_state_dict(out / "trained_state_dict.pt");
}

// The largest change of a floating-point tensor (not BatchNorm's num_batches_tracked, which
// counts forwards whatever the weights do).
double weights_moved(const std::map<std::string, at::Tensor>& initial,
                     const std::map<std::string, at::Tensor>& trained) {
  double moved = 0;
  for (const auto& [name, before] : initial) {
    auto after = trained.find(name);
    if (!before.is_floating_point() || after == trained.end()) continue;
    moved = std::max(moved, (after->second - before).abs().max().item<double>());
  }
  return moved;
}

// Numbers in a text: a JSON list of numbers (reference_train.py's) or one per line (losses.txt).
std::vector<double> numbers_in(std::string text) {
  for (char& c : text) {
    if (c == '[' || c == ']' || c == ',') c = ' ';
  }
  std::istringstream in(text);
  std::vector<double> values;
  for (double v; in >> v;) values.push_back(v);
  return values;
}

// Waits until node_0 of `cluster` has made at least `updates` updates.
void wait_for_updates(const test::LocalCluster& cluster, uint64_t updates) {
  const auto plan = requester::load_plan(cluster.plan_dir());
  requester::Requester requester(plan, base::read_secret(cluster.secret_file()));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (requester.status_of(plan.nodes[0]).updates >= updates) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  FAIL("the job never reached " << updates << " updates");
}

}  // namespace

TEST_CASE("knobs: clipping by norm over three stages equals clip_grad_norm_ on the whole model",
          "[knobs][exact]") {
  const auto cuts = test::LocalCluster::even_cuts(test::digits_model(), 3);
  REQUIRE(cuts.size() == 2);
  test::LocalCluster cluster(test::digits_model(), {cuts}, {"32x1x8x8"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const auto initial = training::state_of(torch::jit::load(test::digits_model()));
  struct Run {
    std::string extra, schedule;
    int micro;
  };
  const Run runs[] = {{"grad_clip_norm = 0.25", "gpipe", 2},
                      {"grad_clip_norm = 0.05\ngrad_clip_norm_type = \"inf\"\ngrad_clip_value = 0.02",
                       "1f1b", 4}};
  int k = 0;
  for (const auto& run : runs) {
    INFO(run.schedule << ", " << run.micro << " micro-batches, " << run.extra);
    const auto job = cluster.dir() / ("job_" + std::to_string(k) + ".toml");
    test::write_text(job, job_text(run.extra, run.schedule, run.micro));
    const auto trained = trained_state(cluster, job, "trained_" + std::to_string(k));
    const auto python = python_state(job, cluster.dir() / ("python_" + std::to_string(k) + ".pt"));
    std::string where;
    const double diff = test::largest_difference(python, trained, &where);
    INFO("largest difference from PyTorch " << diff << " in " << where);
    CHECK(diff <= 1e-5);
    // The clip acted: PyTorch without it ends far from here.
    const auto unclipped_job = cluster.dir() / ("unclipped_" + std::to_string(k) + ".toml");
    test::write_text(unclipped_job, job_text("", run.schedule, run.micro));
    const auto unclipped =
        python_state(unclipped_job, cluster.dir() / ("unclipped_" + std::to_string(k) + ".pt"));
    const double clipped_away = test::largest_difference(unclipped, trained, &where);
    INFO("clipping moved the result by " << clipped_away << " in " << where);
    CHECK(clipped_away > 1e-2);
    const double moved = weights_moved(initial, trained);
    INFO("training moved the weights by " << moved);
    CHECK(moved > 1e-3);
    ++k;
  }
}

TEST_CASE("knobs: clipping over two clusters of two stages clips the averaged gradient",
          "[knobs][exact][data-parallel]") {
  const auto cuts = test::LocalCluster::even_cuts(test::digits_model(), 2);
  test::LocalCluster cluster(test::digits_model(), {cuts, cuts}, {"32x1x8x8"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const auto job = cluster.dir() / "job.toml";
  test::write_text(job, job_text("reduce = \"gradients\"\ngrad_clip_norm = 0.25", "1f1b", 2));
  auto reference =
      training::train_reference_clusters(test::digits_model(), config::load_job(job.string()), 2, 6);
  auto no_clip = config::load_job(job.string());
  no_clip.train.grad_clip_norm.reset();
  auto unclipped = training::train_reference_clusters(test::digits_model(), no_clip, 2, 6);
  std::string where;
  const double clipped_away = test::largest_difference(unclipped.state, reference.state, &where);
  INFO("clipping moved the reference by " << clipped_away << " in " << where);
  CHECK(clipped_away > 1e-2);
  for (int c = 0; c < 2; ++c) {
    const auto out = cluster.dir() / ("trained_" + std::to_string(c));
    if (c == 0) REQUIRE_NOTHROW(cluster.train_and_fuse(job.string(), out.string(), 0));
    auto fuse = cluster.ravnest("fuse", "--cluster " + std::to_string(c) + " --out " + out.string());
    INFO(fuse.out << fuse.err);
    REQUIRE(fuse.exit_code == 0);
    const auto trained = test::load_state_dict(out / "trained_state_dict.pt");
    const double diff = test::largest_difference(reference.state, trained, &where);
    INFO("cluster " << c << ": largest difference " << diff << " in " << where);
    CHECK(diff <= 1e-5);
  }
}

// bf16 rounds every matmul's inputs to 8 bits of mantissa, the same ops in the same order in
// both (the cut only moves a bf16 activation and its bf16 gradient between processes, which the
// wire carries as they are): the weights agree to float32 rounding, not to bf16's 4e-3.
TEST_CASE("knobs: bf16 autocast over two stages equals PyTorch under torch.autocast",
          "[knobs][exact]") {
  const auto cuts = test::LocalCluster::even_cuts(test::digits_model(), 2);
  test::LocalCluster cluster(test::digits_model(), {cuts}, {"32x1x8x8"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const auto job = cluster.dir() / "job.toml";
  test::write_text(job, job_text("autocast = \"bf16\"\ngrad_clip_norm = 0.5", "gpipe", 2));
  const auto trained = trained_state(cluster, job, "trained");
  const auto python = python_state(job, cluster.dir() / "python.pt");
  std::string where;
  const double diff = test::largest_difference(python, trained, &where);
  INFO("largest difference from PyTorch " << diff << " in " << where);
  CHECK(diff <= 1e-5);
  // And bf16 is on: float32 training ends elsewhere.
  const auto fp32_job = cluster.dir() / "fp32.toml";
  test::write_text(fp32_job, job_text("grad_clip_norm = 0.5", "gpipe", 2));
  const auto fp32 = python_state(fp32_job, cluster.dir() / "fp32.pt");
  CHECK(test::largest_difference(fp32, trained, &where) > 1e-4);

  if (torch_support::kTorchMajor < 2) {
    // 1.13's CPU autocast has no float16: refused at start, in one line naming the key.
    const auto fp16_job = cluster.dir() / "fp16.toml";
    test::write_text(fp16_job, job_text("autocast = \"fp16\"", "gpipe", 2));
    auto train = cluster.ravnest("train", fp16_job.string());
    INFO(train.out << train.err);
    CHECK(train.exit_code != 0);
    CHECK((train.out + train.err).find("train.autocast: \"fp16\" on the CPU needs LibTorch 2.x") !=
          std::string::npos);
  }
}

// fp16 autocast with its loss scaler over three stages, against one PyTorch 2.x process under
// torch.autocast("cpu", dtype=torch.float16) with torch.amp.GradScaler("cpu", ...) of the same
// arguments. The scale starts at 2^40 so that the first updates overflow fp16 (a gradient of the
// loss times 2^40 is far above fp16's 65504): those steps are skipped on every stage at once and
// the scale backs off by 2^-12 each time (2^40, 2^28, then 2^16, where the gradients fit); it
// grows every 2 clean updates. A stage that stepped on an inf would
// end in nan, one that skipped a step the others took far from PyTorch. As with bf16 the same
// operators run in the same dtypes on both sides (a cut carries the fp16 activation and its
// fp16 gradient as they are), so the weights agree to float32 rounding: 1e-5 like the other
// exact cases; the losses to losses.txt's 6 significant digits.
TEST_CASE("knobs: fp16_scaler: fp16 autocast over 3 stages equals torch.amp.GradScaler",
          "[knobs][exact]") {
  if (torch_support::kTorchMajor < 2) {
    WARN("skipped: fp16 autocast on the CPU needs LibTorch 2.x (this build has " +
         std::string(torch_support::kTorchVersion) + "); the torch2 pass (build-torch2) runs it");
    return;
  }
  const auto cuts = test::LocalCluster::even_cuts(test::digits_model(), 3);
  REQUIRE(cuts.size() == 2);
  test::LocalCluster cluster(test::digits_model(), {cuts}, {"32x1x8x8"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const std::string scaler =
      "autocast = \"fp16\"\nscaler_init_scale = 1099511627776\n"  // 2^40
      "scaler_backoff_factor = 0.000244140625\nscaler_growth_interval = 2\n";  // 2^-12
  struct Run {
    std::string extra, schedule;
    int micro;
  };
  // By norm: the flags travel with the norms; by value only: the flags alone cross the ring.
  const Run runs[] = {{scaler + "grad_clip_norm = 0.5", "gpipe", 2},
                      {scaler + "grad_clip_value = 0.05", "1f1b", 4}};
  int k = 0;
  for (const auto& run : runs) {
    INFO(run.schedule << ", " << run.micro << " micro-batches, " << run.extra);
    const std::string tag = "fp16_" + std::to_string(k++);
    const auto job = cluster.dir() / (tag + ".toml");
    test::write_text(job, job_text(run.extra, run.schedule, run.micro));
    const auto trained = trained_state(cluster, job, "trained_" + tag);
    const auto losses_json = cluster.dir() / (tag + "_losses.json");
    const auto scales_json = cluster.dir() / (tag + "_scales.json");
    const auto python = python_state(job, cluster.dir() / (tag + ".pt"),
                                     " --losses " + losses_json.string() + " --scales " +
                                         scales_json.string());
    // PyTorch skipped the first two steps (the scale backed off twice), then grew it.
    const auto scales = numbers_in(test::read_text(scales_json));
    INFO("PyTorch's scale after each update:" << test::read_text(scales_json));
    REQUIRE(scales.size() == 6);
    CHECK(scales[0] == std::ldexp(1.0, 28));
    CHECK(scales[1] == std::ldexp(1.0, 16));
    CHECK(*std::max_element(scales.begin(), scales.end()) > std::ldexp(1.0, 16));
    std::string where;
    const double diff = test::largest_difference(python, trained, &where);
    INFO("largest difference from PyTorch " << diff << " in " << where);
    CHECK(diff <= 1e-5);
    const auto expected = numbers_in(test::read_text(losses_json));
    const auto got = numbers_in(test::read_text(cluster.data_dir(2) / "losses.txt"));
    REQUIRE(expected.size() == 6);
    REQUIRE(got.size() == expected.size());
    double worst_loss = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("batch " << i << ": " << got[i] << " against PyTorch's " << expected[i]);
      CHECK(std::abs(got[i] - expected[i]) <= 1e-5 * std::abs(expected[i]));
      worst_loss = std::max(worst_loss, std::abs(got[i] - expected[i]) / std::abs(expected[i]));
    }
    WARN("fp16, " << run.schedule << ": weights " << diff << " from PyTorch's (in " << where
                  << "), losses " << worst_loss << " relative; PyTorch's scales "
                  << test::read_text(scales_json));
    const auto initial = training::state_of(torch::jit::load(test::digits_model()));
    CHECK(weights_moved(initial, trained) > 1e-3);
  }
}

// The scale is in the checkpoint: a job stopped (`ravnest stop`) and resumed ends with the weights
// and losses of the job run without interruption, to the last bit. The scale moves all along
// (it grows every 3 clean updates and backs off on each overflow): a resumed stage that started
// again from scaler_init_scale (2^40) would skip the next updates the uninterrupted job took.
TEST_CASE("knobs: fp16_resume: the loss scale comes back from the checkpoint", "[knobs][exact]") {
  if (torch_support::kTorchMajor < 2) {
    WARN("skipped: fp16 autocast on the CPU needs LibTorch 2.x (this build has " +
         std::string(torch_support::kTorchVersion) + "); the torch2 pass (build-torch2) runs it");
    return;
  }
  const auto cuts = test::LocalCluster::even_cuts(test::digits_model(), 3);
  test::LocalCluster cluster(test::digits_model(), {cuts}, {"32x1x8x8"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const auto job = cluster.dir() / "job.toml";
  test::write_text(job, "[train]\nepochs = 2\nbatch_size = 32\nmicro_batches = 2\nseed = 5\n"
                        "autocast = \"fp16\"\nscaler_init_scale = 1099511627776\n"
                        "scaler_backoff_factor = 0.000244140625\nscaler_growth_interval = 3\n"
                        "grad_clip_norm = 1.0\n\n[data]\nformat = \"csv\"\ntrain = \"" +
                            (test::digits_dir() / "digits_train.csv").string() +
                            "\"\nlabel_column = \"label\"\ninput_shape = [1, 8, 8]\n"
                            "scale = 0.0625\nnum_classes = 10\n\n[loss]\n"
                            "name = \"cross_entropy\"\n\n[optimizer]\nname = \"sgd\"\nlr = 0.05\n"
                            "momentum = 0.9\n");
  auto whole = cluster.ravnest("train", job.string());
  INFO(whole.out << whole.err);
  REQUIRE(whole.exit_code == 0);
  const auto expected = cluster.fuse_all(1, 2, "whole");

  auto detached = cluster.ravnest("train", job.string() + " --detach");
  INFO(detached.out << detached.err);
  REQUIRE(detached.exit_code == 0);
  wait_for_updates(cluster, 15);
  auto stop = cluster.ravnest("stop");
  INFO(stop.out << stop.err);
  REQUIRE(stop.exit_code == 0);
  auto resumed = cluster.ravnest("resume");
  INFO(resumed.out << resumed.err);
  REQUIRE(resumed.exit_code == 0);
  REQUIRE(resumed.out.find("resuming after update ") != std::string::npos);
  const auto got = cluster.fuse_all(1, 2, "resumed");
  std::string where;
  CHECK(test::largest_difference(expected.clusters[0], got.clusters[0], &where) == 0);
  CHECK(got.losses == expected.losses);
}
