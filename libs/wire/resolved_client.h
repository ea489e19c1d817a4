// resolved_client: a capability with every promise it went through taken out.
//
// A client made from a promise (the Node a gate's open() yields, a sink pipelined on a call) keeps
// routing each call through capnp's queue after the promise resolved, and that path builds the
// call in a local message and then copies it, whole, into the connection's (measured: a tenth of
// a daemon's CPU during an all-reduce, its tensor segments copied twice). The resolved client
// sends from the caller's message directly. Unresolved promises are kept as they are; calls on
// them still work, through the queue.
#pragma once

#include <capnp/capability.h>

namespace ravnest::wire {

template <typename Client>
Client resolved_client(Client client) {
  kj::Own<capnp::ClientHook> hook = capnp::ClientHook::from(kj::mv(client));
  for (;;) {
    KJ_IF_MAYBE(next, hook->getResolved()) {
      hook = next->addRef();
    } else {
      break;
    }
  }
  return Client(kj::mv(hook));
}

}  // namespace ravnest::wire
