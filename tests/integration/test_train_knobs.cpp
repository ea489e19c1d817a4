// The training knobs of [train] on real daemons, against PyTorch itself: gradient clipping over
// every stage of a pipeline (clip_grad_norm_ and clip_grad_value_ on the whole model, Debian's
// PyTorch through tests/python/reference_train.py), across two clusters (the one-process
// emulation, training::train_reference_clusters), and bf16 autocast on the CPU (the forward under
// torch.autocast("cpu", dtype=torch.bfloat16)).
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>

#include <torch/csrc/jit/serialization/import.h>

#include "libs/config/job/job_spec.h"
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

// reference_train.py's state dict for `job`.
std::map<std::string, at::Tensor> python_state(const fs::path& job, const fs::path& out) {
  auto run = test::run_command(test::python() + " " + test::source_dir() +
                               "/tests/python/reference_train.py " + job.string() + " " +
                               test::digits_model() + " " + out.string());
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
