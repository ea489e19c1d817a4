#include "tests/support/drop_reference.h"

#include <regex>
#include <sstream>
#include <stdexcept>

#include "libs/config/job/job_spec.h"
#include "libs/config/plan/plan_file.h"

namespace ravnest::test {

PlanRings plan_rings(const std::string& plan_dir) {
  PlanRings out;
  for (const auto& ring : config::load_plan_file(plan_dir + "/plan.json").rings) {
    out.ids.push_back(ring.id);
    out.names.push_back(ring.parameters);
  }
  if (out.names.size() == 1) out.names.clear();
  return out;
}

std::vector<int64_t> drop_rounds(const std::vector<std::string>& survivor_logs,
                                 const std::vector<int>& ring_ids, std::string* why) {
  std::map<int, int64_t> by_ring;
  const std::regex one("([0-9]+) \\(ring ([0-9]+)\\)");
  for (const std::string& log : survivor_logs) {
    if (log.find("runs again over membership epoch 1 before round") != std::string::npos) {
      *why = "a survivor ran the dropped cluster's last round again for another";
      return {};
    }
    const auto at = log.find("ring membership epoch 1 (");
    if (at == std::string::npos) continue;
    const std::string line = log.substr(at, log.find('\n', at) - at);
    const auto from = line.find("runs from round ");
    if (from == std::string::npos) continue;
    const std::string rounds = line.substr(from);
    for (auto it = std::sregex_iterator(rounds.begin(), rounds.end(), one);
         it != std::sregex_iterator(); ++it) {
      const int ring = std::stoi((*it)[2].str());
      const int64_t round = std::stoll((*it)[1].str());
      const auto seen = by_ring.find(ring);
      if (seen != by_ring.end() && seen->second != round) {
        *why = "ring " + std::to_string(ring) + " runs from two rounds";
        return {};
      }
      by_ring[ring] = round;
    }
  }
  std::vector<int64_t> out;
  for (int ring : ring_ids) {
    const auto seen = by_ring.find(ring);
    if (seen == by_ring.end()) {
      *why = "no survivor says the round ring " + std::to_string(ring) + " runs from";
      return {};
    }
    out.push_back(seen->second);
  }
  return out;
}

std::optional<DropReference> rejoin_reference(const std::string& said, const std::string& model,
                                              const std::string& plan_dir,
                                              const std::string& job_path, int clusters,
                                              int cluster, int steps,
                                              const std::vector<std::string>& survivor_logs,
                                              std::vector<training::ReferenceJoin> joins,
                                              std::string* why) {
  const PlanRings rings = plan_rings(plan_dir);
  const auto rounds = drop_rounds(survivor_logs, rings.ids, why);
  if (rounds.empty()) return std::nullopt;
  std::smatch match;
  const std::string c = std::to_string(cluster);
  if (!std::regex_search(said, match,
                         std::regex("cluster " + c + " rejoined after update ([0-9]+): .*cluster " +
                                    c + " from cluster ([0-9]+)'s checkpoint"))) {
    throw std::runtime_error("train said no rejoin of cluster " + c);
  }
  training::ReferenceJoin rejoin;
  rejoin.after_update = std::stoll(match[1].str());
  rejoin.source = std::stoi(match[2].str());
  rejoin.rejoins = cluster;
  joins.insert(joins.begin(), rejoin);
  std::ostringstream events;
  events << "cluster " << cluster << " dropped at round(s)";
  for (auto r : rounds) events << " " << r;
  for (const auto& j : joins) {
    events << "; after update " << j.after_update << " cluster "
           << (j.rejoins >= 0 ? std::to_string(j.rejoins) : "new") << " from " << j.source;
  }
  DropReference out;
  out.events = events.str();
  out.state = training::train_reference_clusters(model, config::load_job(job_path),
                                                 clusters, steps, {}, {{cluster, rounds}}, joins,
                                                 rings.names)
                  .state;
  return out;
}

}  // namespace ravnest::test
