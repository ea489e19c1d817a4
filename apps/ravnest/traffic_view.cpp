#include "apps/ravnest/traffic_view.h"

#include <cstdio>

#include "libs/base/byte_size.h"

namespace ravnest::cli {

using base::format_bytes;

std::string traffic_table(const std::vector<requester::NodeReport>& reports) {
  constexpr wire::TrafficKind kinds[] = {
      wire::TrafficKind::kActivations, wire::TrafficKind::kGradients, wire::TrafficKind::kRings,
      wire::TrafficKind::kWeights, wire::TrafficKind::kOther};
  auto cell = [](const wire::TrafficCount& c) {
    return format_bytes(c.bytes_sent) + " / " + format_bytes(c.bytes_received);
  };
  std::string out;
  char line[256];
  auto row = [&](const std::string& name, const wire::NodeTraffic& t) {
    std::snprintf(line, sizeof line, "%-8s %-21s %-21s %-21s %-21s %s\n", name.c_str(),
                  cell(t[kinds[0]]).c_str(), cell(t[kinds[1]]).c_str(), cell(t[kinds[2]]).c_str(),
                  cell(t[kinds[3]]).c_str(), cell(t[kinds[4]]).c_str());
    out += line;
  };
  wire::NodeTraffic total;
  bool any = false;
  for (const auto& r : reports) {
    if (!r.reachable) continue;
    if (!any) {
      out += "bytes on the wire since the job was loaded (sent / received):\n";
      std::snprintf(line, sizeof line, "%-8s %-21s %-21s %-21s %-21s %s\n", "node",
                    "activations", "gradients", "rings", "weights", "other");
      out += line;
      any = true;
    }
    row(r.node.name, r.status.traffic);
    for (int k = 0; k < wire::kTrafficKinds; ++k) {
      total.kinds[k].bytes_sent += r.status.traffic.kinds[k].bytes_sent;
      total.kinds[k].bytes_received += r.status.traffic.kinds[k].bytes_received;
    }
  }
  if (any) row("total", total);
  return out;
}

}  // namespace ravnest::cli
