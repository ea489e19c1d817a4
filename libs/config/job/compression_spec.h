// CompressionSpec: the [compression] table of a job file, how each kind of tensor travels
// (issue 11; libs/wire/tensor_codec.h implements the codecs):
//
//   [compression]
//   activations = "fp16"   # forward: a stage's outputs to the next stage
//   gradients = "fp16"     # backward: the gradients of those outputs
//   rings = "int8"         # the all-reduce's segments between clusters, with error feedback
//                          # (libs/ring/ring_allreduce.h, RingCompression)
//
// Each is "none" (the default), "fp16", "bf16" or "int8". Only floating-point tensors are
// compressed; labels and other integer values always travel as they are (docs/compression.md).
#pragma once

#include <string>

namespace ravnest::config {

enum class WireCodec { kNone, kFp16, kBf16, kInt8 };

struct CompressionSpec {
  WireCodec activations = WireCodec::kNone;
  WireCodec gradients = WireCodec::kNone;
  WireCodec rings = WireCodec::kNone;

  bool any() const {
    return activations != WireCodec::kNone || gradients != WireCodec::kNone ||
           rings != WireCodec::kNone;
  }
};

// "none", "fp16", "bf16", "int8"; false (and `out` unchanged) for any other name.
bool parse_wire_codec(const std::string& name, WireCodec& out);
const char* to_string(WireCodec codec);

}  // namespace ravnest::config
