// DiLoCo's outer step (libs/training/outer_optimizer.h): torch.optim.SGD's arithmetic written out
// by hand on small numbers, momentum kept across steps, and the checkpointed state restoring it.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <unistd.h>

#include <filesystem>

#include "libs/training/checkpoint.h"
#include "libs/training/outer_optimizer.h"

using namespace ravnest;

namespace {

at::Tensor values(std::vector<double> v) { return at::tensor(v, at::kDouble); }

double at_(const at::Tensor& t, int i) { return t[i].item<double>(); }

}  // namespace

TEST_CASE("sgd_step: torch.optim.SGD's nesterov, plain momentum and momentum-free steps") {
  const double lr = 0.5, m = 0.9;
  const at::Tensor g1 = values({1, -2}), g2 = values({0.5, 4});
  {
    at::Tensor p = values({10, 20}), buf;
    training::sgd_step(p, buf, g1, lr, m, /*nesterov=*/true);
    // buf = g1; d = g1 + m*buf = 1.9*g1
    CHECK(at_(buf, 0) == 1);
    CHECK(at_(p, 0) == Approx(10 - 0.5 * 1.9));
    CHECK(at_(p, 1) == Approx(20 + 0.5 * 3.8));
    training::sgd_step(p, buf, g2, lr, m, true);
    // buf = m*g1 + g2; d = g2 + m*buf
    const double b0 = 0.9 * 1 + 0.5, b1 = 0.9 * -2 + 4;
    CHECK(at_(buf, 0) == Approx(b0));
    CHECK(at_(buf, 1) == Approx(b1));
    CHECK(at_(p, 0) == Approx(10 - 0.5 * 1.9 - 0.5 * (0.5 + 0.9 * b0)));
    CHECK(at_(p, 1) == Approx(20 + 0.5 * 3.8 - 0.5 * (4 + 0.9 * b1)));
  }
  {
    at::Tensor p = values({10, 20}), buf;
    training::sgd_step(p, buf, g1, lr, m, /*nesterov=*/false);
    training::sgd_step(p, buf, g2, lr, m, false);
    CHECK(at_(p, 0) == Approx(10 - 0.5 * 1 - 0.5 * (0.9 * 1 + 0.5)));
  }
  {
    at::Tensor p = values({10, 20}), buf;
    training::sgd_step(p, buf, g1, lr, 0, false);
    CHECK_FALSE(buf.defined());
    CHECK(at_(p, 1) == 21);
  }
}

TEST_CASE("OuterOptimizer: deltas from theta_global, the step copied into the live tensors") {
  config::OuterSpec spec;
  spec.lr = 0.7;
  spec.momentum = 0.9;
  spec.every = 3;
  at::Tensor live = values({1, 2});
  training::OuterOptimizer outer(spec, {{"w", live}});
  CHECK_FALSE(outer.due(2, false));
  CHECK(outer.due(3, false));
  CHECK(outer.due(4, true));
  live.add_(values({-0.1, 0.2}));  // what the inner steps did
  auto d = outer.deltas();
  CHECK(at_(d[0], 0) == Approx(0.1));
  CHECK(at_(d[0], 1) == Approx(-0.2));
  outer.step(d);
  // theta_global = theta0 - lr*(d + m*d) = theta0 - 0.7*1.9*d
  CHECK(at_(live, 0) == Approx(1 - 0.7 * 1.9 * 0.1));
  CHECK(at_(live, 1) == Approx(2 + 0.7 * 1.9 * 0.2));
  CHECK_THROWS_AS(outer.step({}), std::invalid_argument);

  // A checkpoint's state, restored into a fresh optimizer, steps as the original goes on.
  auto saved = outer.state();
  REQUIRE(saved.size() == 2);
  std::vector<std::pair<std::string, at::Tensor>> copied;
  for (auto& [name, t] : saved) copied.emplace_back(name, t.clone());
  at::Tensor other = live.clone();
  training::OuterOptimizer resumed(spec, {{"w", other}});
  resumed.restore(copied);
  live.add_(values({0.3, 0.3}));
  other.add_(values({0.3, 0.3}));
  outer.step(outer.deltas());
  resumed.step(resumed.deltas());
  CHECK(at::equal(live, other));
}

TEST_CASE("checkpoints keep theta_global and the outer momentum; files without them still load") {
  const auto path = std::filesystem::temp_directory_path() /
                    ("rnd_outer_ckpt_" + std::to_string(::getpid()) + ".pt");
  training::StageCheckpoint c;
  c.identity = "job";
  c.random_state = at::zeros({4}, at::kByte);
  c.state = {{"w", values({1, 2})}};
  training::save_checkpoint(c, path.string());
  CHECK(training::load_checkpoint(path.string()).outer.empty());
  c.outer = {{"global.w", values({3, 4})}, {"momentum.w", values({0.5, -0.5})}};
  training::save_checkpoint(c, path.string());
  const auto back = training::load_checkpoint(path.string());
  REQUIRE(back.outer.size() == 2);
  CHECK(back.outer[0].first == "global.w");
  CHECK(at::equal(back.outer[0].second, c.outer[0].second));
  CHECK(back.outer[1].first == "momentum.w");
  CHECK(at::equal(back.outer[1].second, c.outer[1].second));
  std::filesystem::remove(path);
}
