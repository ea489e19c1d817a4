// Lamb (libs/training/lamb.h) against torch_optimizer.Lamb itself (tests/python/lamb_reference.py):
// every step of every case bitwise equal, a run resumed from a checkpoint's optimizer bytes
// equal to an uninterrupted one, and its refusals.
//
// The reference runs on the build's Python (RAVNEST_PYTHON). Debian's Python, the 1.13 build's,
// has no torch_optimizer: there the test compares with the same script's output stored in
// tests/training/fixtures/lamb_reference_torch1.13.pt, made once by torch_optimizer 0.3.0 (the
// venv's, put on PYTHONPATH: pure Python) on Debian's torch 1.13:
//   PYTHONPATH=DIR_WITH_torch_optimizer_AND_pytorch_ranger /usr/bin/python3 \
//     tests/python/lamb_reference.py tests/training/fixtures/lamb_reference_torch1.13.pt
// torch.norm differs between the versions (frobenius_norm in 1.13, linalg.vector_norm in 2.x:
// up to 2.4e-7 apart over these steps), so each build has to meet its own version's reference.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/optim/adam.h>

#include "libs/base/atomic_file.h"
#include "libs/torch_support/torch_compat.h"
#include "libs/training/checkpoint.h"
#include "libs/training/lamb.h"
#include "libs/training/lr_schedule.h"
#include "libs/training/optimizer.h"
#include "tests/support/test_env.h"

using namespace ravnest;

namespace {

struct Step {
  std::vector<at::Tensor> grads;   // undefined where the reference gave none
  std::vector<at::Tensor> params;  // after the step
};

struct Case {
  config::OptimizerSpec spec;
  std::vector<at::Tensor> initial;
  std::vector<Step> steps;
  std::vector<std::vector<at::Tensor>> final_state;  // per parameter: exp_avg, exp_avg_sq, step
};

std::vector<at::Tensor> tensors(const c10::IValue& tuple) {
  std::vector<at::Tensor> out;
  for (const auto& v : tuple.toTupleRef().elements()) out.push_back(v.isNone() ? at::Tensor() : v.toTensor());
  return out;
}

std::vector<Case> parse_reference(const std::string& path) {
  const std::string text = base::read_file(path);
  const c10::IValue loaded = torch::jit::pickle_load(std::vector<char>(text.begin(), text.end()));
  std::vector<Case> cases;
  for (const auto& c : loaded.toTupleRef().elements()) {
    const auto& parts = c.toTupleRef().elements();
    REQUIRE(parts.size() == 4);
    const at::Tensor o = parts[0].toTensor();
    REQUIRE(o.numel() == 8);
    const auto option = [&](int64_t i) { return o[i].item<double>(); };
    Case out;
    out.spec.name = config::OptimizerName::kLamb;
    out.spec.lr = option(0);
    out.spec.betas = {option(1), option(2)};
    out.spec.eps = option(3);
    out.spec.weight_decay = option(4);
    out.spec.clamp_value = option(5);
    out.spec.adam = option(6) != 0;
    out.spec.debias = option(7) != 0;
    out.initial = tensors(parts[1]);
    for (const auto& s : parts[2].toTupleRef().elements()) {
      const auto& pair = s.toTupleRef().elements();
      out.steps.push_back({tensors(pair[0]), tensors(pair[1])});
    }
    for (const auto& s : parts[3].toTupleRef().elements()) out.final_state.push_back(tensors(s));
    cases.push_back(std::move(out));
  }
  return cases;
}

// torch_optimizer.Lamb's steps: run now on this build's Python, or stored for 1.13 (see above).
std::vector<Case> reference() {
  test::TempDir dir;
  const auto out = (dir / "lamb.pt").string();
  const auto run = test::run_command(test::python() + " " + test::source_dir() +
                                     "/tests/python/lamb_reference.py " + out);
  if (run.exit_code == 3 && torch_support::kTorchMajor < 2) {
    WARN("no torch_optimizer for " << test::python() << ": comparing with the reference stored "
                                                         "from torch_optimizer 0.3.0 on torch 1.13");
    return parse_reference(test::source_dir() + "/tests/training/fixtures/lamb_reference_torch1.13.pt");
  }
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  return parse_reference(out);
}

std::vector<at::Tensor> fresh_parameters(const std::vector<at::Tensor>& values) {
  std::vector<at::Tensor> params;
  for (const auto& v : values) params.push_back(v.clone().requires_grad_(true));
  return params;
}

void give_grads(std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads) {
  REQUIRE(params.size() == grads.size());
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].mutable_grad() = grads[i].defined() ? grads[i].clone() : at::Tensor();
  }
}

