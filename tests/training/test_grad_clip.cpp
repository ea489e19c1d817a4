// Gradient clipping (grad_clip.h) and the loss scaler (grad_scaler.h): clipping cut into stages
// gives exactly the one-process clip, which is PyTorch's clip_grad_norm_ (checked against
// Debian's PyTorch); the scaler skips and backs off on an inf, grows after its interval.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include <ATen/ATen.h>

#include "libs/training/grad_clip.h"
#include "libs/training/grad_scaler.h"
#include "tests/support/test_env.h"

using namespace ravnest;

namespace {

std::vector<at::Tensor> sample_grads() {
  at::manual_seed(3);
  return {at::randn({4, 3}), at::randn({3}), at::randn({2, 2, 2}) * 10};
}

std::vector<at::Tensor> copies(const std::vector<at::Tensor>& grads) {
  std::vector<at::Tensor> out;
  for (const auto& g : grads) out.push_back(g.clone());
  return out;
}

}  // namespace

TEST_CASE("clipping cut into stages equals clipping in one process, bit for bit") {
  for (double p : {2.0, 1.0, 3.0, std::numeric_limits<double>::infinity()}) {
    INFO("norm type " << p);
    auto whole = copies(sample_grads());
    const at::Tensor total = training::clip_grad_norm(whole, 0.5, p);
    CHECK(total.item<float>() > 0.5f);  // it clips

    // Stage 0 holds the first gradient, stage 1 the others: norms exchanged, same total.
    auto cut = copies(sample_grads());
    auto first = training::gradient_norms({cut[0]}, p);
    auto rest = training::gradient_norms({cut[1], cut[2]}, p);
    first.insert(first.end(), rest.begin(), rest.end());
    const at::Tensor total_cut = training::total_norm(first, p);
    CHECK(total_cut.item<float>() == total.item<float>());
    const at::Tensor coef = training::clip_coefficient(total_cut, 0.5);
    training::scale_gradients({cut[0]}, coef);
    training::scale_gradients({cut[1], cut[2]}, coef);
    for (size_t i = 0; i < whole.size(); ++i) CHECK(at::equal(whole[i], cut[i]));
  }
  // Below max_norm nothing changes (the coefficient is clamped to 1).
  auto small = copies(sample_grads());
  training::clip_grad_norm(small, 1e6, 2.0);
  const auto original = sample_grads();
  for (size_t i = 0; i < small.size(); ++i) CHECK(at::equal(small[i], original[i]));
}

TEST_CASE("clip_grad_norm and clip_grad_value_ equal PyTorch's") {
  const std::string script =
      "import torch\n"
      "torch.manual_seed(3)\n"
      "g = [torch.randn(4, 3), torch.randn(3), torch.randn(2, 2, 2) * 10]\n"
      "ps = [torch.nn.Parameter(torch.zeros_like(x)) for x in g]\n"
      "for p, x in zip(ps, g): p.grad = x.clone()\n"
      "t = torch.nn.utils.clip_grad_norm_(ps, 0.5, NORM)\n"
      "torch.nn.utils.clip_grad_value_(ps, 0.01)\n"
      "print(repr(t.item()), *[repr(v) for p in ps for v in p.grad.flatten().tolist()])\n";
  for (const std::string norm : {"2.0", "1.0", "float('inf')"}) {
    INFO("norm type " << norm);
    std::string code = script;
    code.replace(code.find("NORM"), 4, norm);
    auto run = test::run_command(test::python() + " -c \"" + code + "\"");
    INFO(run.out << run.err);
    REQUIRE(run.exit_code == 0);
    std::istringstream values(run.out);
    auto grads = copies(sample_grads());
    const double p = norm == "2.0" ? 2.0 : norm == "1.0" ? 1.0 : INFINITY;
    const at::Tensor total = training::clip_grad_norm(grads, 0.5, p);
    training::clip_gradients_by_value(grads, 0.01);
    double expected = 0;
    values >> expected;
    CHECK(total.item<float>() == static_cast<float>(expected));
    for (const auto& g : grads) {
      auto flat = g.flatten();
      for (int64_t i = 0; i < flat.numel(); ++i) {
        values >> expected;
        CHECK(flat[i].item<float>() == static_cast<float>(expected));
      }
    }
  }
}

TEST_CASE("the loss scaler: an inf skips and backs off, a clean interval grows") {
  training::GradScaler scaler;
  CHECK(scaler.scale() == 65536.0);
  // Unscaling divides exactly by the scale.
  at::Tensor g = at::full({3}, 65536.0f * 0.25f);
  CHECK_FALSE(scaler.unscale({g}));
  CHECK(at::equal(g, at::full({3}, 0.25f)));
  scaler.update(false);
  CHECK(scaler.growth_tracker() == 1);
  // A forced inf on any gradient: found, the scale halves, the tracker starts again.
  at::Tensor clean = at::ones({2});
  at::Tensor bad = at::ones({2});
  bad[1] = std::numeric_limits<float>::infinity();
  CHECK(scaler.unscale({clean, bad}));
  scaler.update(true);
  CHECK(scaler.scale() == 32768.0);
  CHECK(scaler.growth_tracker() == 0);
  at::Tensor nan = at::full({1}, std::nanf(""));
  CHECK(scaler.unscale({nan}));

  training::GradScaler::Options fast;
  fast.growth_interval = 3;
  training::GradScaler growing(fast);
  for (int i = 0; i < 2; ++i) growing.update(false);
  CHECK(growing.scale() == 65536.0);
  growing.update(false);
  CHECK(growing.scale() == 131072.0);
  CHECK(growing.growth_tracker() == 0);

  // Restored from a checkpoint: one more clean update completes the interval there too.
  training::GradScaler resumed(fast);
  resumed.restore(1024.0, 2);
  CHECK(resumed.scale() == 1024.0);
  resumed.update(false);
  CHECK(resumed.scale() == 2048.0);
  // A huge first scale, rounded to a float as PyTorch's float32 tensor holds it.
  training::GradScaler::Options huge;
  huge.init_scale = 1099511627776.0 + 1.0;  // 2^40 + 1 is no float
  CHECK(training::GradScaler(huge).scale() == 1099511627776.0);
}
