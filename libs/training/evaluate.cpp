#include "libs/training/evaluate.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/accumulate.h>

#include "libs/torch_support/eager_numerics.h"

namespace ravnest::training {

Correct count_correct(const c10::IValue& model_output, const at::Tensor& labels,
                      const config::LossSpec& spec) {
  at::Tensor output;
  try {
    output = Loss::primary_output(model_output);
  } catch (const std::exception&) {
    return {};
  }
  if (output.dim() < 2 || at::isFloatingType(labels.scalar_type()) ||
      labels.scalar_type() == at::kBool || labels.is_complex()) {
    return {};
  }
  // Labels: the output's shape without its class dimension.
  const int64_t dim = class_dimension(output, labels, spec);
  std::vector<int64_t> expected = output.sizes().vec();
  expected.erase(expected.begin() + dim);
  if (labels.sizes().vec() != expected) return {};
  const at::Tensor target = labels.to(at::kLong);
  const at::Tensor counts = target.ne(spec.ignore_index);
  Correct result;
  result.right = output.argmax(dim).eq(target).logical_and(counts).sum().item<int64_t>();
  result.asked = counts.sum().item<int64_t>();
  return result;
}

Evaluation evaluate(stage::Stage& module, const data::Dataset& dataset, const Loss& loss,
                    int64_t batch_size) {
  const torch_support::EagerNumerics eager;  // the numerics of eager PyTorch and of the daemons
  if (batch_size < 1) throw std::invalid_argument("evaluate: batch_size must be >= 1");
  const bool was_training = module.is_training();
  module.eval();
  at::NoGradGuard no_grad;
  Evaluation result;
  double loss_sum = 0;
  double units = 0;  // samples, or the labels that count (counted_labels)
  int64_t right = 0;
  int64_t asked = 0;
  bool classes = true;
  try {
    for (int64_t start = 0; start < dataset.size(); start += batch_size) {
      const int64_t count = std::min(batch_size, dataset.size() - start);
      data::Batch batch = dataset.get_range(start, count);
      std::vector<c10::IValue> inputs(batch.inputs.begin(), batch.inputs.end());
      const c10::IValue output = module.forward(inputs);
      const int64_t counted = counted_labels(batch.labels, loss.spec());
      const double weight = static_cast<double>(counted >= 0 ? counted : count);
      if (weight > 0) loss_sum += loss(output, batch.labels).item<double>() * weight;
      units += weight;
      const Correct correct = count_correct(output, batch.labels, loss.spec());
      if (correct.asked < 0) classes = false;
      right += correct.right;
      asked += std::max<int64_t>(correct.asked, 0);
      result.samples += count;
    }
  } catch (...) {
    module.train(was_training);
    throw;
  }
  module.train(was_training);
  result.loss = units > 0 ? loss_sum / units : std::nan("");
  result.accuracy = classes && asked > 0
                        ? static_cast<double>(right) / static_cast<double>(asked)
                        : std::nan("");
  return result;
}

}  // namespace ravnest::training
