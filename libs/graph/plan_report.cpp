#include "libs/graph/plan_report.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "libs/planner/cluster_plan.h"

namespace ravnest::graph {

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000 && u < 4) {
    bytes /= 1000;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return text;
}

namespace {

std::string human_count(int64_t n) {
  char text[32];
  if (n >= 1000000) std::snprintf(text, sizeof text, "%.2fM", n / 1e6);
  else if (n >= 1000) std::snprintf(text, sizeof text, "%.1fK", n / 1e3);
  else std::snprintf(text, sizeof text, "%lld", static_cast<long long>(n));
  return text;
}

}  // namespace

std::string plan_layout_line(const std::vector<config::NodeMetadata>& nodes) {
  std::map<int, int> stages;  // cluster -> its stage count
  for (const auto& node : nodes) stages[node.cluster] = std::max(stages[node.cluster], node.cluster_size);
  if (stages.empty()) return "an empty plan";
  const bool copies = std::all_of(stages.begin(), stages.end(),
                                  [](const auto& c) { return c.second == 1; });
  const std::string count = std::to_string(stages.size());
  if (copies) {
    const auto& e = nodes.front().estimates;
    const double peak = e.peak_memory_bytes > 0 ? static_cast<double>(e.peak_memory_bytes)
                                                : e.memory_bytes / planner::memory_margin();
    std::string fits = "the whole model (peak " + human_bytes(peak);
    if (e.node_ram_bytes > 0) fits += " of " + human_bytes(static_cast<double>(e.node_ram_bytes));
    fits += ") fits one node";
    if (stages.size() == 1) return "one node, no pipeline: " + fits;
    return count + " data-parallel copies of the whole model, not a pipeline: " + fits +
           ", and " + count + " copies that average their weights are estimated to train faster "
           "than a pipeline over these nodes (a pipeline: clusterize --stages N, in Python "
           "clusterize(model, ..., stages=N))";
  }
  std::string sizes;
  for (const auto& [cluster, n] : stages) sizes += (sizes.empty() ? "" : ", ") + std::to_string(n);
  return count + (stages.size() == 1 ? " pipeline" : " pipelines") + " of " + sizes +
         " stages (" + (stages.size() == 1 ? "one cluster" : "data-parallel clusters") +
         "): the planner's fastest estimate for this pool and model";
}

std::vector<std::string> describe_plan(const std::vector<config::NodeMetadata>& nodes) {
  std::vector<std::string> lines;
  lines.push_back(plan_layout_line(nodes));
  std::map<int, const config::NodeMetadata*> by_id;
  for (const auto& node : nodes) by_id[node.node_id] = &node;
  for (const auto& [id, node] : by_id) {
    lines.push_back("Node(" + std::to_string(id) + ", Cluster(" + std::to_string(node->cluster) +
                    "))");
    lines.push_back("self.IP(" + node->address + ")");
    std::string ring_ids, address_to_param;
    for (const auto& ring : node->rings) {
      const std::string first = ring.parameters.empty() ? "" : ring.parameters.front();
      ring_ids += (ring_ids.empty() ? "" : ", ") + std::to_string(ring.id) + ": '" + first + "'";
      const std::string& address = ring.next.address;
      address_to_param += (address_to_param.empty() ? "" : ", ") + ("'" + address + "': '") +
                          first + "'";
    }
    lines.push_back("Ring IDs({" + ring_ids + "})");
    lines.push_back("Address2Param({" + address_to_param + "})");
    lines.push_back("");
  }
  // Memory per node: the stage's peak as measured (or, marked "~", as modelled), the node's RAM
  // as its pool entry declares it, and what is left of it at that peak.
  char row[320];
  std::snprintf(row, sizeof row, "%-8s %-6s %-10s %-9s %10s %10s %10s %10s %10s %14s", "cluster",
                "node", "role", "stage", "params", "peak", "ram", "free", "step", "fwd B/sample");
  lines.push_back(row);
  bool modelled = false;
  for (const auto& node : nodes) {
    const auto& e = node.estimates;
    const bool measured = e.peak_memory_bytes > 0;
    modelled = modelled || !measured;
    const double peak = measured ? static_cast<double>(e.peak_memory_bytes)
                                 : e.memory_bytes / planner::memory_margin();
    std::string free_text = "-";
    std::string ram_text = "-";
    if (e.node_ram_bytes > 0) {
      ram_text = human_bytes(static_cast<double>(e.node_ram_bytes));
      char text[32];
      std::snprintf(text, sizeof text, "%.0f%%",
                    100.0 * (static_cast<double>(e.node_ram_bytes) - peak) /
                        static_cast<double>(e.node_ram_bytes));
      free_text = text;
    }
    std::snprintf(row, sizeof row, "%-8d %-6d %-10s %-9s %10s %10s %10s %10s %9.1fms %14s",
                  node.cluster, node.node_id, config::role_name(node.role).c_str(),
                  (std::to_string(node.position + 1) + "/" + std::to_string(node.cluster_size))
                      .c_str(),
                  human_count(e.parameter_count).c_str(),
                  ((measured ? "" : "~") + human_bytes(peak)).c_str(), ram_text.c_str(),
                  free_text.c_str(), e.step_seconds * 1e3,
                  human_bytes(e.forward_bytes_per_sample).c_str());
    lines.push_back(row);
  }
  char note[200];
  std::snprintf(note, sizeof note,
                "peak: %s, a daemon's own memory included; a node takes a stage whose peak "
                "x %.2f fits its ram",
                modelled ? "~ modelled (not measured), else measured by a probe" : "measured by a probe",
                planner::memory_margin());
  lines.push_back(note);
  return lines;
}

}  // namespace ravnest::graph
