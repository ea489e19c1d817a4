// predictions.h: joining the outputs of batches, and the file torch.load reads (the Python side
// is tests/python/check_predictions.py, through `ravnest predict` in test_pipeline_training).
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "libs/training/predictions.h"

using namespace ravnest;
using training::join_predictions;

namespace {

std::string error_of(const std::vector<c10::IValue>& outputs) {
  try {
    join_predictions(outputs);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("join_predictions: tensors, tuples, lists and dicts, in order", "[training][predict]") {
  const at::Tensor a = at::arange(6, at::kFloat).view({3, 2});
  const at::Tensor b = at::arange(6, 10, at::kFloat).view({2, 2});
  auto joined = join_predictions({a, b});
  CHECK(joined.toTensor().equal(at::arange(10, at::kFloat).view({5, 2})));

  auto pairs = join_predictions({c10::ivalue::Tuple::create({a, a.sum(1)}),
                                 c10::ivalue::Tuple::create({b, b.sum(1)})});
  REQUIRE(pairs.isTuple());
  CHECK(pairs.toTupleRef().elements()[0].toTensor().size(0) == 5);
  CHECK(pairs.toTupleRef().elements()[1].toTensor().equal(at::cat({a.sum(1), b.sum(1)})));

  // A dict, key by key, in the model's order (torchvision's segmentation models).
  c10::impl::GenericDict first(c10::StringType::get(), c10::TensorType::get());
  first.insert("out", a);
  first.insert("aux", a.sum(1));
  c10::impl::GenericDict second(c10::StringType::get(), c10::TensorType::get());
  second.insert("out", b);
  second.insert("aux", b.sum(1));
  auto dict = join_predictions({first, second});
  REQUIRE(dict.isGenericDict());
  CHECK(dict.toGenericDict().begin()->key().toStringRef() == "out");
  CHECK(dict.toGenericDict().at("out").toTensor().equal(at::cat({a, b})));
  CHECK(dict.toGenericDict().at("aux").toTensor().equal(at::cat({a.sum(1), b.sum(1)})));
  c10::impl::GenericDict other(c10::StringType::get(), c10::TensorType::get());
  other.insert("logits", b);
  other.insert("aux", b.sum(1));
  CHECK(error_of({first, other}) == "the model's outputs change keys between batches");

  // A scalar per batch (a model that returns a loss) is stacked.
  CHECK(join_predictions({a.sum(), b.sum()}).toTensor().sizes() == at::IntArrayRef({2}));

  // The file round-trips through pickle (what torch.load reads).
  const std::string file = training::predictions_file(pairs);
  auto back = torch::jit::pickle_load(std::vector<char>(file.begin(), file.end()));
  CHECK(back.toTupleRef().elements()[0].toTensor().equal(at::cat({a, b})));

  CHECK(error_of({}) == "no prediction to join");
  CHECK(error_of({a, c10::ivalue::Tuple::create({a})}) ==
        "the model's outputs change type between batches");
  CHECK(error_of({c10::ivalue::Tuple::create({a, a}), c10::ivalue::Tuple::create({b})}) ==
        "the model returns 2 values, then 1");
  CHECK(error_of({c10::IValue(3)}).find("which predictions.pt cannot join") != std::string::npos);
}
