// Losses, optimizers, LR schedules, evaluation and the reference trainer, checked against hand
// computations and against PyTorch in Python (/usr/bin/python3): the LR sequences of
// torch.optim.lr_scheduler, and whole training runs (tests/python/reference_train.py) whose
// final weights must match the C++ reference trainer's to 1e-5.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <fstream>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include "libs/stage/torchscript_stage.h"
#include "libs/config/job/job_spec.h"
#include "libs/data/dataset.h"
#include "libs/training/evaluate.h"
#include "libs/training/loss.h"
#include "libs/training/lr_schedule.h"
#include "libs/training/optimizer.h"
#include "libs/training/reference_trainer.h"
#include "tests/support/test_env.h"

using namespace ravnest;
using training::Loss;
using training::LrSchedule;

namespace {

config::LossSpec loss_spec(config::LossName name) {
  config::LossSpec spec;
  spec.name = name;
  return spec;
}

std::string python_or_fail(const std::string& script_text, const std::string& args = "", int timeout = 600) {
  test::TempDir dir;
  const auto script = dir / "script.py";
  test::write_text(script, script_text);
  const auto run = test::run_command(test::python() + " " + script.string() + " " + args, timeout);
  INFO("python stderr: " << run.err);
  REQUIRE(run.exit_code == 0);
  return run.out;
}

std::map<std::string, at::Tensor> load_state(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const c10::IValue value = torch::jit::pickle_load(bytes);
  std::map<std::string, at::Tensor> out;
  for (const auto& entry : value.toGenericDict()) out[entry.key().toStringRef()] = entry.value().toTensor();
  return out;
}

double log_sum_exp(const std::vector<double>& v) {
  double m = *std::max_element(v.begin(), v.end()), s = 0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}

const std::string& digits_dir() {
  static const std::string path = test::digits_dir().string();
  return path;
}

// The first `rows` data rows of digits_train.csv, as `name` in `dir`.
void write_digits_subset(const std::filesystem::path& dir, const std::string& name, int rows) {
  std::ifstream in(digits_dir() + "/digits_train.csv");
  std::ofstream out(dir / name);
  std::string line;
  for (int i = 0; i <= rows && std::getline(in, line); ++i) out << line << '\n';
}

}  // namespace

// ------------------------------------------------------------------------------------ losses

TEST_CASE("micro_batch_loss_weight: samples / batch_samples / update_frequency") {
  CHECK(training::micro_batch_loss_weight(16, 64, 1) == 0.25);
  CHECK(training::micro_batch_loss_weight(3, 10, 2) == Approx(0.15));
  CHECK(training::micro_batch_loss_weight(10, 10, 4) == 0.25);
  CHECK_THROWS(training::micro_batch_loss_weight(11, 10, 1));
  CHECK_THROWS(training::micro_batch_loss_weight(1, 0, 1));
  CHECK_THROWS(training::micro_batch_loss_weight(1, 10, 0));
}

TEST_CASE("built-in losses equal hand computations") {
  const std::vector<std::vector<double>> logits = {{1, 2, 3}, {1, 0, 0}, {-1, 0.5, 2}};
  const std::vector<int64_t> classes = {2, 0, 1};
  const at::Tensor out = at::tensor({1., 2., 3., 1., 0., 0., -1., 0.5, 2.}, at::kFloat).reshape({3, 3});
  const at::Tensor y = at::tensor({2, 0, 1}, at::kLong);

  SECTION("cross_entropy, also from float and int32 class labels and through a tuple output") {
    double expected = 0;
    for (size_t i = 0; i < 3; ++i) expected += log_sum_exp(logits[i]) - logits[i][classes[i]];
    expected /= 3;
    const Loss loss(loss_spec(config::LossName::kCrossEntropy));
    CHECK(loss(out, y).item<double>() == Approx(expected).epsilon(1e-6));
    CHECK(loss(out, y.to(at::kFloat)).item<double>() == Approx(expected).epsilon(1e-6));
    CHECK(loss(out, y.to(at::kInt)).item<double>() == Approx(expected).epsilon(1e-6));
    const c10::IValue tuple = c10::ivalue::Tuple::create({out, at::zeros({3})});
    CHECK(loss(tuple, y).item<double>() == Approx(expected).epsilon(1e-6));
    CHECK(loss(out, y).dim() == 0);
  }
  SECTION("cross_entropy with class probabilities") {
    const at::Tensor p = at::tensor({0.5, 0.5, 0., 0., 0., 1., 0.2, 0.3, 0.5}, at::kFloat).reshape({3, 3});
    double expected = 0;
    for (size_t i = 0; i < 3; ++i) {
      for (size_t c = 0; c < 3; ++c) {
        expected -= p[i][c].item<double>() * (logits[i][c] - log_sum_exp(logits[i]));
      }
    }
    expected /= 3;
    CHECK(Loss(loss_spec(config::LossName::kCrossEntropy))(out, p).item<double>() == Approx(expected).epsilon(1e-6));
  }
  SECTION("nll on log-probabilities") {
    const double expected = -(3. + 1. + 0.5) / 3;  // -mean(x[i, y_i])
    CHECK(Loss(loss_spec(config::LossName::kNll))(out, y).item<double>() == Approx(expected).epsilon(1e-6));
  }
  SECTION("mse, l1 and bce_with_logits; labels [N] against an output [N, 1]") {
    const at::Tensor o = at::tensor({0.5, -1., 2.}, at::kFloat).reshape({3, 1});
    const at::Tensor t = at::tensor({1, 0, 1}, at::kLong);
    const double o_[] = {0.5, -1, 2}, t_[] = {1, 0, 1};
    double mse = 0, l1 = 0, bce = 0;
    for (int i = 0; i < 3; ++i) {
      mse += (o_[i] - t_[i]) * (o_[i] - t_[i]) / 3;
      l1 += std::fabs(o_[i] - t_[i]) / 3;
      const double s = 1 / (1 + std::exp(-o_[i]));
      bce -= (t_[i] * std::log(s) + (1 - t_[i]) * std::log(1 - s)) / 3;
    }
    CHECK(Loss(loss_spec(config::LossName::kMse))(o, t).item<double>() == Approx(mse).epsilon(1e-6));
    CHECK(Loss(loss_spec(config::LossName::kL1))(o, t).item<double>() == Approx(l1).epsilon(1e-6));
    CHECK(Loss(loss_spec(config::LossName::kBceWithLogits))(o, t).item<double>() == Approx(bce).epsilon(1e-6));
    CHECK(Loss(loss_spec(config::LossName::kMse))(o.reshape({3}), t).item<double>() == Approx(mse).epsilon(1e-6));
    // Shapes that do not match are an error, not a silent broadcast.
    const auto message = [&] {
      try {
        Loss(loss_spec(config::LossName::kMse))(o, at::zeros({3, 2}));
      } catch (const std::runtime_error& e) {
        return std::string(e.what());
      }
      return std::string();
    }();
    CHECK(message == "loss mse: the output's shape [3, 1] differs from the labels' [3, 2]");
  }
  SECTION("errors are one line naming the loss") {
    try {
      Loss(loss_spec(config::LossName::kCrossEntropy))(out, at::tensor({0, 1}, at::kLong));
      FAIL("expected an error");
    } catch (const std::runtime_error& e) {
      const std::string message = e.what();
      CHECK(message.rfind("loss cross_entropy: ", 0) == 0);
      CHECK(message.find('\n') == std::string::npos);
      CHECK(message.find("(output [3, 3], labels [2])") != std::string::npos);
    }
    CHECK_THROWS_WITH(Loss(loss_spec(config::LossName::kMse))(c10::IValue(std::string("x")), y),
                      Catch::Contains("the model's output is a String"));
  }
}

