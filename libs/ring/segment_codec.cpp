#include "libs/ring/segment_codec.h"

#include <ATen/ATen.h>

#include <cstring>
#include <stdexcept>

namespace ravnest::ring {

namespace {

size_t int8_blocks(size_t values) {
  const auto block = static_cast<size_t>(wire::kInt8BlockValues);
  return (values + block - 1) / block;
}

}  // namespace

size_t segment_wire_bytes(wire::TensorCodec codec, size_t values) {
  switch (codec) {
    case wire::TensorCodec::kFp16:
    case wire::TensorCodec::kBf16:
      return values * 2;
    case wire::TensorCodec::kInt8:
      return values + int8_blocks(values) * sizeof(float);
    case wire::TensorCodec::kNone:
      break;
  }
  throw std::invalid_argument("a ring segment is encoded only under a lossy codec");
}

void encode_segment(wire::ErrorFeedback& feedback, const std::string& key, at::ScalarType dtype,
                    const void* data, size_t values, std::vector<uint8_t>& out) {
  const at::Tensor view = at::from_blob(const_cast<void*>(data), {static_cast<int64_t>(values)},
                                        at::TensorOptions().dtype(dtype));
  const wire::CompressedTensor coded = feedback.encode(key, view);
  const size_t value_bytes = coded.values.numel() * coded.values.element_size();
  const size_t scale_bytes = coded.scales.defined() ? coded.scales.numel() * sizeof(float) : 0;
  if (value_bytes + scale_bytes != segment_wire_bytes(coded.codec, values)) {
    throw std::logic_error("ring segment: the codec wrote an unexpected size");
  }
  out.resize(value_bytes + scale_bytes);
  std::memcpy(out.data(), coded.values.data_ptr(), value_bytes);
  if (scale_bytes) std::memcpy(out.data() + value_bytes, coded.scales.data_ptr(), scale_bytes);
}

at::Tensor decode_segment(wire::TensorCodec codec, const uint8_t* bytes, size_t values) {
  wire::CompressedTensor coded;
  coded.codec = codec;
  coded.dtype = at::kFloat;
  coded.sizes = {static_cast<int64_t>(values)};
  auto* base = const_cast<uint8_t*>(bytes);
  const auto n = static_cast<int64_t>(values);
  switch (codec) {
    case wire::TensorCodec::kFp16:
      coded.values = at::from_blob(base, {n}, at::TensorOptions().dtype(at::kHalf));
      break;
    case wire::TensorCodec::kBf16:
      coded.values = at::from_blob(base, {n}, at::TensorOptions().dtype(at::kBFloat16));
      break;
    case wire::TensorCodec::kInt8: {
      coded.values = at::from_blob(base, {n}, at::TensorOptions().dtype(at::kChar));
      // The scales follow the values: aligned for float only by chance, so copied out.
      at::Tensor scales = at::empty({static_cast<int64_t>(int8_blocks(values))},
                                    at::TensorOptions().dtype(at::kFloat));
      std::memcpy(scales.data_ptr(), bytes + values, scales.numel() * sizeof(float));
      coded.scales = scales;
      break;
    }
    case wire::TensorCodec::kNone:
      throw std::invalid_argument("a ring segment is decoded only under a lossy codec");
  }
  return wire::decompress_tensor(coded);
}

}  // namespace ravnest::ring
