// The zoo of export_pt2_zoo.py (RAVNEST_BINARY_DIR/pt2_zoo) and eager PyTorch's results for it,
// and the comparison every runtime of it passes: forward and backward in train mode on the
// reference's inputs (dropout seeded as eager's), the buffers after it, then forward in eval mode;
// each result equal, bit for bit, to what one eager process computed on one thread. Catch2
// assertions; the tests of libs/exported and libs/stage use it.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include "libs/exported/exported_module.h"

namespace ravnest::test {

// RAVNEST_BINARY_DIR/pt2_zoo/<file>.
std::string zoo(const std::string& file);
// The models with a reference (<name>.pt2 and <name>.ref.pt), as export_pt2_zoo.py's MODELS.
const std::vector<std::string>& zoo_models();

struct ZooReference {
  std::vector<c10::IValue> inputs;
  std::vector<at::Tensor> grad_outputs;  // empty tensors for outputs without a gradient
  int64_t seed = 0;
  std::vector<at::Tensor> outputs;
  std::map<std::string, at::Tensor> grads;
  std::map<std::string, at::Tensor> buffers;
  std::vector<at::Tensor> eval_outputs;
};
ZooReference zoo_reference(const std::string& name);

// Equal to eager, bit for bit (the largest difference reported when not).
void check_equal(const at::Tensor& ours, const at::Tensor& eager, const std::string& what);

// What a model under test offers the comparison.
struct ModelUnderTest {
  std::function<std::vector<c10::IValue>(const std::vector<c10::IValue>&)> forward;
  std::function<std::vector<std::pair<std::string, at::Tensor>>()> named_parameters;
  std::function<std::vector<std::pair<std::string, at::Tensor>>()> named_buffers;
  std::function<void(bool)> train;
  std::function<bool()> is_training;
};

// An ExportedModule as the comparison sees it (the module outlives the result).
ModelUnderTest under_test(exported::ExportedModule& module);

// The zoo model `name`'s reference run on `model` (fresh from its archive, in train mode).
void check_against_eager(const std::string& name, const ModelUnderTest& model);

}  // namespace ravnest::test
