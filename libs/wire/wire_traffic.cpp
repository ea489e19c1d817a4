#include "libs/wire/wire_traffic.h"

namespace ravnest::wire {

TrafficKind traffic_kind(TransferKind kind) {
  switch (kind) {
    case TransferKind::kActivations: return TrafficKind::kActivations;
    case TransferKind::kGradients:
    case TransferKind::kPsGradients: return TrafficKind::kGradients;
    case TransferKind::kPsWeights:
    case TransferKind::kPsRows: return TrafficKind::kWeights;
    case TransferKind::kPsLookup:
    case TransferKind::kPredicted: return TrafficKind::kOther;
    case TransferKind::kLabels:
    case TransferKind::kRandomState: return TrafficKind::kOther;
  }
  return TrafficKind::kOther;
}

void WireTraffic::sent(TrafficKind kind, uint64_t bytes) {
  auto& c = kinds_[static_cast<int>(kind)];
  c.bytes_sent.fetch_add(bytes, std::memory_order_relaxed);
  c.messages_sent.fetch_add(1, std::memory_order_relaxed);
}

void WireTraffic::received(TrafficKind kind, uint64_t bytes) {
  auto& c = kinds_[static_cast<int>(kind)];
  c.bytes_received.fetch_add(bytes, std::memory_order_relaxed);
  c.messages_received.fetch_add(1, std::memory_order_relaxed);
}

NodeTraffic WireTraffic::snapshot() const {
  NodeTraffic out;
  for (int k = 0; k < kTrafficKinds; ++k) {
    const auto& c = kinds_[k];
    auto& o = out.kinds[k];
    o.bytes_sent = c.bytes_sent.load(std::memory_order_relaxed);
    o.bytes_received = c.bytes_received.load(std::memory_order_relaxed);
    o.messages_sent = c.messages_sent.load(std::memory_order_relaxed);
    o.messages_received = c.messages_received.load(std::memory_order_relaxed);
  }
  return out;
}

void WireTraffic::reset() {
  for (auto& c : kinds_) {
    c.bytes_sent = 0;
    c.bytes_received = 0;
    c.messages_sent = 0;
    c.messages_received = 0;
  }
}

}  // namespace ravnest::wire