TEST_CASE("script loss: a user's TorchScript module gets the whole output") {
  test::TempDir dir;
  python_or_fail(R"(
import sys, torch
from typing import Tuple
class L(torch.nn.Module):
    def forward(self, outputs: Tuple[torch.Tensor, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        a, b = outputs
        return torch.nn.functional.cross_entropy(a, labels) + 0.5 * b.square().mean()
class Bad(torch.nn.Module):
    def forward(self, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return outputs
torch.jit.script(L()).save(sys.argv[1] + "/loss.pt")
torch.jit.script(Bad()).save(sys.argv[1] + "/bad.pt")
)", dir.path().string());
  config::LossSpec spec = loss_spec(config::LossName::kScript);
  spec.path = {"loss.pt", (dir / "loss.pt").string()};
  const Loss loss(spec);
  const at::Tensor a = at::tensor({1.f, 2.f, 0.f, 0.f}).reshape({2, 2});
  const at::Tensor b = at::tensor({2.f, 4.f});
  const at::Tensor y = at::tensor({1, 0}, at::kLong);
  const double expected = at::cross_entropy_loss(a, y).item<double>() + 0.5 * 10;
  CHECK(loss(c10::ivalue::Tuple::create({a, b}), y).item<double>() == Approx(expected).epsilon(1e-6));
  CHECK_THROWS_WITH(loss(a, y), Catch::StartsWith((dir / "loss.pt").string() + ": forward(outputs, labels) failed"));
  spec.path = {"bad.pt", (dir / "bad.pt").string()};
  CHECK_THROWS_WITH(Loss(spec)(a, y), Catch::Contains("must return a scalar tensor, got a tensor of shape [2, 2]"));
  spec.path = {"none.pt", (dir / "none.pt").string()};
  CHECK_THROWS_WITH(Loss{spec}, Catch::StartsWith((dir / "none.pt").string() + ": cannot open") && Catch::Contains("loss module"));
}

// -------------------------------------------------------------------------------- optimizers

TEST_CASE("make_optimizer: each optimizer with the spec's options; tied weights once") {
  torch::jit::Module tied = torch::jit::load(test::models_dir() + "/tied.pt");
  std::vector<at::Tensor> params;
  for (const auto& p : tied.parameters()) params.push_back(p);
  const auto unique = training::unique_trainable(params);
  INFO("parameters() gave " << params.size());
  CHECK(unique.size() == 3);  // embedding.weight (= decoder.weight), proj.weight, proj.bias
  std::vector<at::Tensor> doubled = params;
  doubled.insert(doubled.end(), params.begin(), params.end());
  doubled.push_back(at::zeros({3}));  // requires_grad false: skipped
  CHECK(training::unique_trainable(doubled).size() == 3);

  config::OptimizerSpec spec;
  spec.name = config::OptimizerName::kSgd;
  spec.lr = 0.3;
  spec.momentum = 0.9;
  spec.dampening = 0;
  spec.nesterov = true;
  spec.weight_decay = 0.01;
  auto opt = training::make_optimizer(spec, doubled);
  REQUIRE(opt->param_groups().size() == 1);
  CHECK(opt->param_groups()[0].params().size() == 3);
  auto* sgd = dynamic_cast<torch::optim::SGD*>(opt.get());
  REQUIRE(sgd);
  const auto& so = static_cast<const torch::optim::SGDOptions&>(sgd->param_groups()[0].options());
  CHECK(so.lr() == 0.3);
  CHECK(so.momentum() == 0.9);
  CHECK(so.nesterov());
  CHECK(so.weight_decay() == 0.01);

  spec.name = config::OptimizerName::kAdam;
  spec.betas = {0.8, 0.9};
  spec.eps = 1e-6;
  spec.amsgrad = true;
  opt = training::make_optimizer(spec, params);
  const auto& ao = static_cast<const torch::optim::AdamOptions&>(opt->param_groups()[0].options());
  REQUIRE(dynamic_cast<torch::optim::Adam*>(opt.get()));
  CHECK(std::get<0>(ao.betas()) == 0.8);
  CHECK(std::get<1>(ao.betas()) == 0.9);
  CHECK(ao.eps() == 1e-6);
  CHECK(ao.amsgrad());
  spec.name = config::OptimizerName::kAdamW;
  CHECK(dynamic_cast<torch::optim::AdamW*>(training::make_optimizer(spec, params).get()));
  spec.name = config::OptimizerName::kRmsprop;
  spec.alpha = 0.7;
  spec.centered = true;
  opt = training::make_optimizer(spec, params);
  REQUIRE(dynamic_cast<torch::optim::RMSprop*>(opt.get()));
  const auto& ro = static_cast<const torch::optim::RMSpropOptions&>(opt->param_groups()[0].options());
  CHECK(ro.alpha() == 0.7);
  CHECK(ro.centered());
  spec.name = config::OptimizerName::kAdagrad;
  spec.lr_decay = 0.1;
  spec.initial_accumulator_value = 0.2;
  opt = training::make_optimizer(spec, params);
  REQUIRE(dynamic_cast<torch::optim::Adagrad*>(opt.get()));
  const auto& go = static_cast<const torch::optim::AdagradOptions&>(opt->param_groups()[0].options());
  CHECK(go.lr_decay() == 0.1);
  CHECK(go.initial_accumulator_value() == 0.2);
}

// ----------------------------------------------------------------------------- LR schedules

TEST_CASE("LR schedules equal torch.optim.lr_scheduler, stepped and in closed form") {
  // Each case: the scheduler as in a job, and the Python constructor.
  struct Case {
    std::string toml;
    std::string python;
  };
  const std::vector<Case> cases = {
      {"name = \"step\"\nstep_size = 3\ngamma = 0.5", "StepLR(opt, step_size=3, gamma=0.5)"},
      {"name = \"step\"\nstep_size = 1", "StepLR(opt, step_size=1)"},
      {"name = \"multistep\"\nmilestones = [2, 5, 11]\ngamma = 0.3", "MultiStepLR(opt, milestones=[2, 5, 11], gamma=0.3)"},
      {"name = \"exponential\"\ngamma = 0.93", "ExponentialLR(opt, gamma=0.93)"},
      {"name = \"cosine\"\nt_max = 10", "CosineAnnealingLR(opt, T_max=10)"},
      {"name = \"cosine\"\nt_max = 7\neta_min = 0.01", "CosineAnnealingLR(opt, T_max=7, eta_min=0.01)"},
      {"name = \"linear_warmup\"\nwarmup_steps = 6", "LinearLR(opt, total_iters=6)"},
      {"name = \"linear_warmup\"\nwarmup_steps = 4\nstart_factor = 0.1", "LinearLR(opt, start_factor=0.1, end_factor=1.0, total_iters=4)"},
  };
  constexpr int kSteps = 30;
  std::string script = "import json, torch\nfrom torch.optim.lr_scheduler import *\nout = []\n";
  for (const auto& c : cases) {
    script += "p = torch.nn.Parameter(torch.zeros(1)); opt = torch.optim.SGD([p], lr=0.1)\n"
              "s = " + c.python + "\nstepped = [opt.param_groups[0]['lr']]\n"
              "closed = [s._get_closed_form_lr()[0]]\n"
              "for _ in range(" + std::to_string(kSteps) + "):\n"
              "    opt.step(); s.step(); stepped.append(opt.param_groups[0]['lr']); closed.append(s._get_closed_form_lr()[0])\n"
              "out.append({'stepped': stepped, 'closed': closed})\n";
  }
  script += "print(json.dumps(out))\n";
  const auto expected = nlohmann::json::parse(python_or_fail(script));
  REQUIRE(expected.size() == cases.size());

  const std::string base = "[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"nll\"\n[optimizer]\nname = \"sgd\"\nlr = 0.1\n";
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO(cases[i].python);
    const auto job = config::parse_job(base + "[scheduler]\n" + cases[i].toml + "\nper = \"update\"\n", "j.toml");
    at::Tensor p = at::zeros({1}).requires_grad_(true);
    torch::optim::SGD opt({p}, torch::optim::SGDOptions(0.1));
    LrSchedule schedule(opt, job.scheduler);
    for (int t = 0; t <= kSteps; ++t) {
      INFO("step " << t);
      const double stepped = expected[i]["stepped"][t].get<double>();
      const double closed = expected[i]["closed"][t].get<double>();
      CHECK(schedule.lr() == Approx(stepped).epsilon(1e-12).margin(1e-15));
      CHECK(schedule.lr() == Approx(closed).epsilon(1e-15).margin(1e-17));
      CHECK(LrSchedule::lr_at(*job.scheduler, 0.1, t) == schedule.lr());
      CHECK(static_cast<const torch::optim::SGDOptions&>(opt.param_groups()[0].options()).lr() == schedule.lr());
      schedule.on_epoch_end();  // per = "update": no effect
      schedule.on_update();
    }
    CHECK(schedule.steps() == kSteps + 1);
  }
}

TEST_CASE("warmup_cosine equals SequentialLR(LinearLR, CosineAnnealingLR); onecycle equals OneCycleLR, "
          "momentum and beta1 included; warmup_linear equals transformers' linear LambdaLR exactly") {
  // Each case: the scheduler as in a job, the optimizer, and the Python that builds both.
  struct Case {
    std::string toml;
    std::string optimizer;  // the [optimizer] table's body
    std::string python;     // sets `opt` and `s`
  };
  const std::vector<Case> cases = {
      {"name = \"warmup_cosine\"\nwarmup_steps = 5\nstart_factor = 0.1\nt_max = 20\neta_min = 0.001",
       "name = \"sgd\"\nlr = 0.1\nmomentum = 0.9",
       "opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)\n"
       "s = SequentialLR(opt, [LinearLR(opt, start_factor=0.1, total_iters=5), "
       "CosineAnnealingLR(opt, T_max=20, eta_min=0.001)], milestones=[5])"},
      {"name = \"warmup_cosine\"\nwarmup_steps = 3\nt_max = 8", "name = \"adam\"\nlr = 0.01",
       "opt = torch.optim.Adam([p], lr=0.01)\n"
       "s = SequentialLR(opt, [LinearLR(opt, total_iters=3), CosineAnnealingLR(opt, T_max=8)], milestones=[3])"},
      // transformers' get_linear_schedule_with_warmup: a LambdaLR over a partial of its lambda
      // (written out here: transformers is not a dependency), past num_training_steps too.
      {"name = \"warmup_linear\"\nwarmup_steps = 7\ntotal_steps = 23", "name = \"adam\"\nlr = 0.00176",
       "opt = torch.optim.Adam([p], lr=0.00176)\n"
       "s = LambdaLR(opt, partial(hf_linear, num_warmup_steps=7, num_training_steps=23))"},
      {"name = \"warmup_linear\"\nwarmup_steps = 0\ntotal_steps = 13", "name = \"sgd\"\nlr = 0.3",
       "opt = torch.optim.SGD([p], lr=0.3)\n"
       "s = LambdaLR(opt, partial(hf_linear, num_warmup_steps=0, num_training_steps=13))"},
      {"name = \"warmup_linear\"\nwarmup_steps = 40\ntotal_steps = 20", "name = \"sgd\"\nlr = 0.07",
       "opt = torch.optim.SGD([p], lr=0.07)\n"
       "s = LambdaLR(opt, partial(hf_linear, num_warmup_steps=40, num_training_steps=20))"},
      {"name = \"onecycle\"\nmax_lr = 0.5\ntotal_steps = 30", "name = \"sgd\"\nlr = 0.1\nmomentum = 0.9",
       "opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)\ns = OneCycleLR(opt, max_lr=0.5, total_steps=30)"},
      {"name = \"onecycle\"\nmax_lr = 0.02\ntotal_steps = 30\npct_start = 0.25\nanneal_strategy = \"linear\"\n"
       "div_factor = 10\nfinal_div_factor = 100\nthree_phase = true\nbase_momentum = 0.8\nmax_momentum = 0.9",
       "name = \"adam\"\nlr = 0.01\nbetas = [0.9, 0.99]",
       "opt = torch.optim.Adam([p], lr=0.01, betas=(0.9, 0.99))\n"
       "s = OneCycleLR(opt, max_lr=0.02, total_steps=30, pct_start=0.25, anneal_strategy='linear', "
       "div_factor=10, final_div_factor=100, three_phase=True, base_momentum=0.8, max_momentum=0.9)"},
      {"name = \"onecycle\"\nmax_lr = 0.05\ntotal_steps = 30\nthree_phase = true",
       "name = \"rmsprop\"\nlr = 0.01\nmomentum = 0.5",
       "opt = torch.optim.RMSprop([p], lr=0.01, momentum=0.5)\ns = OneCycleLR(opt, max_lr=0.05, total_steps=30, three_phase=True)"},
      {"name = \"onecycle\"\nmax_lr = 0.05\ntotal_steps = 30\ncycle_momentum = false", "name = \"adagrad\"",
       "opt = torch.optim.Adagrad([p])\ns = OneCycleLR(opt, max_lr=0.05, total_steps=30, cycle_momentum=False)"},
  };
  constexpr int kSteps = 30;  // onecycle: up to total_steps, as far as PyTorch allows
  std::string script =
      "import json, torch\nfrom functools import partial\nfrom torch.optim.lr_scheduler import *\nout = []\n"
      // transformers' _get_linear_schedule_with_warmup_lr_lambda, as in its optimization.py.
      "def hf_linear(current_step, *, num_warmup_steps, num_training_steps):\n"
      "    if current_step < num_warmup_steps:\n"
      "        return float(current_step) / float(max(1, num_warmup_steps))\n"
      "    return max(0.0, float(num_training_steps - current_step) / "
      "float(max(1, num_training_steps - num_warmup_steps)))\n";
  for (const auto& c : cases) {
    script += "p = torch.nn.Parameter(torch.zeros(1))\n" + c.python +
              "\ndef m(g): return g['betas'][0] if 'betas' in g else g.get('momentum', 0.0)\n"
              "lrs = [opt.param_groups[0]['lr']]; ms = [m(opt.param_groups[0])]\n"
              "for _ in range(" + std::to_string(kSteps) + "):\n"
              "    opt.step(); s.step(); lrs.append(opt.param_groups[0]['lr']); ms.append(m(opt.param_groups[0]))\n"
              "out.append({'lr': lrs, 'momentum': ms})\n";
  }
  script += "print(json.dumps(out))\n";
  const auto expected = nlohmann::json::parse(python_or_fail(script));
  REQUIRE(expected.size() == cases.size());

  const std::string base = "[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"nll\"\n";
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO(cases[i].python);
    const auto job = config::parse_job(base + "[optimizer]\n" + cases[i].optimizer + "\n[scheduler]\n" +
                                           cases[i].toml + "\nper = \"update\"\n", "j.toml");
    at::Tensor p = at::zeros({1}).requires_grad_(true);
    auto opt = training::make_optimizer(job.optimizer, {p});
    LrSchedule schedule(*opt, job.scheduler);
    const bool one_cycle = job.scheduler->name == config::SchedulerName::kOneCycle;
    const bool lambda = job.scheduler->name == config::SchedulerName::kWarmupLinear;
    for (int t = 0; t <= kSteps; ++t) {
      INFO("step " << t);
      const double lr = expected[i]["lr"][t].get<double>();
      const double momentum = expected[i]["momentum"][t].get<double>();
      if (one_cycle || lambda) {
        // OneCycleLR and LambdaLR compute every step from scratch: the same operations give the
        // same double.
        CHECK(schedule.lr() == lr);
      } else {
        // SequentialLR's parts step recursively (lr * ratio), the closed form differs in the
        // last bits, as the other schedules' stepped forms do above.
        CHECK(schedule.lr() == Approx(lr).epsilon(1e-12).margin(1e-15));
      }
      CHECK(LrSchedule::lr_at(*job.scheduler, job.optimizer.lr, t) == schedule.lr());
      auto& options = opt->param_groups()[0].options();
      double got_momentum = 0;
      if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&options)) got_momentum = sgd->momentum();
      if (auto* rms = dynamic_cast<torch::optim::RMSpropOptions*>(&options)) got_momentum = rms->momentum();
      if (auto* adam = dynamic_cast<torch::optim::AdamOptions*>(&options)) got_momentum = std::get<0>(adam->betas());
      CHECK(got_momentum == momentum);
      if (t < kSteps) schedule.on_update();
    }
  }
  // Past total_steps PyTorch raises; so does the schedule, naming the key.
  const auto job = config::parse_job(base + "[optimizer]\nname = \"sgd\"\nlr = 0.1\n[scheduler]\nname = "
                                            "\"onecycle\"\nmax_lr = 0.1\ntotal_steps = 2\nper = \"update\"\n", "j.toml");
  at::Tensor p = at::zeros({1}).requires_grad_(true);
  auto opt = training::make_optimizer(job.optimizer, {p});
  LrSchedule schedule(*opt, job.scheduler);
  schedule.on_update();
  schedule.on_update();
  CHECK_THROWS_WITH(schedule.on_update(), Catch::Contains("more than total_steps = 2"));
}

