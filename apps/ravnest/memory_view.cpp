#include "apps/ravnest/memory_view.h"

#include "libs/base/byte_size.h"

namespace ravnest::cli {

std::string memory_line(const wire::NodeStatusData& status) {
  using base::format_bytes;
  if (status.memory_limit_bytes == 0) return "";
  return "memory " + format_bytes(status.memory_used_bytes) + " of " +
         format_bytes(status.memory_limit_bytes) + " (" + status.memory_limit_source +
         "), peak " + format_bytes(status.memory_peak_bytes) + ", idle " +
         format_bytes(status.memory_baseline_bytes);
}

}  // namespace ravnest::cli
