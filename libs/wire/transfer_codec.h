// The messages between nodes (transfer_message.h) <-> their schema types: the one place where
// their fields are copied (node_report.h's status and events have theirs, node_report_codec.h,
// which this includes). Values go through value_codec.h.
//
// Decoding throws WireError for an enum value this build does not know.
#pragma once

#include <cstddef>
#include <vector>

#include <ATen/core/Tensor.h>

#include "libs/wire/node_report_codec.h"
#include "libs/wire/transfer_message.h"
#include "libs/wire/value_codec.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::wire {

void encode_batch(const MicroBatchTag& batch, schema::MicroBatch::Builder out);
MicroBatchTag decode_batch(schema::MicroBatch::Reader batch);

// Fills `out` with `message` (to_node stays with the sender), moving its values out, its
// floating-point tensors compressed with `message.codec`; returns what the caller keeps until the
// message and its streamed tensors are sent (see encode_values).
EncodedTensors encode_transfer(TransferMessage&& message, schema::Transfer::Builder out,
                               size_t inline_limit);
// The message (to_node 0); its streamed tensors are appended to `pending`, to be filled from the
// transfer's ByteSink (see decode_values, which applies `limits`).
// Compressed streamed tensors are decompressed by the functions appended to `after_stream`, to
// run once `pending` is filled (see decode_values).
TransferMessage decode_transfer(schema::Transfer::Reader transfer,
                                std::vector<at::Tensor>& pending,
                                const DecodeLimits& limits = {},
                                std::vector<std::function<void()>>* after_stream = nullptr);

}  // namespace ravnest::wire