TEST_CASE("LR schedule per epoch steps only at epoch ends; none leaves the lr alone") {
  config::SchedulerSpec spec;
  spec.name = config::SchedulerName::kExponential;
  spec.gamma = 0.5;
  spec.per = config::SchedulerPer::kEpoch;
  at::Tensor p = at::zeros({1}).requires_grad_(true);
  torch::optim::Adam opt({p}, torch::optim::AdamOptions(0.01));
  LrSchedule schedule(opt, spec);
  schedule.on_update();
  schedule.on_update();
  CHECK(schedule.lr() == 0.01);
  schedule.on_epoch_end();
  CHECK(schedule.lr() == 0.005);
  schedule.step();
  CHECK(schedule.lr() == 0.0025);
  LrSchedule none(opt, std::nullopt);
  none.on_update();
  none.on_epoch_end();
  CHECK(none.lr() == 0.0025);
}

// ------------------------------------------------------------------------------- evaluation

TEST_CASE("evaluate: mean loss and accuracy in eval mode; the module's mode is restored") {
  stage::TorchScriptStage model(torch::jit::load(test::models_dir() + "/small_cnn.pt"));
  model.train(true);
  config::DataSpec spec;
  spec.format = config::DataFormat::kCsv;
  spec.train = {"v", digits_dir() + "/digits_val.csv"};
  spec.label_column = "label";
  spec.input_shape = {1, 8, 8};
  spec.scale = 0.0625;
  const data::Dataset val = data::load_dataset(spec, data::Split::kTrain);
  const Loss loss(loss_spec(config::LossName::kCrossEntropy));
  const training::Evaluation e = training::evaluate(model, val, loss, 64);
  CHECK(model.is_training());
  CHECK(e.samples == val.size());

  model.eval();
  at::NoGradGuard no_grad;
  const auto all = val.get_range(0, val.size());
  const at::Tensor out = model.forward({all.inputs[0]}).toTensor();
  model.train(true);
  const double accuracy = out.argmax(1).eq(all.labels).sum().item<double>() / static_cast<double>(val.size());
  CHECK(e.accuracy == accuracy);
  CHECK(e.loss == Approx(at::cross_entropy_loss(out, all.labels).item<double>()).epsilon(1e-5));
  const config::LossSpec ce = loss_spec(config::LossName::kCrossEntropy);
  CHECK(training::count_correct(out, all.labels.to(at::kFloat), ce).asked == -1);
  CHECK(training::count_correct(out.reshape({-1}), all.labels, ce).asked == -1);

  // Labels per position (segmentation [N, C, H, W] against [N, H, W]): every position counts.
  const at::Tensor pixels = at::zeros({2, 3, 2, 2});
  pixels.select(1, 1).fill_(1.0);  // class 1 everywhere
  const at::Tensor truth = at::tensor({1, 1, 1, 0, 1, 1, 1, 1}, at::kLong).view({2, 2, 2});
  CHECK(training::count_correct(pixels, truth, ce).right == 7);
  CHECK(training::count_correct(pixels, truth, ce).asked == 8);
  CHECK(training::count_correct(pixels, truth.view({2, 4}), ce).asked == -1);  // positions differ
  CHECK(training::count_correct(pixels, truth.to(at::kFloat), ce).asked == -1);  // not classes
  // Ignored positions (ignore_index) are not asked.
  CHECK(training::count_correct(pixels, truth.masked_fill(truth.eq(0), -100), ce).asked == 7);
  CHECK(training::count_correct(pixels, truth.masked_fill(truth.eq(0), -100), ce).right == 7);

  // Regression labels: no accuracy.
  const data::Dataset reg({all.inputs[0]}, at::zeros({val.size(), 10}), "reg");
  const auto r = training::evaluate(model, reg, Loss(loss_spec(config::LossName::kMse)), 100);
  CHECK(std::isnan(r.accuracy));
  CHECK(r.loss > 0);
}

