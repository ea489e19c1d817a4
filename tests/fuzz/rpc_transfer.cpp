// Fuzz target: Node.send, what one daemon sends another per micro-batch, as TransferPlane::send
// takes it: the params decoded by wire::decode_transfer (header, values, tensors, with receive
// limits), then the streamed tensors filled by a wire::TensorSink from the bytes that follow.
//
// Input: the params as Cap'n Proto's standard serialization, read with bounded ReaderOptions,
// then the bytes the sender streams into the sink (written in chunks of up to 4 KiB, then done()).
// The limits are 64 MiB a message here instead of the daemon's default (wire::DecodeLimits), so
// that a message at the limit stays under the fuzzer's RSS cap; the check is that no message
// makes the decoder allocate past them.
//
// Accepted errors: WireError (one line) and kj::Exception (capnp refused the message, or the
// sink failed the stream). Anything else is a finding.
#include <capnp/serialize.h>
#include <kj/async.h>
#include <kj/exception.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include <ATen/core/Tensor.h>

#include "libs/wire/tensor_stream.h"
#include "libs/wire/transfer_codec.h"
#include "schemas/ravnest.capnp.h"
#include "tests/fuzz/fuzz_capnp.h"
#include "tests/fuzz/fuzz_support.h"

using namespace ravnest;

namespace {

constexpr uint64_t kLimit = uint64_t{64} << 20;

// One event loop for the process: the sink runs on it as on a daemon's RPC thread.
kj::WaitScope& wait_scope() {
  static kj::EventLoop loop;
  static kj::WaitScope scope(loop);
  return scope;
}

void stream(std::vector<at::Tensor> pending, const uint8_t* bytes, size_t size) {
  auto opened = wire::TensorSink::open(std::move(pending));
  auto& scope = wait_scope();
  for (size_t at = 0; at < size; at += 4096) {
    auto request = opened.sink.writeRequest();
    const size_t chunk = std::min<size_t>(4096, size - at);
    request.setChunk(capnp::Data::Reader(bytes + at, chunk));
    request.send().wait(scope);
  }
  opened.sink.doneRequest().send().wait(scope);
  opened.completion.wait(scope);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kj::Array<capnp::word> words = fuzz::words_of(data, size);
  try {
    capnp::FlatArrayMessageReader message(words, fuzz::reader_options());
    const size_t used = static_cast<size_t>(message.getEnd() - words.begin()) * sizeof(capnp::word);
    wire::DecodeLimits limits;
    limits.max_tensor_bytes = kLimit;
    limits.max_total_bytes = kLimit;
    std::vector<at::Tensor> pending;
    auto decoded = wire::decode_transfer(
        message.getRoot<schema::Node::SendParams>().getTransfer(), pending, limits);
    uint64_t total = 0;
    for (const auto& [index, value] : decoded.values) {
      if (value.isTensor()) total += wire::tensor_bytes(value.toTensor());
    }
    if (total > kLimit) std::abort();  // the limits did not hold
    if (!pending.empty()) stream(std::move(pending), data + used, size - used);
  } catch (const kj::Exception&) {
  } catch (const wire::WireError& e) {
    fuzz::check_one_line(e.what());
  }
  return 0;
}
