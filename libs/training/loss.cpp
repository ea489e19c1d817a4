#include "libs/torch_support/module_file.h"
#include "libs/training/loss.h"

#include <stdexcept>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>

#include "libs/data/dataset.h"
#include "libs/torch_support/torch_errors.h"

namespace ravnest::training {
namespace {

std::string shape_of(const at::Tensor& t) {
  std::string out = "[";
  for (int64_t d = 0; d < t.dim(); ++d) out += (d ? ", " : "") + std::to_string(t.size(d));
  return out + "]";
}

[[noreturn]] void fail(const config::LossSpec& spec, const std::string& message) {
  throw std::runtime_error(std::string("loss ") + config::to_string(spec.name) + ": " + message);
}

}  // namespace

double micro_batch_loss_weight(int64_t samples, int64_t batch_samples, int update_frequency) {
  if (samples < 0 || batch_samples <= 0 || samples > batch_samples || update_frequency < 1) {
    throw std::invalid_argument("micro_batch_loss_weight: need 0 <= samples <= batch_samples, "
                                "batch_samples > 0 and update_frequency >= 1");
  }
  return static_cast<double>(samples) / static_cast<double>(batch_samples) /
         static_cast<double>(update_frequency);
}

int64_t class_dimension(const at::Tensor& output, const at::Tensor& labels,
                        const config::LossSpec& spec) {
  if (output.dim() < 3) return 1;
  if (spec.class_dim == 1) return 1;
  if (spec.class_dim == -1) return output.dim() - 1;
  const bool integers = !at::isFloatingType(labels.scalar_type()) && !labels.is_complex();
  if (!integers || labels.dim() != output.dim() - 1) return 1;
  const bool last = labels.sizes() == output.sizes().slice(0, output.dim() - 1);
  std::vector<int64_t> without_1 = output.sizes().vec();
  without_1.erase(without_1.begin() + 1);
  const bool first = labels.sizes().vec() == without_1;
  // Both read ([N, A, A] against [N, A]; [N, A, A, A] against [N, A, A]): a 3-D output is taken
  // for a language model's logits, a larger one for an image's classes ([N, C, H, W]).
  if (last && first) return output.dim() == 3 ? 2 : 1;
  return last ? output.dim() - 1 : 1;
}

int64_t counted_labels(const at::Tensor& labels, const config::LossSpec& spec) {
  using config::LossName;
  if (spec.name != LossName::kCrossEntropy && spec.name != LossName::kNll) return -1;
  if (at::isFloatingType(labels.scalar_type()) || labels.scalar_type() == at::kBool) return -1;
  return labels.ne(spec.ignore_index).sum().item<int64_t>();
}

Loss::Loss(const config::LossSpec& spec) : spec_(spec) {
  if (spec_.name != config::LossName::kScript) return;
  try {
    script_ = std::make_unique<torch::jit::Module>(torch_support::load_module(spec_.path.resolved));
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string(e.what()) + " (the job's TorchScript loss module)");
  }
  if (!script_->find_method("forward")) {
    throw std::runtime_error(spec_.path.resolved + ": the loss module has no forward(outputs, labels)");
  }
}

Loss::~Loss() = default;

at::Tensor Loss::primary_output(const c10::IValue& output) {
  if (output.isTensor()) return output.toTensor();
  if (output.isTuple()) {
    const auto& items = output.toTupleRef().elements();
    if (!items.empty() && items[0].isTensor()) return items[0].toTensor();
  }
  if (output.isList()) {
    const auto list = output.toListRef();
    if (!list.empty() && list[0].isTensor()) return list[0].toTensor();
  }
  // A dict (torchvision's segmentation models return {"out": ..., "aux": ...}): its first
  // value, in the order the model inserted them, as for a tuple.
  if (output.isGenericDict()) {
    const auto dict = output.toGenericDict();
    if (!dict.empty() && dict.begin()->value().isTensor()) return dict.begin()->value().toTensor();
  }
  throw std::runtime_error("the model's output is a " + output.tagKind() +
                           ", expected a tensor, or a tuple or dict whose first item is a tensor");
}