TEST_CASE("cross_entropy, nll and accuracy of a language model's logits [N, T, V]") {
  // Classes last against [N, T] labels: as F.cross_entropy(logits.reshape(-1, V),
  // labels.reshape(-1)), a mean over the labels not ignored (-100, PyTorch's default).
  const at::Tensor logits = at::randn({3, 4, 5}, at::TensorOptions().dtype(at::kDouble));
  at::Tensor labels = at::randint(0, 5, {3, 4}, at::kLong);
  labels[0][3] = -100;
  labels[2][1] = -100;
  double expected = 0;
  int counted = 0;
  int right = 0;
  for (int64_t n = 0; n < 3; ++n) {
    for (int64_t t = 0; t < 4; ++t) {
      const int64_t y = labels[n][t].item<int64_t>();
      if (y == -100) continue;
      const at::Tensor row = logits[n][t];
      expected += row.logsumexp(0).item<double>() - row[y].item<double>();
      right += row.argmax().item<int64_t>() == y;
      ++counted;
    }
  }
  expected /= counted;
  const config::LossSpec ce = loss_spec(config::LossName::kCrossEntropy);
  CHECK(Loss(ce)(logits, labels).item<double>() == Approx(expected).epsilon(1e-12));
  CHECK(Loss(loss_spec(config::LossName::kNll))(logits.log_softmax(-1), labels).item<double>() ==
        Approx(expected).epsilon(1e-12));
  CHECK(training::counted_labels(labels, ce) == counted);
  CHECK(training::counted_labels(labels.to(at::kFloat), ce) == -1);
  CHECK(training::counted_labels(labels, loss_spec(config::LossName::kMse)) == -1);
  const training::Correct c = training::count_correct(logits, labels, ce);
  CHECK(c.right == right);
  CHECK(c.asked == counted);

  // PyTorch's own [N, V, T] still reads as PyTorch reads it.
  CHECK(Loss(ce)(logits.transpose(1, 2).contiguous(), labels).item<double>() ==
        Approx(expected).epsilon(1e-12));
  CHECK(training::count_correct(logits.transpose(1, 2), labels, ce).right == right);
  // Another ignore_index; class_dim chooses where both would read ([N, A, A] against [N, A]).
  config::LossSpec other = ce;
  other.ignore_index = 7;
  CHECK(training::counted_labels(labels, other) == 12);
  const at::Tensor square = at::randn({2, 3, 3});
  const at::Tensor three = at::randint(0, 3, {2, 3}, at::kLong);
  CHECK(training::class_dimension(square, three, ce) == 2);
  other.class_dim = 1;
  CHECK(training::class_dimension(square, three, other) == 1);
  CHECK(training::class_dimension(at::randn({2, 3, 3, 3}), at::randint(0, 3, {2, 3, 3}), ce) == 1);
  // A shape that reads neither way: one line naming both shapes.
  CHECK_THROWS_WITH(Loss(ce).check(logits, at::zeros({3, 7}, at::kLong)),
                    Catch::Contains("[loss]") && Catch::Contains("[3, 4, 5]") &&
                        Catch::Contains("[3, 7]"));
}