double largest_difference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, (a[i].detach() - b[i]).abs().max().item<double>());
  }
  return worst;
}

bool all_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!at::equal(a[i].detach(), b[i])) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("lamb: every step equals torch_optimizer.Lamb's bitwise", "[lamb]") {
  const auto cases = reference();
  REQUIRE(cases.size() == 4);
  for (size_t c = 0; c < cases.size(); ++c) {
    const Case& ref = cases[c];
    INFO("case " << c << ": lr " << ref.spec.lr << ", weight_decay " << ref.spec.weight_decay
                 << ", clamp_value " << ref.spec.clamp_value << ", adam " << ref.spec.adam
                 << ", debias " << ref.spec.debias);
    auto params = fresh_parameters(ref.initial);
    auto optimizer = training::make_optimizer(ref.spec, params);
    REQUIRE(dynamic_cast<training::Lamb*>(optimizer.get()));
    for (size_t s = 0; s < ref.steps.size(); ++s) {
      INFO("step " << s + 1);
      give_grads(params, ref.steps[s].grads);
      optimizer->step();
      INFO("largest difference " << largest_difference(params, ref.steps[s].params));
      CHECK(all_equal(params, ref.steps[s].params));
    }
    // The comparison is not between untouched copies.
    CHECK(largest_difference(params, ref.initial) > 1e-3);
    for (size_t i = 0; i < params.size(); ++i) {
      INFO("parameter " << i);
      const auto state = training::optimizer_state_tensors(*optimizer, params[i]);
      REQUIRE(state.size() == 2);
      CHECK(at::equal(state[0], ref.final_state[i][0]));
      CHECK(at::equal(state[1], ref.final_state[i][1]));
    }
  }
}

TEST_CASE("lamb: a run resumed from the checkpoint's optimizer bytes equals the uninterrupted one",
          "[lamb]") {
  const auto cases = reference();
  for (size_t c = 0; c < cases.size(); ++c) {
    const Case& ref = cases[c];
    INFO("case " << c);
    auto params = fresh_parameters(ref.initial);
    auto optimizer = training::make_optimizer(ref.spec, params);
    for (size_t s = 0; s < 2; ++s) {
      give_grads(params, ref.steps[s].grads);
      optimizer->step();
    }
    const std::string bytes = training::save_optimizer(*optimizer);
    // A new process: the parameters as the checkpoint holds them, a fresh optimizer, its state.
    std::vector<at::Tensor> values;
    for (const auto& p : params) values.push_back(p.detach());
    auto resumed_params = fresh_parameters(values);
    auto resumed = training::make_optimizer(ref.spec, resumed_params);
    training::restore_optimizer(*resumed, bytes);
    for (size_t s = 2; s < ref.steps.size(); ++s) {
      INFO("step " << s + 1);
      give_grads(resumed_params, ref.steps[s].grads);
      resumed->step();
      CHECK(all_equal(resumed_params, ref.steps[s].params));
    }
    for (size_t i = 0; i < resumed_params.size(); ++i) {
      const auto& state = static_cast<const training::LambParamState&>(
          *resumed->state().at(torch_support::optimizer_state_key(resumed_params[i])));
      // Parameter 4 had no gradient at step 2: one step fewer, as in Python.
      CHECK(state.step() == ref.final_state[i][2].item<int64_t>());
    }
  }
}

