// What `ravnest status` prints of a node's memory (docs/daemon.md#memory): its use against its
// budget and where the budget comes from, its peak and its idle baseline.
#pragma once

#include <string>

#include "libs/wire/node_report.h"

namespace ravnest::cli {

// "memory 412 MB of 600 MB (cgroup memory.limit_in_bytes), peak 530 MB, idle 163 MB"; empty when
// the daemon reports no budget (one built before budgets, or without /proc).
std::string memory_line(const wire::NodeStatusData& status);

}  // namespace ravnest::cli