TEST_CASE("evaluate: a language model's token accuracy, a number; a regression's, none") {
  stage::TorchScriptStage model(torch::jit::load(test::models_dir() + "/char_lm.pt"));
  data::Dataset train = data::read_tensors(test::models_dir() + "/char_lm.train.pt");
  const training::Evaluation e =
      training::evaluate(model, train, Loss(loss_spec(config::LossName::kCrossEntropy)), 5);
  REQUIRE(std::isfinite(e.accuracy));
  model.eval();
  at::NoGradGuard no_grad;
  const auto all = train.get_range(0, train.size());
  const at::Tensor logits = model.forward({all.inputs[0]}).toTensor();
  const at::Tensor counted = all.labels.ne(-100);
  const double accuracy = logits.argmax(-1).eq(all.labels).logical_and(counted).sum().item<double>() /
                          counted.sum().item<double>();
  CHECK(e.accuracy == Approx(accuracy).epsilon(1e-12));
  // The mean over every token that counts, whatever the batches: one cross_entropy of them all.
  const double loss = at::cross_entropy_loss(logits.reshape({-1, 30}), all.labels.reshape({-1}))
                          .item<double>();
  CHECK(e.loss == Approx(loss).epsilon(1e-5));
}

// ------------------------------------------------------------------------- reference trainer

