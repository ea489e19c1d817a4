// What `ravnest status` and the end of `ravnest train` print of the bytes on the wire: one line
// per node, bytes sent / received by kind (libs/wire/wire_traffic.h says what is counted), and a
// total line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "libs/requester/requester.h"

namespace ravnest::cli {

// The table, lines ending in '\n'; empty when no node answered.
std::string traffic_table(const std::vector<requester::NodeReport>& reports);

}  // namespace ravnest::cli
