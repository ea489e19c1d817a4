// A ring segment of floating-point values as the bytes that travel under a lossy codec
// (libs/wire/tensor_codec.h): fp16 and bf16 two bytes a value; int8 one byte a value, then one
// float32 scale per block of 256 values. Encoding goes through error feedback
// (libs/wire/error_feedback.h): what a segment's encoding lost is added to the same segment the
// next time it is encoded, so that over many all-reduces the errors cancel instead of adding up.
//
// Deterministic: every member decodes the same bytes to the same values, bit for bit.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "libs/wire/error_feedback.h"
#include "libs/wire/tensor_codec.h"

namespace ravnest::ring {

// Bytes of `values` values under `codec` (not kNone).
size_t segment_wire_bytes(wire::TensorCodec codec, size_t values);

// Encodes the `values` elements of `dtype` (float32 or float64) at `data`, plus what `feedback`
// carried over for `key`, into `out` (resized). Throws std::invalid_argument for int8 and a
// non-finite value.
void encode_segment(wire::ErrorFeedback& feedback, const std::string& key, at::ScalarType dtype,
                    const void* data, size_t values, std::vector<uint8_t>& out);

// The `values` float32 values that `bytes` (segment_wire_bytes long) encode.
at::Tensor decode_segment(wire::TensorCodec codec, const uint8_t* bytes, size_t values);

// The same for float32 segments without a tensor: one pass, nothing allocated, and the same
// bits as encode_segment/decode_segment (the same roundings: IEEE float arithmetic, round to
// nearest even, as LibTorch's conversions). What the all-reduce runs per segment: at link speed
// a tensor op per step cost more than the link (docs/compression.md#rings-rings).
// `out` holds segment_wire_bytes(codec, values) bytes.
void encode_floats(wire::ErrorFeedback& feedback, const std::string& key, const float* data,
                   size_t values, uint8_t* out);
// dst[i] += decoded[i] (`add`), or dst[i] = decoded[i].
void decode_floats(wire::TensorCodec codec, const uint8_t* bytes, size_t values, float* dst,
                   bool add);

}  // namespace ravnest::ring
