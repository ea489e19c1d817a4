#include "libs/wire/protocol_mismatch.h"

#include <capnp/message.h>
#include <capnp/rpc.capnp.h>
#include <capnp/serialize.h>

namespace ravnest::wire {

kj::Array<kj::byte> plain_abort_message(const std::string& reason) {
  capnp::MallocMessageBuilder message;
  auto abort = message.initRoot<capnp::rpc::Message>().initAbort();
  abort.setReason(reason);
  abort.setType(capnp::rpc::Exception::Type::FAILED);
  const auto words = capnp::messageToFlatArray(message);
  const auto bytes = words.asBytes();
  return kj::heapArray<kj::byte>(bytes.begin(), bytes.size());
}

kj::Array<kj::byte> tls_protocol_version_alert() {
  // Record: alert (21), version TLS 1.2 (3, 3), length 2; alert: fatal (2), protocol_version (70).
  const kj::byte alert[] = {21, 3, 3, 0, 2, 2, 70};
  return kj::heapArray<kj::byte>(alert, sizeof(alert));
}

}  // namespace ravnest::wire