TEST_CASE("lamb: refuses what torch_optimizer.Lamb refuses", "[lamb]") {
  const std::vector<at::Tensor> params = {at::ones({3}).requires_grad_(true)};
  using training::LambOptions;
  CHECK_THROWS_WITH(training::Lamb(params, LambOptions(0)), Catch::Contains("Invalid learning rate"));
  CHECK_THROWS_WITH(training::Lamb(params, LambOptions(0.1).eps(-1)), Catch::Contains("Invalid epsilon"));
  CHECK_THROWS_WITH(training::Lamb(params, LambOptions(0.1).betas({1.0, 0.9})),
                    Catch::Contains("beta parameter at index 0"));
  CHECK_THROWS_WITH(training::Lamb(params, LambOptions(0.1).betas({0.9, -0.1})),
                    Catch::Contains("beta parameter at index 1"));
  CHECK_THROWS_WITH(training::Lamb(params, LambOptions(0.1).weight_decay(-1)),
                    Catch::Contains("Invalid weight_decay"));
  CHECK_THROWS_WITH(training::Lamb(params, LambOptions(0.1).clamp_value(-1)),
                    Catch::Contains("Invalid clamp value"));

  training::Lamb lamb(params, LambOptions(0.1));
  auto p = params[0];
  p.mutable_grad() = at::ones({3}).to_sparse();
  CHECK_THROWS_WITH(lamb.step(), Catch::Contains("Lamb does not support sparse gradients"));
  CHECK(at::equal(p.detach(), at::ones({3})));
}

TEST_CASE("lamb: onecycle cycles its beta1 and lr as Adam's", "[lamb]") {
  // OneCycleLR cycles betas[0] of any optimizer whose defaults hold betas, torch_optimizer.Lamb's
  // too; test_training checks Adam's against OneCycleLR itself.
  const std::string job = "[data]\nformat = \"csv\"\ntrain = \"t\"\n[loss]\nname = \"nll\"\n[scheduler]\n"
                          "name = \"onecycle\"\nmax_lr = 0.05\ntotal_steps = 30\nthree_phase = true\n"
                          "per = \"update\"\n[optimizer]\nbetas = [0.9, 0.99]\nname = ";
  const auto lamb_job = config::parse_job(job + "\"lamb\"\n", "j.toml");
  const auto adam_job = config::parse_job(job + "\"adam\"\n", "j.toml");
  const std::vector<at::Tensor> lamb_params = {at::zeros({1}).requires_grad_(true)};
  const std::vector<at::Tensor> adam_params = {at::zeros({1}).requires_grad_(true)};
  auto lamb = training::make_optimizer(lamb_job.optimizer, lamb_params);
  auto adam = training::make_optimizer(adam_job.optimizer, adam_params);
  training::LrSchedule lamb_schedule(*lamb, lamb_job.scheduler);
  training::LrSchedule adam_schedule(*adam, adam_job.scheduler);
  std::set<double> beta1s;
  for (int t = 0; t < 30; ++t) {
    INFO("step " << t);
    const auto& l = static_cast<const training::LambOptions&>(lamb->param_groups()[0].options());
    const auto& a = static_cast<const torch::optim::AdamOptions&>(adam->param_groups()[0].options());
    CHECK(l.lr() == a.lr());
    CHECK(l.betas() == a.betas());
    CHECK(std::get<1>(l.betas()) == 0.99);
    beta1s.insert(std::get<0>(l.betas()));
    lamb_schedule.on_update();
    adam_schedule.on_update();
  }
  CHECK(beta1s.size() >= 8);  // it did cycle (up and down through the same values)
  CHECK(*beta1s.begin() == Approx(0.85));
  CHECK(*beta1s.rbegin() == Approx(0.95));
}
