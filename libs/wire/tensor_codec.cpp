#include "libs/wire/tensor_codec.h"

#include <ATen/ATen.h>

#include <stdexcept>

namespace ravnest::wire {

namespace {

constexpr double kHalfMax = 65504.0;

}  // namespace

uint64_t CompressedTensor::wire_bytes() const {
  uint64_t bytes = values.defined() ? values.numel() * values.element_size() : 0;
  if (scales.defined()) bytes += scales.numel() * scales.element_size();
  return bytes;
}

CompressedTensor compress_tensor(const at::Tensor& tensor, TensorCodec codec) {
  CompressedTensor coded;
  coded.codec = codec;
  coded.dtype = tensor.scalar_type();
  coded.sizes = tensor.sizes().vec();
  if (codec == TensorCodec::kNone) {
    coded.values = tensor;
    return coded;
  }
  if (!at::isFloatingType(tensor.scalar_type())) {
    throw std::invalid_argument(std::string(config::to_string(codec)) + " compresses floating-point tensors, not " +
                                std::string(c10::toString(tensor.scalar_type())));
  }
  const at::Tensor flat = tensor.detach().reshape({-1}).to(at::kFloat).contiguous();
  switch (codec) {
    case TensorCodec::kFp16: {
      // Saturate finite values instead of turning them into inf; NaN and inf stay what they are.
      const at::Tensor finite = at::isfinite(flat);
      const at::Tensor over = at::logical_and(finite, flat.abs() > kHalfMax);
      coded.saturated = over.any().item<bool>();
      at::Tensor clamped = coded.saturated ? at::where(finite, flat.clamp(-kHalfMax, kHalfMax), flat)
                                           : flat;
      coded.values = clamped.to(at::kHalf);
      break;
    }
    case TensorCodec::kBf16:
      coded.values = flat.to(at::kBFloat16);
      break;
    case TensorCodec::kInt8: {
      const int64_t n = flat.numel();
      const int64_t blocks = (n + kInt8BlockValues - 1) / kInt8BlockValues;
      at::Tensor padded = flat;
      if (blocks * kInt8BlockValues != n) {
        padded = at::zeros({blocks * kInt8BlockValues}, flat.options());
        padded.narrow(0, 0, n).copy_(flat);
      }
      const at::Tensor rows = padded.view({blocks, kInt8BlockValues});
      // Non-finite values have no int8 code: they are refused rather than silently made finite.
      if (!at::isfinite(rows).all().item<bool>()) {
        throw std::invalid_argument("int8 cannot carry inf or NaN");
      }
      at::Tensor scales = std::get<0>(rows.abs().max(1)) / 127.0;
      const at::Tensor safe = at::where(scales > 0, scales, at::ones_like(scales));
      at::Tensor q = (rows / safe.unsqueeze(1)).round().clamp(-127, 127).to(at::kChar);
      coded.values = q.reshape({-1}).narrow(0, 0, n).contiguous();
      coded.scales = scales.contiguous();
      break;
    }
    case TensorCodec::kNone:
      break;
  }
  return coded;
}

at::Tensor decompress_tensor(const CompressedTensor& coded) {
  if (coded.codec == TensorCodec::kNone) return coded.values;
  const auto options = at::TensorOptions().dtype(at::kFloat);
  at::Tensor flat;
  if (coded.codec == TensorCodec::kInt8) {
    const int64_t n = coded.values.numel();
    const int64_t blocks = coded.scales.numel();
    if (blocks != (n + kInt8BlockValues - 1) / kInt8BlockValues) {
      throw std::invalid_argument("int8: " + std::to_string(blocks) + " scales for " +
                                  std::to_string(n) + " values");
    }
    at::Tensor padded = at::zeros({blocks * kInt8BlockValues}, options);
    padded.narrow(0, 0, n).copy_(coded.values.to(at::kFloat));
    flat = (padded.view({blocks, kInt8BlockValues}) * coded.scales.to(at::kFloat).unsqueeze(1))
               .reshape({-1})
               .narrow(0, 0, n);
  } else {
    flat = coded.values.to(at::kFloat);
  }
  return flat.reshape(coded.sizes).to(coded.dtype).contiguous();
}

}  // namespace ravnest::wire
