// DiLoCo ([outer], docs/data-parallel.md#diloco) on real daemons: two clusters of two stages
// train H = 3 Adam updates alone, then average theta_global - theta_local over the rings and take
// an outer Nesterov step. Compared with the one-process emulation
// (training::train_reference_clusters) and with tests/python/diloco_reference.py, written from
// the paper with torch.optim.SGD(nesterov=True) as the outer optimizer.
#include <catch2/catch.hpp>

#include <filesystem>

#include <torch/csrc/jit/serialization/import.h>

#include "libs/config/job/job_spec.h"
#include "libs/training/reference_trainer.h"
#include "tests/support/digits.h"
#include "tests/support/local_cluster.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

// 20 updates: outer steps after 3, 6, ..., 18 and after the last (two updates pending).
constexpr int kSteps = 20;

std::string diloco_job(const std::string& outer) {
  return "[train]\nepochs = 1\nbatch_size = 32\nmicro_batches = 2\nseed = 5\nschedule = \"1f1b\"\n"
         "max_steps = " + std::to_string(kSteps) + "\n\n[data]\nformat = \"csv\"\ntrain = \"" +
         (test::digits_dir() / "digits_train.csv").string() +
         "\"\nlabel_column = \"label\"\ninput_shape = [1, 8, 8]\nscale = 0.0625\n"
         "num_classes = 10\n\n[loss]\nname = \"cross_entropy\"\n\n[optimizer]\nname = \"adam\"\n"
         "lr = 0.01\n\n[outer]\n" + outer + "\n";
}

}  // namespace

TEST_CASE("DiLoCo: the daemons' outer Nesterov steps equal PyTorch's and the emulation's",
          "[data-parallel][diloco]") {
  const auto cuts = test::LocalCluster::even_cuts(test::digits_model(), 2);
  test::LocalCluster cluster(test::digits_model(), {cuts, cuts}, {"32x1x8x8"});
  cluster.start_all();
  REQUIRE(cluster.ravnest("push").exit_code == 0);
  const auto job_path = cluster.dir() / "job.toml";
  test::write_text(job_path, diloco_job("name = \"nesterov\"\nlr = 0.7\nmomentum = 0.9\nevery = 3"));
  auto train = cluster.ravnest("train", job_path.string());
  INFO(train.out << train.err);
  REQUIRE(train.exit_code == 0);

  const auto job = config::load_job(job_path.string());
  const auto emulated = training::train_reference_clusters(test::digits_model(), job, 2, kSteps);
  const auto python_out = cluster.dir() / "python_state.pt";
  auto run = test::run_command(test::python() + " " + test::source_dir() +
                               "/tests/python/diloco_reference.py " + job_path.string() + " " +
                               test::digits_model() + " 2 " + python_out.string());
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  const auto python = test::load_state_dict(python_out);
  std::string where;
  const double emulation_vs_python = test::largest_difference(python, emulated.state, &where);
  INFO("emulation vs PyTorch: " << emulation_vs_python << " in " << where);
  CHECK(emulation_vs_python <= 1e-5);

  // Plain parameter averaging after every update of the same data: DiLoCo must differ from it
  // (the outer step is not an average), or the comparison proves nothing.
  auto averaged_job = job;
  averaged_job.outer.reset();
  const auto averaged = training::train_reference_clusters(test::digits_model(), averaged_job, 2, kSteps);
  const double apart = test::largest_difference(averaged.state, emulated.state, &where);
  INFO("DiLoCo vs parameter averaging: " << apart << " in " << where);
  CHECK(apart > 1e-3);

  for (int c = 0; c < 2; ++c) {
    const auto out = cluster.dir() / ("trained_" + std::to_string(c));
    auto fuse = cluster.ravnest("fuse", "--cluster " + std::to_string(c) + " --out " + out.string());
    INFO(fuse.out << fuse.err);
    REQUIRE(fuse.exit_code == 0);
    const auto trained = test::load_state_dict(out / "trained_state_dict.pt");
    const double diff = test::largest_difference(python, trained, &where);
    INFO("cluster " << c << " vs PyTorch: " << diff << " in " << where);
    CHECK(diff <= 1e-5);
    const double moved = test::largest_difference(
        training::state_of(torch::jit::load(test::digits_model())), trained, &where);
    INFO("moved by " << moved << " in " << where);
    CHECK(moved > 1e-3);
  }
}