namespace {

struct Compared {
  double max_difference = 0;
  std::string worst;
};

// Trains `job_text` (written as job.toml next to the data in `dir`) with the C++ reference
// trainer and with tests/python/reference_train.py; compares every state entry and the losses.
Compared train_both(const test::TempDir& dir, const std::string& model, const std::string& job_text,
                    training::ReferenceResult* out = nullptr) {
  test::write_text(dir / "job.toml", job_text);
  const auto job = config::load_job((dir / "job.toml").string());
  const training::ReferenceResult cpp = training::train_reference(model, job);
  const auto run = test::run_command(test::python() + " " + test::source_dir() +
                                     "/tests/python/reference_train.py " + (dir / "job.toml").string() + " " +
                                     model + " " + (dir / "py_state.pt").string() + " --losses " +
                                     (dir / "py_losses.json").string());
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const auto python = load_state((dir / "py_state.pt").string());
  const auto losses = nlohmann::json::parse(test::read_text(dir / "py_losses.json"));
  Compared c;
  REQUIRE(python.size() == cpp.state.size());
  for (const auto& [name, expected] : python) {
    INFO(name);
    REQUIRE(cpp.state.count(name));
    const at::Tensor got = cpp.state.at(name);
    REQUIRE(got.sizes() == expected.sizes());
    const double d = expected.numel() ? (got.to(at::kDouble) - expected.to(at::kDouble)).abs().max().item<double>() : 0;
    if (d >= c.max_difference) {
      c.max_difference = d;
      c.worst = name;
    }
  }
  // Training moved the weights (the comparison is not between two untouched models).
  const auto initial = training::state_of(torch::jit::load(model));
  double moved = 0;
  for (const auto& [name, t] : initial) {
    if (t.is_floating_point()) moved = std::max(moved, (t - cpp.state.at(name)).abs().max().item<double>());
  }
  CHECK(moved > 1e-3);
  REQUIRE(losses.size() == cpp.batch_losses.size());
  for (size_t i = 0; i < losses.size(); ++i) {
    CHECK(cpp.batch_losses[i] == Approx(losses[i].get<double>()).epsilon(1e-5));
  }
  if (out) *out = cpp;
  return c;
}

const char* kDigitsData = R"(
[data]
format = "csv"
train = "train.csv"
label_column = "label"
input_shape = [1, 8, 8]
scale = 0.0625
num_classes = 10
[loss]
name = "cross_entropy"
)";

// The largest difference between two states' tensors of the same name (every name of `a`).
double apart(const std::map<std::string, at::Tensor>& a, const std::map<std::string, at::Tensor>& b) {
  double most = 0;
  for (const auto& [name, t] : a) {
    most = std::max(most, (t.to(at::kDouble) - b.at(name).to(at::kDouble)).abs().max().item<double>());
  }
  return most;
}

}  // namespace

