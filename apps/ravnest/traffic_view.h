// What `ravnest status` and the end of `ravnest train` print of the bytes on the wire: one line
// per node, bytes sent / received by kind (libs/wire/wire_traffic.h says what is counted), and a
// total line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "libs/requester/requester.h"

namespace ravnest::runtime {

// "0 B", "950 B", "12.3 kB", "4.56 MB", "1.20 GB" (powers of 1000).
std::string format_bytes(uint64_t bytes);

// The table, lines ending in '\n'; empty when no node answered.
std::string traffic_table(const std::vector<NodeReport>& reports);

}  // namespace ravnest::runtime
