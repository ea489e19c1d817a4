// TensorCodec: how a floating-point tensor may travel smaller (issue 11, `[compression]` of a job):
//   none   as it is
//   fp16   IEEE half; values beyond +-65504 saturate to it (Ravnest's `compression=True` sends
//          float16 the same way), NaN stays NaN; relative error <= 2^-11
//   bf16   bfloat16: float32's range, relative error <= 2^-8
//   int8   a float32 scale per block of 256 values (max |x| / 127) and one int8 per value:
//          absolute error <= scale / 2 per value, ~3.9x fewer bytes than float32
// Only floating-point tensors are compressed; others are refused (int8 of an integer tensor is a
// job-file error). The decoded tensor has the original dtype and shape. No capnp, no I/O.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "libs/config/job/compression_spec.h"

namespace ravnest::wire {

// The job file names them (config::parse_wire_codec, config::to_string).
using TensorCodec = config::WireCodec;

constexpr int64_t kInt8BlockValues = 256;

// A tensor as it travels under a codec.
struct CompressedTensor {
  TensorCodec codec = TensorCodec::kNone;
  at::ScalarType dtype = at::kFloat;  // of the original
  std::vector<int64_t> sizes;         // of the original
  at::Tensor values;  // none: the tensor; fp16/bf16: Half/BFloat16; int8: Char, one per value
  at::Tensor scales;  // int8 only: Float, one per block of kInt8BlockValues values
  bool saturated = false;  // fp16: some finite value was beyond +-65504 and was clamped

  // Bytes on the wire: values and scales.
  uint64_t wire_bytes() const;
};

// Throws std::invalid_argument for a codec other than none on a tensor that is not floating point.
CompressedTensor compress_tensor(const at::Tensor& tensor, TensorCodec codec);
at::Tensor decompress_tensor(const CompressedTensor& coded);

}  // namespace ravnest::wire
