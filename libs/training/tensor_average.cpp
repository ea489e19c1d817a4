#include "libs/training/tensor_average.h"

#include <ATen/ATen.h>

#include <algorithm>
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

void average_across(const std::vector<std::vector<at::Tensor>>& per_copy) {
  if (per_copy.empty()) return;
  for (size_t t = 0; t < per_copy[0].size(); ++t) {
    std::vector<at::Tensor> copies;
    for (const auto& copy : per_copy) copies.push_back(copy[t]);
    const at::Tensor average = average_of(copies);
    for (const auto& copy : per_copy) copy[t].copy_(average);
  }
}

// Chunk by chunk, in ring order (tensor_average.h).
void ring_average(const std::vector<std::vector<at::Tensor>>& per_copy) {
  const size_t n = per_copy.size();
  if (n < 3) return average_across(per_copy);  // a + b is b + a: the order cannot matter
  std::vector<at::ScalarType> dtypes;
  for (const auto& t : per_copy[0]) {
    if (std::find(dtypes.begin(), dtypes.end(), t.scalar_type()) == dtypes.end()) {
      dtypes.push_back(t.scalar_type());
    }
  }
  for (const at::ScalarType dtype : dtypes) {
    std::vector<size_t> members;  // indices of this group's tensors
    for (size_t k = 0; k < per_copy[0].size(); ++k) {
      if (per_copy[0][k].scalar_type() == dtype) members.push_back(k);
    }
    if (dtype != at::kFloat && dtype != at::kDouble) {
      // Integer sums are exact in any order; other floating types are not modelled here.
      std::vector<std::vector<at::Tensor>> group(n);
      for (size_t c = 0; c < n; ++c) {
        for (size_t k : members) group[c].push_back(per_copy[c][k]);
      }
      average_across(group);
      continue;
    }
    std::vector<at::Tensor> flat(n);
    for (size_t c = 0; c < n; ++c) {
      std::vector<at::Tensor> parts;
      for (size_t k : members) parts.push_back(per_copy[c][k].reshape(-1));
      flat[c] = at::cat(parts).contiguous();
    }
    const int64_t count = flat[0].numel();
    at::Tensor result = at::empty_like(flat[0]);
    const int64_t base = count / static_cast<int64_t>(n), rem = count % static_cast<int64_t>(n);
    for (size_t c = 0; c < n; ++c) {
      const int64_t i = static_cast<int64_t>(c);
      const int64_t begin = i * base + std::min(i, rem), length = base + (i < rem ? 1 : 0);
      if (length == 0) continue;
      at::Tensor sum = flat[c].narrow(0, begin, length).clone();
      for (size_t j = 1; j < n; ++j) sum.add_(flat[(c + j) % n].narrow(0, begin, length));
      if (dtype == at::kFloat) {
        float* x = sum.data_ptr<float>();
        const float d = static_cast<float>(n);
        for (int64_t e = 0; e < length; ++e) x[e] /= d;
      } else {
        double* x = sum.data_ptr<double>();
        const double d = static_cast<double>(n);
        for (int64_t e = 0; e < length; ++e) x[e] /= d;
      }
      result.narrow(0, begin, length).copy_(sum);
    }
    int64_t offset = 0;
    for (size_t k : members) {
      const int64_t numel = per_copy[0][k].numel();
      const at::Tensor part = result.narrow(0, offset, numel).view(per_copy[0][k].sizes());
      for (size_t c = 0; c < n; ++c) per_copy[c][k].copy_(part);
      offset += numel;
    }
  }
}

}  // namespace ravnest::training