at::Tensor Loss::operator()(const c10::IValue& model_output, const at::Tensor& labels) const {
  using config::LossName;
  if (spec_.name == LossName::kScript) {
    c10::IValue result;
    try {
      result = script_->forward({model_output, labels});
    } catch (const std::exception& e) {
      throw std::runtime_error(spec_.path.resolved + ": forward(outputs, labels) failed: " +
                               torch_support::torch_message(e));
    }
    if (!result.isTensor() || result.toTensor().numel() != 1) {
      throw std::runtime_error(spec_.path.resolved + ": forward(outputs, labels) must return a scalar "
                               "tensor, got " + (result.isTensor() ? "a tensor of shape " +
                               shape_of(result.toTensor()) : "a " + result.tagKind()));
    }
    return result.toTensor().reshape({});
  }
  at::Tensor output;
  try {
    output = primary_output(model_output);
  } catch (const std::exception& e) {
    fail(spec_, e.what());
  }
  try {
    switch (spec_.name) {
      case LossName::kCrossEntropy:
      case LossName::kNll: {
        const int64_t dim = class_dimension(output, labels, spec_);
        const bool probabilities = spec_.name == LossName::kCrossEntropy &&
                                   labels.is_floating_point() && labels.sizes() == output.sizes();
        at::Tensor scores = output;
        at::Tensor target = probabilities ? labels.to(output.scalar_type()) : labels.to(at::kLong);
        if (dim != 1) {
          // Classes last: read as PyTorch's users write it for a language model,
          // F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1)).
          const int64_t classes = output.size(dim);
          scores = output.reshape({-1, classes});
          target = probabilities ? target.reshape({-1, classes}) : target.reshape({-1});
          if (!probabilities && target.size(0) != scores.size(0)) {
            fail(spec_, "the labels " + shape_of(labels) + " are not the output " +
                            shape_of(output) + " without its class dimension (the last)");
          }
        }
        if (spec_.name == LossName::kNll) {
          return at::nll_loss_nd(scores, target, {}, at::Reduction::Mean, spec_.ignore_index);
        }
        return at::cross_entropy_loss(scores, target, {}, at::Reduction::Mean, spec_.ignore_index);
      }
      case LossName::kMse:
      case LossName::kL1:
      case LossName::kBceWithLogits: {
        at::Tensor target = labels.to(output.is_floating_point() ? output.scalar_type() : at::kFloat);
        if (target.dim() + 1 == output.dim() && output.size(-1) == 1) target = target.unsqueeze(-1);
        if (target.sizes() != output.sizes()) {
          fail(spec_, "the output's shape " + shape_of(output) + " differs from the labels' " +
                          shape_of(labels));
        }
        if (spec_.name == LossName::kMse) return at::mse_loss(output, target);
        if (spec_.name == LossName::kL1) return at::l1_loss(output, target);
        return at::binary_cross_entropy_with_logits(output, target);
      }
      case LossName::kScript:
        break;
    }
  } catch (const c10::Error& e) {
    fail(spec_, torch_support::torch_message(e) + " (output " + shape_of(output) + ", labels " + shape_of(labels) + ")");
  }
  throw std::logic_error("Loss: unknown loss");
}

void Loss::check(const c10::IValue& model_output, const at::Tensor& labels) const {
  try {
    (void)(*this)(model_output, labels);
  } catch (const std::exception& e) {
    std::string shapes;
    try {
      shapes = " (output " + shape_of(primary_output(model_output)) + ", labels " +
               shape_of(labels) + ")";
    } catch (const std::exception&) {
    }
    const std::string what = e.what();
    throw std::runtime_error("[loss] " + what +
                             (what.find("(output ") == std::string::npos ? shapes : ""));
  }
}

}  // namespace ravnest::training
