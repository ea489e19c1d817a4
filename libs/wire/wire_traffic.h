// WireTraffic: what a node sent and received, by kind (node_report.h: TrafficKind), since its job
// was loaded; `ravnest status` and the end of `ravnest train` show it.
//
// A message's bytes are its Cap'n Proto content (the struct and what it points to, inline tensors
// included) plus the tensors streamed after it: what the values cost after compression. Frame
// headers, TLS records and TCP/IP headers are not counted (tens of bytes a message).
//
// Thread-safe: the RPC thread counts, any thread may read.
#pragma once

#include <atomic>
#include <cstdint>

#include "libs/wire/node_report.h"
#include "libs/wire/transfer_message.h"

namespace ravnest::wire {

// Activations and gradients as their kind says; labels and random state are "other".
TrafficKind traffic_kind(TransferKind kind);

class WireTraffic {
 public:
  void sent(TrafficKind kind, uint64_t bytes);
  void received(TrafficKind kind, uint64_t bytes);
  NodeTraffic snapshot() const;
  void reset();

 private:
  struct Counters {
    std::atomic<uint64_t> bytes_sent{0}, bytes_received{0}, messages_sent{0},
        messages_received{0};
  };
  Counters kinds_[kTrafficKinds];
};

}  // namespace ravnest::wire
