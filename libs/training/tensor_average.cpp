#include "libs/training/tensor_average.h"

#include <ATen/ATen.h>

#include <stdexcept>

namespace ravnest::training {

at::Tensor average_of(const std::vector<at::Tensor>& copies) {
  if (copies.empty()) throw std::invalid_argument("average_of: no copies");
  at::Tensor sum = copies[0].clone();
  for (size_t c = 1; c < copies.size(); ++c) sum.add_(copies[c]);
  const auto n = static_cast<int64_t>(copies.size());
  if (at::isFloatingType(sum.scalar_type())) return sum.div_(n);
  return sum.div(n, "floor").to(sum.scalar_type());
}

}  // namespace ravnest::training
