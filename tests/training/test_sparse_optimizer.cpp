// SparseRowOptimizer against PyTorch's own optimizers given sparse gradients
// (tests/python/sparse_optimizer_reference.py), and coalesce_rows.
#include <catch2/catch.hpp>

#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "libs/base/atomic_file.h"
#include "libs/training/sparse_optimizer.h"
#include "tests/support/test_env.h"

using namespace ravnest;

namespace {

std::vector<at::Tensor> python_run(const std::string& name, const std::string& shape) {
  test::TempDir dir;
  const auto out = (dir / "run.pt").string();
  auto run = test::run_command(test::python() + " " + test::source_dir() +
                               "/tests/python/sparse_optimizer_reference.py " + out + " " + name +
                               " " + shape);
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const std::string text = base::read_file(out);
  std::vector<char> bytes(text.begin(), text.end());
  std::vector<at::Tensor> tensors;
  const c10::IValue loaded = torch::jit::pickle_load(bytes);
  for (const auto& v : loaded.toTupleRef().elements()) {
    tensors.push_back(v.toTensor());
  }
  return tensors;
}

config::SparseOptimizerSpec spec_for(const std::string& name) {
  config::SparseOptimizerSpec spec;
  if (name == "sgd") {
    spec.name = config::SparseOptimizerName::kSgd;
    spec.lr = 0.3;
  } else if (name == "adagrad") {
    spec.name = config::SparseOptimizerName::kAdagrad;
    spec.lr = 0.2;
    spec.lr_decay = 0.05;
    spec.initial_accumulator_value = 0.3;
    spec.eps = 1e-10;
  } else {
    spec.name = config::SparseOptimizerName::kSparseAdam;
    spec.lr = 0.05;
    spec.betas = {0.8, 0.95};
    spec.eps = 1e-7;
  }
  return spec;
}

}  // namespace

TEST_CASE("row steps equal PyTorch's optimizers on sparse gradients", "[sparse]") {
  for (const std::string name : {"sgd", "adagrad", "sparse_adam"}) {
    for (const std::string shape : {"100 16", "50 3 4"}) {
      INFO(name << " on a table of " << shape);
      const auto run = python_run(name, shape);
      REQUIRE(run.size() == 1 + 3 * 6);
      const at::Tensor initial = run[0];
      at::Tensor table = initial.clone();
      training::SparseRowOptimizer optimizer(table, spec_for(name));
      for (size_t step = 0; step < 6; ++step) {
        optimizer.step(run[1 + 3 * step], run[2 + 3 * step]);
        const at::Tensor expected = run[3 + 3 * step];
        INFO("step " << step + 1);
        CHECK((table - expected).abs().max().item<double>() <= 1e-6);
      }
      CHECK(optimizer.steps() == 6);
      // The upper half was never named: bitwise as it started.
      const int64_t half = table.size(0) / 2;
      CHECK(at::equal(table.slice(0, half), initial.slice(0, half)));
      // And the lower half did move.
      CHECK((table.slice(0, 0, half) - initial.slice(0, 0, half)).abs().max().item<double>() > 1e-3);
    }
  }
}

TEST_CASE("coalesce_rows sums repeated ids in order and sorts them", "[sparse]") {
  const auto ids_a = at::tensor({5, 1, 5}, at::kLong);
  const auto rows_a = at::tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}).view({3, 2});
  const auto ids_b = at::tensor({1, 9}, at::kLong);
  const auto rows_b = at::tensor({10.0f, 20.0f, 30.0f, 40.0f}).view({2, 2});
  auto [ids, sum] = training::coalesce_rows({ids_a, ids_b}, {rows_a, rows_b});
  CHECK(at::equal(ids, at::tensor({1, 5, 9}, at::kLong)));
  CHECK(at::equal(sum, at::tensor({13.0f, 24.0f, 6.0f, 8.0f, 30.0f, 40.0f}).view({3, 2})));
  auto [none, nothing] = training::coalesce_rows({}, {});
  CHECK(none.numel() == 0);
  CHECK(nothing.numel() == 0);
}

TEST_CASE("a row step refuses ids and gradients that do not fit the table", "[sparse]") {
  at::Tensor table = at::zeros({10, 4});
  config::SparseOptimizerSpec spec;
  spec.lr = 0.1;
  training::SparseRowOptimizer optimizer(table, spec);
  const auto rows = at::ones({2, 4});
  CHECK_THROWS_WITH(optimizer.step(at::tensor({1, 10}, at::kLong), rows),
                    Catch::Contains("outside the table"));
  CHECK_THROWS_WITH(optimizer.step(at::tensor({-1, 3}, at::kLong), rows),
                    Catch::Contains("outside the table"));
  CHECK_THROWS_WITH(optimizer.step(at::tensor({3, 1}, at::kLong), rows),
                    Catch::Contains("sorted and unique"));
  CHECK_THROWS_WITH(optimizer.step(at::tensor({3, 3}, at::kLong), rows),
                    Catch::Contains("sorted and unique"));
  CHECK_THROWS_WITH(optimizer.step(at::tensor({1, 3}, at::kInt), rows),
                    Catch::Contains("int64"));
  CHECK_THROWS_WITH(optimizer.step(at::tensor({1, 3}, at::kLong), at::ones({2, 5})),
                    Catch::Contains("gradient rows of shape"));
  CHECK(optimizer.steps() == 0);
  CHECK(at::equal(table, at::zeros({10, 4})));
  optimizer.step(at::tensor({1, 3}, at::kLong), rows);
  CHECK(table[1].sum().item<float>() == Approx(-0.4f));
  CHECK(table[0].sum().item<float>() == 0.0f);
}
