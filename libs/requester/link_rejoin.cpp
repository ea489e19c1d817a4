#include "libs/requester/link_rejoin.h"

#include <algorithm>
#include <stdexcept>

#include "libs/base/sha256.h"
#include "libs/config/plan/node_replacement.h"

namespace ravnest::requester {

std::string address_to_ask(const config::NodeMetadata& meta,
                           const std::map<std::string, std::string>& live) {
  const auto it = live.find(meta.name);
  if (it == live.end() || it->second.empty()) return meta.address;
  return it->second;
}

std::vector<int> move_node(std::vector<config::NodeMetadata>& nodes, int id,
                           const std::string& address) {
  auto moved = std::find_if(nodes.begin(), nodes.end(),
                            [&](const config::NodeMetadata& m) { return m.node_id == id; });
  if (moved == nodes.end()) throw std::runtime_error(config::node_name(id) + " is not in the plan");
  for (const auto& m : nodes) {
    if (m.node_id != id && m.address == address) {
      throw std::runtime_error(moved->name + " cannot move to " + address + ": it is " + m.name +
                               "'s address in the plan");
    }
  }
  const std::string was = moved->address;
  std::vector<int> changed;
  for (auto& node : nodes) {
    const std::string before = config::to_json(node);
    if (node.node_id == id) node.address = address;
    config::rename_node_mentions(node, id, id, address);
    auto pin = node.tls_fingerprints.find(was);
    if (pin != node.tls_fingerprints.end() && was != address) {
      const std::string fingerprint = pin->second;
      node.tls_fingerprints.erase(pin);
      node.tls_fingerprints[address] = fingerprint;
    }
    if (config::to_json(node) != before) changed.push_back(node.node_id);
  }
  std::sort(changed.begin(), changed.end());
  return changed;
}

std::string unfit_for_job(const config::NodeMetadata& meta, const wire::NodeStatusData& s) {
  const std::string who = meta.name + " (" + meta.address + ")";
  if (s.node != meta.name) {
    return who + ": the daemon there serves " + s.node + "; start `ravnestd --node " + meta.name +
           "` there";
  }
  if (!s.has_stage) return who + ": no stage stored; run `ravnest push`";
  if (!s.stage_problem.empty()) return who + ": " + s.stage_problem + "; run `ravnest push`";
  if (!base::same_sha256(s.stage_sha256, meta.stage_sha256)) {
    return who + ": holds stage " + s.stage_sha256.substr(0, 12) + ", not the plan's " +
           meta.stage_sha256.substr(0, 12) + " (another plan, or an older one); run `ravnest push`";
  }
  if (s.state == wire::NodeState::kTraining) {
    return who + ": busy: job " + std::to_string(s.job_id) +
           " is running; wait for it, or stop it with `ravnest stop`";
  }
  return "";
}

LinkRejoins choose_link_rejoins(const std::map<int, std::string>& why_not,
                                const std::map<int, int>& done, int most) {
  LinkRejoins choice;
  for (const auto& [cluster, why] : why_not) {
    const auto it = done.find(cluster);
    if ((it == done.end() ? 0 : it->second) >= most) {
      choice.given_up.push_back(cluster);
    } else if (why.empty()) {
      choice.back.push_back(cluster);
    }
  }
  return choice;
}

}  // namespace ravnest::requester
