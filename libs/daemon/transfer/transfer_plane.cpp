#include "libs/daemon/transfer/transfer_plane.h"

#include <memory>
#include <vector>

#include <spdlog/spdlog.h>

#include "libs/daemon/rpc/thread_bridge.h"
#include "libs/wire/kj_reason.h"
#include "libs/wire/lost_connection.h"
#include "libs/wire/tensor_stream.h"
#include "libs/wire/transfer_codec.h"

namespace ravnest::daemon {

kj::Promise<void> TransferPlane::send(SendCall context,
                                      const std::function<wire::StreamSlot()>& open_stream) {
  auto params = context.getParams();
  std::vector<at::Tensor> pending;
  std::vector<std::function<void()>> decompress;
  auto message = checked([&] {
    return wire::decode_transfer(params.getTransfer(), pending, limits_, &decompress);
  });
  uint64_t bytes = params.totalSize().wordCount * 8;
  for (const auto& t : pending) bytes += t.nbytes();
  traffic_.received(wire::traffic_kind(message.kind), bytes);
  if (pending.empty()) {
    inbox_.deliver(std::move(message));
    return kj::READY_NOW;
  }
  auto slot = open_stream();
  auto opened = wire::TensorSink::open(std::move(pending));
  context.getResults().setSink(kj::mv(opened.sink));
  tasks_.add(opened.completion.attach(kj::mv(slot))
                 .then([this, message = std::move(message),
                        decompress = std::move(decompress)]() mutable {
                   for (auto& fill : decompress) fill();  // compressed tensors, into its values
                   inbox_.deliver(std::move(message));
                 }));
  return kj::READY_NOW;
}

void TransferPlane::dispatch(wire::TransferMessage message,
                             const WorkerInbox::AddressBook& addresses) {
  const int to = message.to_node;
  try {
    auto address = addresses.find(to);
    if (address == addresses.end()) {
      throw std::runtime_error("no address for node " + std::to_string(to));
    }
    auto request = links_.node(address->second).sendRequest();
    const auto kind = wire::traffic_kind(message.kind);
    auto encoded = kj::heap<wire::EncodedTensors>(wire::encode_transfer(
        std::move(message), request.initTransfer(), wire::kDefaultInlineLimit));
    traffic_.sent(kind, request.totalSize().wordCount * 8 + encoded->streamed_bytes);
    if (encoded->saturated && !saturation_reported_) {
      saturation_reported_ = true;  // once per daemon: the job's values, not a fault
      spdlog::warn("fp16: values beyond +-65504 were sent as +-65504 (compression saturates)");
    }
    auto sent = request.send();
    kj::Promise<void> done = nullptr;
    if (encoded->streamed.empty()) {
      done = sent.ignoreResult();
    } else {
      auto sink = sent.getSink();
      done = wire::stream_tensors(sink, encoded->streamed)
                 .then([sent = kj::mv(sent)]() mutable { return sent.ignoreResult(); });
    }
    // A failed send drops the connection: the next job reaches a peer that was restarted.
    done = links_.watch(address->second, done.attach(kj::mv(encoded)));
    tasks_.add(done.catch_([this, to, where = address->second](kj::Exception&& e) {
                     const std::string why = wire::kCannotSendTo + config::node_name(to) + " (" +
                                             where + "): " + wire::kj_reason(e);
                     spdlog::error("{}", why);
                     // The next send connects anew; later, not from inside the connection's
                     // own failure.
                     tasks_.add(kj::evalLater([this, where]() { links_.drop(where); }));
                     inbox_.fail(why);
                   }));
  } catch (const std::exception& e) {
    inbox_.fail(wire::kCannotSendTo + config::node_name(to) + ": " + e.what());
  }
}

}  // namespace ravnest::daemon
