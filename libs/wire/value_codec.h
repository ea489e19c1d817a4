// TorchScript values <-> schema::Value (schemas/ravnest.capnp).
//
// Tensors travel as row-major contiguous CPU bytes. Small ones sit inline in the message (no copy
// on the sending side: the message references the tensor's memory), large ones are announced with
// their byte count and follow through the transfer's ByteSink (tensor_stream.h), in the order they
// appear in the message.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <capnp/orphan.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "libs/wire/tensor_codec.h"
#include "libs/wire/wire_error.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::wire {

// Largest Data field Cap'n Proto allows (2^29 - 1 bytes); larger tensors are always streamed.
constexpr uint64_t kMaxDataBytes = (uint64_t{1} << 29) - 1;
// Tensors up to this many bytes go inline unless the caller says otherwise.
constexpr size_t kDefaultInlineLimit = 256 * 1024;

// Receiver-side limits (a message asking for more is refused before anything is allocated),
// and how streamed tensors are allocated.
struct DecodeLimits {
  uint64_t max_tensor_bytes = uint64_t{8} << 30;  // one tensor
  uint64_t max_total_bytes = uint64_t{8} << 30;   // all tensors of one message (inline + streamed)
  uint32_t max_dims = 64;
  // Streamed tensors of at least this many bytes get madvise(MADV_HUGEPAGE) before they are
  // filled (0: never). Such allocations are fresh mmaps (glibc maps every block above 32 MiB),
  // and faulting in 4 KiB pages dominated the receive time: 64 MiB over loopback went from
  // ~3 to ~7 GB/s with it (bench/wire_throughput). No effect where THP is "never".
  uint64_t huge_pages_from = uint64_t{32} << 20;
};

// What an encoded message needs from the sender until it has been sent (see encode_values).
struct EncodedTensors {
  std::vector<at::Tensor> streamed;    // to send, in this order, with stream_tensors()
  std::vector<at::Tensor> keep_alive;  // memory the message references (inline tensors)
  uint64_t streamed_bytes = 0;
  bool saturated = false;  // fp16: a finite value beyond +-65504 was clamped (tensor_codec.h)
};

// True for the dtypes the wire carries: uint8, int8, int16, int32, int64, float16, bfloat16,
// float32, float64, complex64, complex128, bool.
bool is_wire_dtype(int code);

// Encodes one value. Tensors are detached, moved to the CPU and made contiguous (a copy only when
// they are not already); those of at most `inline_limit` bytes go inline by reference
// (Orphanage::referenceExternalData; sizes not a multiple of 8 are copied, since the message would
// otherwise expose the bytes up to the next word), the others are marked `streamed` and appended
// to `streamed`. Every tensor whose memory the message references is appended to `keep_alive`:
// the caller holds both vectors until the message has been sent (the call returned), and the
// streamed ones until stream_tensors() finished.
// Supported: Tensor, None, Uninitialized, int, float, bool, str, int[], float[], bool[].
// Anything else (tuples, dicts, tensor lists, undefined tensors, sparse/quantized tensors, complex
// scalars...) throws std::invalid_argument naming the type.
// With `codec` other than none, floating-point tensors travel compressed (tensor_codec.h; the
// schema's Tensor.codec and scales); `saturated`, when given, is set if fp16 clamped a value.
void encode_value(const c10::IValue& value, schema::Value::Builder out, capnp::Orphanage orphanage,
                  size_t inline_limit, std::vector<at::Tensor>& streamed,
                  std::vector<at::Tensor>& keep_alive, TensorCodec codec = TensorCodec::kNone,
                  bool* saturated = nullptr);

// Decodes one value. Inline tensors are copied once into fresh memory; streamed ones are allocated
// (at::empty) and appended to `pending`, to be filled by a TensorSink in that order. Everything is
// checked (known dtype, dims <= max_dims, sizes >= 0, byte count == numel * itemsize, bool bytes
// 0/1, requiresGrad only for floating/complex dtypes, the limits counting the bytes of the tensors
// already in `pending`): a bad message throws WireError (or a kj::Exception, which derives from
// std::exception, for a structurally broken message), and never allocates beyond the limits.
// A compressed tensor is decompressed: at once when inline; a streamed one is filled in place by
// a function appended to `after_stream`, which the caller runs once `pending` is filled (without
// `after_stream` a compressed streamed tensor is a WireError). Both its compressed and its
// decompressed bytes count against the limits.
c10::IValue decode_value(schema::Value::Reader value, std::vector<at::Tensor>& pending,
                         const DecodeLimits& limits = {},
                         std::vector<std::function<void()>>* after_stream = nullptr);

// A value with the output index of the node that produced it (schema::IndexedValue).
struct IndexedIValue {
  uint32_t index = 0;
  c10::IValue value;
};

// Fills transfer.values (initValues) with `values`; returns the tensors to stream and keep alive.
EncodedTensors encode_values(schema::Transfer::Builder transfer,
                             const std::vector<IndexedIValue>& values, size_t inline_limit,
                             TensorCodec codec = TensorCodec::kNone);

// Decodes transfer.values. `pending` receives the tensors to fill from the transfer's ByteSink, in
// order; the limits apply to the whole transfer.
std::vector<IndexedIValue> decode_values(schema::Transfer::Reader transfer,
                                         std::vector<at::Tensor>& pending,
                                         const DecodeLimits& limits = {},
                                         std::vector<std::function<void()>>* after_stream = nullptr);

// Byte count of a decoded/streamed tensor (numel * itemsize).
uint64_t tensor_bytes(const at::Tensor& tensor);

// The tensor as the wire sends its bytes: detached, on the CPU, contiguous, without lazy conj/neg
// bits, starting on an 8-byte boundary (referenceExternalData needs word alignment). No copy when
// it already is. Throws std::invalid_argument for undefined, non-strided (sparse, mkldnn) and
// non-wire dtypes (see is_wire_dtype).
at::Tensor wire_form(const at::Tensor& tensor);

// madvise(MADV_HUGEPAGE) on the whole pages inside [data, data + bytes). Advisory: errors ignored.
void advise_huge_pages(void* data, uint64_t bytes);

}  // namespace ravnest::wire
