// OuterSpec: the [outer] table of a job file, DiLoCo's outer optimizer (Douillard et al. 2023,
// arXiv 2311.08105; docs/data-parallel.md#diloco):
//
//   [outer]
//   name = "nesterov"   # or "sgd": the same momentum without the Nesterov term
//   lr = 0.7            # > 0, required
//   momentum = 0.9      # 0 <= momentum < 1
//   every = 50          # H: optimizer updates each cluster makes alone between outer steps
//                       # (aliases: H, inner_steps as OpenDiLoCo names it)
//
// Every `every` updates each stage averages theta_global - theta_local over its cross-cluster
// rings and steps theta_global with torch.optim.SGD(lr, momentum, nesterov) on that average.
#pragma once

#include <cstdint>

namespace ravnest::config {

enum class OuterName { kNesterov, kSgd };

struct OuterSpec {
  OuterName name = OuterName::kNesterov;
  double lr = 0;
  double momentum = 0.9;
  int64_t every = 1;
  bool nesterov() const { return name == OuterName::kNesterov; }
};

const char* to_string(OuterName name);

}  // namespace ravnest::config
