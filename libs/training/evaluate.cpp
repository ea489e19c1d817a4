#include "libs/training/evaluate.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/accumulate.h>

#include "libs/torch_support/eager_numerics.h"

namespace ravnest::training {

double count_correct(const c10::IValue& model_output, const at::Tensor& labels) {
  at::Tensor output;
  try {
    output = Loss::primary_output(model_output);
  } catch (const std::exception&) {
    return -1;
  }
  // Labels: the output's shape without its class dimension 1.
  if (output.dim() < 2 || labels.dim() != output.dim() - 1 || output.size(0) != labels.size(0) ||
      labels.sizes().slice(1) != output.sizes().slice(2)) {
    return -1;
  }
  if (at::isFloatingType(labels.scalar_type()) || labels.scalar_type() == at::kBool) return -1;
  const int64_t right = output.argmax(1).eq(labels.to(at::kLong)).sum().item<int64_t>();
  const int64_t positions = c10::multiply_integers(labels.sizes().slice(1));  // 1 for [N]
  return static_cast<double>(right) / static_cast<double>(std::max<int64_t>(positions, 1));
}

Evaluation evaluate(torch::jit::Module& module, const data::Dataset& dataset, const Loss& loss,
                    int64_t batch_size) {
  const torch_support::EagerNumerics eager;  // the numerics of eager PyTorch and of the daemons
  if (batch_size < 1) throw std::invalid_argument("evaluate: batch_size must be >= 1");
  const bool was_training = module.is_training();
  module.eval();
  at::NoGradGuard no_grad;
  Evaluation result;
  double loss_sum = 0;
  double correct = 0;
  bool classes = true;
  try {
    for (int64_t start = 0; start < dataset.size(); start += batch_size) {
      const int64_t count = std::min(batch_size, dataset.size() - start);
      data::Batch batch = dataset.get_range(start, count);
      std::vector<c10::IValue> inputs(batch.inputs.begin(), batch.inputs.end());
      const c10::IValue output = module.forward(inputs);
      loss_sum += loss(output, batch.labels).item<double>() * static_cast<double>(count);
      const double right = count_correct(output, batch.labels);
      if (right < 0) classes = false;
      else correct += right;
      result.samples += count;
    }
  } catch (...) {
    module.train(was_training);
    throw;
  }
  module.train(was_training);
  result.loss = result.samples ? loss_sum / static_cast<double>(result.samples) : std::nan("");
  result.accuracy = classes && result.samples ? correct / static_cast<double>(result.samples)
                                              : std::nan("");
  return result;
}

}  // namespace ravnest::training
