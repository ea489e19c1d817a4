// The node that keeps a copy of another node's checkpoints, so that a spare can take over the
// slot of a node that died with its disk (`ravnest replace`, docs/faults.md): the next node of its
// cluster's pipeline (cyclic), or, for a node alone in its cluster, the next member of its first
// ring. A node alone in its plan has none. Both sides compute it from the node's metadata: the
// daemon that sends its copies and the requester that fetches them back.
#pragma once

#include <optional>
#include <string>

#include "libs/config/plan/node_metadata.h"

namespace ravnest::config {

struct CheckpointKeeper {
  int node = 0;
  std::string address;
};

std::optional<CheckpointKeeper> checkpoint_keeper(const NodeMetadata& node);

}  // namespace ravnest::config
