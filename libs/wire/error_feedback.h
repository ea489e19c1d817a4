// ErrorFeedback: for a lossy codec applied to the same tensors step after step (a ring's
// segments, issue 11): what the codec lost of each tensor is added to that tensor before its next
// encoding. The sum of what was sent over k steps then equals the sum of the true values minus
// the last residual alone, so the error of an average over steps shrinks as 1/k instead of
// accumulating a bias. Keyed by the caller's name for each tensor; not thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>

#include "libs/wire/tensor_codec.h"

namespace ravnest::wire {

class ErrorFeedback {
 public:
  explicit ErrorFeedback(TensorCodec codec) : codec_(codec) {}
  TensorCodec codec() const { return codec_; }

  // Encodes `tensor` plus what was lost of `key` last time, and keeps what is lost now.
  CompressedTensor encode(const std::string& key, const at::Tensor& tensor);
  // What is carried over for `key` (undefined before its first encode).
  at::Tensor residual(const std::string& key) const;
  // The residual of `key` as `values` contiguous float32 values to update in place (zeros when
  // there was none, or one of another size): for fused encoders that compute what encode()
  // computes in one pass (ring::encode_segment).
  float* residual_values(const std::string& key, size_t values);
  void clear() { residual_.clear(); }

 private:
  TensorCodec codec_;
  std::map<std::string, at::Tensor> residual_;  // float32, the tensor's shape
};

}  // namespace ravnest::wire
