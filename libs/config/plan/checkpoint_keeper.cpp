#include "libs/config/plan/checkpoint_keeper.h"

#include <algorithm>

namespace ravnest::config {

std::optional<CheckpointKeeper> checkpoint_keeper(const NodeMetadata& node) {
  if (node.pipeline.size() > 1) {
    auto it = std::find(node.pipeline.begin(), node.pipeline.end(), node.node_id);
    if (it != node.pipeline.end()) {
      const int next = ++it == node.pipeline.end() ? node.pipeline.front() : *it;
      auto address = node.addresses.find(next);
      if (address != node.addresses.end()) return CheckpointKeeper{next, address->second};
    }
  }
  for (const auto& ring : node.rings) {
    for (const auto& peer : ring.peers) {
      if (peer.node == ring.next_node && peer.node != node.node_id) {
        return CheckpointKeeper{peer.node, peer.address};
      }
    }
  }
  return std::nullopt;
}

}  // namespace ravnest::config
