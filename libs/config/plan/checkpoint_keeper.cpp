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
    if (ring.next.node != node.node_id) return CheckpointKeeper{ring.next.node, ring.next.address};
  }
  return std::nullopt;
}

}  // namespace ravnest::config
