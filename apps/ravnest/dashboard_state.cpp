#include "apps/ravnest/dashboard_state.h"

#include <cmath>
#include <map>
#include <set>

namespace ravnest::cli {

namespace {

// NaN and infinities are not JSON: null.
nlohmann::json number(double value) {
  return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json dashboard_state(const requester::Plan& plan, const std::vector<requester::NodeReport>& reports,
                               const std::vector<LossHistory>& histories,
                               const std::string& job_path, const std::string& job_text,
                               size_t max_points) {
  nlohmann::json out;
  nlohmann::json clusters = nlohmann::json::array();
  std::map<int, std::set<int>> rings;  // ring id -> nodes
  for (int id : plan.cluster_ids()) {
    nlohmann::json nodes = nlohmann::json::array();
    for (const auto& node : plan.cluster(id)) {
      nodes.push_back({{"name", node.name}, {"id", node.node_id}, {"position", node.position},
                       {"role", config::role_name(node.role)}, {"address", node.address}});
      for (const auto& ring : node.rings) {
        rings[ring.id].insert(node.node_id);  // every member lists its own rings
      }
    }
    clusters.push_back({{"id", id}, {"nodes", nodes}});
  }
  nlohmann::json servers = nlohmann::json::array();
  for (const auto& node : plan.nodes) {
    if (node.cluster < 0) {
      servers.push_back({{"name", node.name}, {"id", node.node_id},
                         {"role", config::role_name(node.role)}, {"address", node.address}});
    }
  }
  nlohmann::json ring_list = nlohmann::json::array();
  for (const auto& [id, nodes] : rings) {
    ring_list.push_back({{"id", id}, {"nodes", std::vector<int>(nodes.begin(), nodes.end())}});
  }
  out["plan"] = {{"dir", plan.dir}, {"clusters", clusters}, {"servers", servers},
                 {"rings", ring_list}, {"node_count", plan.nodes.size()}};

  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& r : reports) {
    const auto& s = r.status;
    nlohmann::json traffic;
    uint64_t sent = 0, received = 0;
    for (int k = 0; k < wire::kTrafficKinds; ++k) {
      const auto& c = s.traffic.kinds[k];
      traffic[wire::traffic_kind_name(static_cast<wire::TrafficKind>(k))] = {c.bytes_sent,
                                                                            c.bytes_received};
      sent += c.bytes_sent;
      received += c.bytes_received;
    }
    const bool root = r.node.position == 0 && r.node.cluster >= 0;
    nlohmann::json n = {{"name", r.node.name},
                        {"id", r.node.node_id},
                        {"cluster", r.node.cluster},
                        {"position", r.node.position},
                        {"role", config::role_name(r.node.role)},
                        {"address", r.node.address},
                        {"reachable", r.reachable},
                        {"state", r.state},
                        {"error", r.error.empty() ? s.error : r.error},
                        {"job_id", std::to_string(s.job_id)},
                        {"epoch", s.epoch},
                        {"batches", s.batches},
                        {"total_batches", root ? nlohmann::json(s.total_batches) : nullptr},
                        {"loss", r.node.returns_model_output ? number(s.last_loss) : nullptr},
                        {"samples_per_second", root ? number(s.samples_per_second) : nullptr},
                        {"busy", s.running_seconds > 0 ? number(s.busy_seconds / s.running_seconds)
                                                       : nullptr},
                        {"resident_bytes", s.resident_bytes},
                        {"bytes_sent", sent},
                        {"bytes_received", received},
                        {"traffic", traffic}};
    nodes.push_back(std::move(n));
  }
  out["nodes"] = nodes;

  nlohmann::json curves = nlohmann::json::array();
  for (const auto& h : histories) {
    nlohmann::json points = nlohmann::json::array();
    const size_t n = h.losses.size();
    const size_t stride = n > max_points && max_points > 1 ? (n + max_points - 2) / (max_points - 1) : 1;
    for (size_t i = 0; i < n; i += stride) points.push_back({i + 1, number(h.losses[i])});
    if (n > 0 && (n - 1) % stride != 0) points.push_back({n, number(h.losses[n - 1])});
    nlohmann::json rounds = nlohmann::json::array();
    for (const auto& v : h.validation) {
      rounds.push_back({{"updates", v.updates}, {"epoch", v.epoch}, {"loss", number(v.loss)},
                        {"accuracy", number(v.accuracy)}});
    }
    curves.push_back({{"id", h.cluster},
                      {"label", h.label()},
                      {"batches", n},
                      {"last_loss", n ? number(h.losses.back()) : nullptr},
                      {"losses", points},
                      {"validation", rounds}});
  }
  out["clusters"] = curves;
  out["job_path"] = job_path;
  out["job"] = job_text;
  return out;
}

}  // namespace ravnest::cli
