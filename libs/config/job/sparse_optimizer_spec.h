// SparseOptimizerSpec: the [sparse_optimizer] table of a job file, how a hybrid plan's servers
// optimize the embedding tables they hold (docs/job-file.md#sparse_optimizer); the rest of the
// model follows [optimizer]. Each is PyTorch's optimizer given sparse gradients, which touches
// only the rows a gradient names:
//
//   [sparse_optimizer]
//   name = "sparse_adam"   # sgd | adagrad | sparse_adam (torch.optim.SGD, Adagrad, SparseAdam)
//   lr = 0.01              # required
//   betas = [0.9, 0.999]   # sparse_adam
//   eps = 1e-8             # sparse_adam (1e-8), adagrad (1e-10)
//   lr_decay = 0.0         # adagrad
//   initial_accumulator_value = 0.0   # adagrad
#pragma once

#include <utility>

namespace ravnest::config {

enum class SparseOptimizerName { kSgd, kAdagrad, kSparseAdam };
const char* to_string(SparseOptimizerName name);  // "sgd", "adagrad", "sparse_adam"

struct SparseOptimizerSpec {
  SparseOptimizerName name = SparseOptimizerName::kSgd;
  double lr = 0;
  std::pair<double, double> betas{0.9, 0.999};
  double eps = 1e-8;
  double lr_decay = 0;
  double initial_accumulator_value = 0;
};

}  // namespace ravnest::config
