#include "libs/wire/error_feedback.h"

#include <ATen/ATen.h>

namespace ravnest::wire {

CompressedTensor ErrorFeedback::encode(const std::string& key, const at::Tensor& tensor) {
  at::Tensor wanted = tensor.detach().to(at::kFloat);
  auto it = residual_.find(key);
  if (it != residual_.end() && it->second.sizes() == wanted.sizes()) wanted = wanted + it->second;
  CompressedTensor coded = compress_tensor(wanted, codec_);
  coded.dtype = tensor.scalar_type();
  residual_[key] = wanted - decompress_tensor(coded).to(at::kFloat);
  return coded;
}

float* ErrorFeedback::residual_values(const std::string& key, size_t values) {
  at::Tensor& r = residual_[key];
  const auto n = static_cast<int64_t>(values);
  if (!r.defined() || r.scalar_type() != at::kFloat || !r.is_contiguous() || r.numel() != n) {
    r = at::zeros({n}, at::TensorOptions().dtype(at::kFloat));
  }
  return r.data_ptr<float>();
}

at::Tensor ErrorFeedback::residual(const std::string& key) const {
  auto it = residual_.find(key);
  return it == residual_.end() ? at::Tensor() : it->second;
}

}  // namespace ravnest::wire