TEST_CASE("reference trainer equals PyTorch in Python: small_cnn, micro-batches, accumulation, schedules") {
  test::TempDir dir;
  write_digits_subset(dir.path(), "train.csv", 230);  // batches of 50: 5 per epoch, the last of 30
  const std::string model = test::models_dir() + "/small_cnn.pt";
  struct Case {
    std::string name;
    std::string job;
  };
  const std::vector<Case> cases = {
      {"sgd + momentum + nesterov + weight decay, step per epoch, accumulation across epochs",
       "[train]\nepochs = 2\nbatch_size = 50\nmicro_batches = 3\nupdate_frequency = 2\nseed = 5\n"
       "[optimizer]\nname = \"sgd\"\nlr = 0.05\nmomentum = 0.9\nnesterov = true\nweight_decay = 1e-3\n"
       "[scheduler]\nname = \"step\"\nstep_size = 1\ngamma = 0.5\nper = \"epoch\"\n"},
      {"adam, cosine per update, partial final accumulation (max_steps 7)",
       "[train]\nepochs = 3\nbatch_size = 50\nmicro_batches = 4\nupdate_frequency = 2\nseed = 11\nmax_steps = 7\n"
       "[optimizer]\nname = \"adam\"\nlr = 0.01\n"
       "[scheduler]\nname = \"cosine\"\nt_max = 4\neta_min = 0.001\nper = \"update\"\n"},
      {"adamw + amsgrad, linear warmup, no shuffle, drop_last",
       "[train]\nepochs = 2\nbatch_size = 50\nmicro_batches = 2\nshuffle = false\ndrop_last = true\n"
       "[optimizer]\nname = \"adamw\"\nlr = 0.01\namsgrad = true\n"
       "[scheduler]\nname = \"linear_warmup\"\nwarmup_steps = 3\nstart_factor = 0.2\nper = \"update\"\n"},
      {"rmsprop centered with momentum, multistep",
       "[train]\nepochs = 1\nbatch_size = 50\nmicro_batches = 5\nseed = 3\n"
       "[optimizer]\nname = \"rmsprop\"\nlr = 0.001\nmomentum = 0.5\ncentered = true\n"
       "[scheduler]\nname = \"multistep\"\nmilestones = [2, 4]\nper = \"update\"\n"},
      {"adagrad, exponential per epoch",
       "[train]\nepochs = 2\nbatch_size = 50\nmicro_batches = 1\nupdate_frequency = 3\n"
       "[optimizer]\nname = \"adagrad\"\nlr = 0.05\nlr_decay = 0.01\n"
       "[scheduler]\nname = \"exponential\"\ngamma = 0.7\n"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    training::ReferenceResult result;
    const Compared d = train_both(dir, model, std::string(kDigitsData) + c.job, &result);
    INFO("worst: " << d.worst << " differs by " << d.max_difference);
    CHECK(d.max_difference < 1e-5);
    CHECK(result.batches > 0);
    WARN(c.name << ": " << result.batches << " batches, " << result.updates << " updates, max |diff| "
                << d.max_difference << " (" << d.worst << ")");
  }
}

TEST_CASE("reference trainer counts batches, updates and validations as documented") {
  test::TempDir dir;
  write_digits_subset(dir.path(), "train.csv", 230);
  write_digits_subset(dir.path(), "val.csv", 40);
  const std::string model = test::models_dir() + "/small_cnn.pt";
  auto job_with = [&](const std::string& train) {
    std::string text = kDigitsData;
    const std::string train_line = "train = \"train.csv\"\n";
    text.insert(text.find(train_line) + train_line.size(), "validation = \"val.csv\"\n");
    test::write_text(dir / "job.toml", text + "[optimizer]\nname = \"sgd\"\nlr = 0.01\n[train]\n" + train);
    return config::load_job((dir / "job.toml").string());
  };
  // 5 batches per epoch, 3 epochs = 15 batches; update_frequency 4: updates after 4, 8, 12 and
  // the partial one after 15.
  auto r = training::train_reference(model, job_with("epochs = 3\nbatch_size = 50\nupdate_frequency = 4\n"));
  CHECK(r.batches == 15);
  CHECK(r.updates == 4);
  CHECK(r.samples == 690);
  CHECK(r.batch_losses.size() == 15);
  CHECK(r.update_lrs.size() == 4);
  REQUIRE(r.validations.size() == 3);  // val_freq 0: at every epoch end (the last one included)
  CHECK(r.validations[0].batches == 5);
  CHECK(r.validations[2].batches == 15);
  CHECK(r.validations[2].updates == 4);
  CHECK(r.validations[2].result.samples == 40);
  CHECK(r.samples_per_second > 0);
  // val_freq 2 with max_steps 9 and update_frequency 1: after updates 2, 4, 6, 8 and at the end.
  r = training::train_reference(model, job_with("epochs = 3\nbatch_size = 50\nval_freq = 2\nmax_steps = 9\n"));
  CHECK(r.batches == 9);
  REQUIRE(r.validations.size() == 5);
  CHECK(r.validations[3].updates == 8);
  CHECK(r.validations[4].updates == 9);
  // max_batches caps further.
  r = training::train_reference(model, job_with("epochs = 3\nbatch_size = 50\n"), 2);
  CHECK(r.batches == 2);
  CHECK(r.epochs_started == 1);
  // Same job, same result.
  const auto a = training::train_reference(model, job_with("epochs = 1\nbatch_size = 50\nmicro_batches = 2\n"));
  const auto b = training::train_reference(model, job_with("epochs = 1\nbatch_size = 50\nmicro_batches = 2\n"));
  for (const auto& [name, t] : a.state) CHECK(at::equal(t, b.state.at(name)));
}

TEST_CASE("reference clusters: one cluster is the one-process run; a join grows the copies") {
  test::TempDir dir;
  write_digits_subset(dir.path(), "train.csv", 230);
  const std::string model = test::models_dir() + "/small_cnn.pt";
  test::write_text(dir / "job.toml", std::string(kDigitsData) +
                                         "[optimizer]\nname = \"sgd\"\nlr = 0.05\n[train]\n"
                                         "epochs = 2\nbatch_size = 25\nreduce = \"parameters\"\n");
  const auto job = config::load_job((dir / "job.toml").string());
  // One cluster reads the whole dataset in its order, as a plan of one cluster does (no shard).
  const auto one = training::train_reference(model, job);
  const auto single = training::train_reference_clusters(model, job, 1);
  for (const auto& [name, t] : one.state) CHECK(at::equal(t, single.state.at(name)));
  // Grown to two after update 6 from cluster 0: the data dealt two ways from batch 6, so the
  // job ends where two clusters' job ends (230 / 2 = 115 samples, 5 batches an epoch: 10).
  const auto grown = training::train_reference_clusters(model, job, 1, -1, {}, {}, {{6, 0}});
  CHECK(grown.batches == 10);
  CHECK(grown.batch_losses.size() == 10);
  for (size_t k = 0; k < 6; ++k) CHECK(grown.batch_losses[k] == single.batch_losses[k]);
  const auto two = training::train_reference_clusters(model, job, 2);
  CHECK(apart(grown.state, two.state) > 1e-4);
  CHECK(apart(grown.state, single.state) > 1e-4);
  CHECK_THROWS_AS(training::train_reference_clusters(model, job, 2, -1, {}, {}, {{0, 0}}),
                  std::invalid_argument);
}

TEST_CASE("reference clusters: a drop per ring, and a dropped cluster that rejoins") {
  test::TempDir dir;
  write_digits_subset(dir.path(), "train.csv", 240);
  const std::string model = test::models_dir() + "/small_cnn.pt";
  test::write_text(dir / "job.toml", std::string(kDigitsData) +
                                         "[optimizer]\nname = \"sgd\"\nlr = 0.05\n[train]\n"
                                         "epochs = 2\nbatch_size = 20\nreduce = \"parameters\"\n");
  const auto job = config::load_job((dir / "job.toml").string());
  // Three clusters, 80 samples each: 4 batches an epoch, 8 updates.
  const auto kept = training::train_reference_clusters(model, job, 3);
  REQUIRE(kept.batches == 8);
  const auto dropped = training::train_reference_clusters(model, job, 3, -1, {}, {{2, {2}}});
  // Rejoins after update 5 from cluster 0: the losses are the drop's until then (the live
  // clusters' mean), and the job's batches are the uninterrupted job's.
  const auto back = training::train_reference_clusters(model, job, 3, -1, {}, {{2, {2}}},
                                                       {{5, 0, 2}});
  REQUIRE(back.batches == 8);
  for (size_t k = 0; k < 5; ++k) CHECK(back.batch_losses[k] == dropped.batch_losses[k]);
  CHECK(back.batch_losses[5] != dropped.batch_losses[5]);
  CHECK(apart(back.state, dropped.state) > 1e-5);
  CHECK(apart(back.state, kept.state) > 1e-5);
  // Cluster 0 itself dropped and back: the result is the first cluster training at the end.
  const auto first_back = training::train_reference_clusters(model, job, 3, -1, {}, {{0, {2}}},
                                                             {{5, 1, 0}});
  CHECK(first_back.batches == 8);
  CHECK(apart(first_back.state, back.state) > 1e-6);  // another cluster's shard missed
  const auto first_gone = training::train_reference_clusters(model, job, 3, -1, {}, {{0, {2}}});
  CHECK(apart(first_gone.state, first_back.state) > 1e-5);

  // Rings of a plan of two stages: the first layer's and the rest. One round for every ring is
  // that round in each; a ring that kept the cluster one round longer is another run.
  std::vector<std::vector<std::string>> rings(2);
  for (const auto& [name, t] : kept.state) {
    (name.rfind("conv1.", 0) == 0 || name.rfind("0.", 0) == 0 ? rings[0] : rings[1]).push_back(name);
  }
  REQUIRE(!rings[0].empty());
  REQUIRE(!rings[1].empty());
  const auto one = training::train_reference_clusters(model, job, 3, -1, {}, {{2, {3}}}, {}, rings);
  const auto each = training::train_reference_clusters(model, job, 3, -1, {}, {{2, {3, 3}}}, {},
                                                       rings);
  CHECK(apart(one.state, each.state) == 0);
  const auto later = training::train_reference_clusters(model, job, 3, -1, {}, {{2, {3, 4}}}, {},
                                                        rings);
  CHECK(apart(later.state, one.state) > 1e-6);
  // And a drop of every ring one round later is not that either.
  const auto both_later =
      training::train_reference_clusters(model, job, 3, -1, {}, {{2, {4}}}, {}, rings);
  CHECK(apart(later.state, both_later.state) > 1e-6);

  // A newcomer joins after update 4 while cluster 2 stays dropped: the data is dealt four ways
  // (60 samples, 3 batches an epoch: the job ends after 6), the dropped cluster counted in the
  // dealing but reading nothing. Losses are the drop's until the join; the result is neither the
  // drop's, nor the join's without the drop. Cluster 2 rejoining after update 5 reads its shard
  // of the four-way dealing: another run again.
  const auto joined_while_dropped =
      training::train_reference_clusters(model, job, 3, -1, {}, {{2, {2}}}, {{4, 0}});
  REQUIRE(joined_while_dropped.batches == 6);
  for (size_t k = 0; k < 4; ++k) {
    CHECK(joined_while_dropped.batch_losses[k] == dropped.batch_losses[k]);
  }
  const auto joined_only = training::train_reference_clusters(model, job, 3, -1, {}, {}, {{4, 0}});
  REQUIRE(joined_only.batches == 6);
  CHECK(apart(joined_while_dropped.state, joined_only.state) > 1e-5);
  CHECK(apart(joined_while_dropped.state, dropped.state) > 1e-5);
  const auto joined_then_back = training::train_reference_clusters(
      model, job, 3, -1, {}, {{2, {2}}}, {{4, 0}, {5, 1, 2}});
  REQUIRE(joined_then_back.batches == 6);
  for (size_t k = 0; k < 5; ++k) {
    CHECK(joined_then_back.batch_losses[k] == joined_while_dropped.batch_losses[k]);
  }
  CHECK(apart(joined_then_back.state, joined_while_dropped.state) > 1e-5);

  // Refused: a rejoin of a cluster not dropped, or before its drop; a drop with a round for each
  // of three rings of two.
  CHECK_THROWS_AS(training::train_reference_clusters(model, job, 3, -1, {}, {}, {{5, 0, 2}}),
                  std::invalid_argument);
  CHECK_THROWS_AS(training::train_reference_clusters(model, job, 3, -1, {}, {{2, {4}}}, {{4, 0, 2}}),
                  std::invalid_argument);
  CHECK_THROWS_AS(training::train_reference_clusters(model, job, 3, -1, {}, {{2, {1, 2, 3}}}, {},
                                                     rings),
                  std::invalid_argument);
}

TEST_CASE("reference trainer equals PyTorch on a model with tied weights (tensors data, mse)") {
  test::TempDir dir;
  python_or_fail(R"(
import sys, torch
g = torch.Generator().manual_seed(3)
tokens = torch.randint(0, 50, (40, 7), generator=g)
targets = torch.randn(40, 7, 50, generator=g)
torch.save({"inputs": tokens, "labels": targets}, sys.argv[1] + "/tied_data.pt")
)", dir.path().string());
  const std::string job =
      "[train]\nepochs = 2\nbatch_size = 16\nmicro_batches = 3\nupdate_frequency = 2\nseed = 9\n"
      "[data]\nformat = \"tensors\"\ntrain = \"tied_data.pt\"\n"
      "[loss]\nname = \"mse\"\n"
      "[optimizer]\nname = \"sgd\"\nlr = 0.5\nmomentum = 0.9\n";
  training::ReferenceResult result;
  const Compared d = train_both(dir, test::models_dir() + "/tied.pt", job, &result);
  INFO("worst: " << d.worst << " differs by " << d.max_difference);
  CHECK(d.max_difference < 1e-5);
  // The tied weight is one tensor: both names hold the same values.
  CHECK(at::equal(result.state.at("embedding.weight"), result.state.at("decoder.weight")));
}

TEST_CASE("reference trainer equals PyTorch in Python: char_lm [N, T, V] with padding") {
  // Micro-batches of 3, 3 and 2 samples whose padding differs: each weighs its tokens that
  // count, so that a batch's gradient is that of one cross_entropy over the batch's tokens.
  test::TempDir dir;
  const std::string job =
      "[train]\nepochs = 2\nbatch_size = 8\nmicro_batches = 3\nupdate_frequency = 2\nseed = 4\n"
      "[data]\nformat = \"tensors\"\ntrain = \"" + test::models_dir() + "/char_lm.train.pt\"\n"
      "[loss]\nname = \"cross_entropy\"\n"
      "[optimizer]\nname = \"adam\"\nlr = 0.01\n";
  const Compared d = train_both(dir, test::models_dir() + "/char_lm.pt", job);
  INFO("worst: " << d.worst << " differs by " << d.max_difference);
  CHECK(d.max_difference < 1e-5);
}

TEST_CASE("the digits job (configs/job_digits.toml) reaches 95% validation accuracy") {
  test::TempDir dir;
  for (const char* name : {"digits_train.csv", "digits_val.csv", "small_cnn.pt"}) {
    std::filesystem::copy_file(digits_dir() + "/" + name, dir / name);
  }
  std::filesystem::copy_file(test::source_dir() + "/configs/job_digits.toml", dir / "job_digits.toml");
  const auto job = config::load_job((dir / "job_digits.toml").string());
  const auto started = std::chrono::steady_clock::now();
  const auto r = training::train_reference((dir / "small_cnn.pt").string(), job);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  REQUIRE_FALSE(r.validations.empty());
  const auto& last = r.validations.back().result;
  WARN("digits job: " << r.batches << " batches, " << r.updates << " updates, final validation accuracy "
                      << last.accuracy << " loss " << last.loss << ", " << seconds << " s in all, "
                      << r.samples_per_second << " samples/s training");
  for (const auto& v : r.validations) {
    UNSCOPED_INFO("epoch " << v.epoch << ": accuracy " << v.result.accuracy << " loss " << v.result.loss);
  }
  CHECK(last.accuracy >= 0.95);
}
