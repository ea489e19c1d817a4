#include "tests/support/drop_reference.h"

#include <algorithm>
#include <regex>
#include <set>
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
                                 const std::vector<int>& ring_ids, std::string* why, int epoch) {
  const std::string e = std::to_string(epoch);
  std::map<int, int64_t> by_ring;
  const std::regex one("([0-9]+) \\(ring ([0-9]+)\\)");
  for (const std::string& log : survivor_logs) {
    if (log.find("runs again over membership epoch " + e + " before round") != std::string::npos) {
      *why = "a survivor ran a dropped cluster's last round again for another (epoch " + e + ")";
      return {};
    }
    const auto at = log.find("ring membership epoch " + e + " (");
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
        *why = "ring " + std::to_string(ring) + " runs from two rounds at epoch " + e;
        return {};
      }
      by_ring[ring] = round;
    }
  }
  std::vector<int64_t> out;
  for (int ring : ring_ids) {
    const auto seen = by_ring.find(ring);
    if (seen == by_ring.end()) {
      *why = "no survivor says the round ring " + std::to_string(ring) + " runs from at epoch " + e;
      return {};
    }
    out.push_back(seen->second);
  }
  return out;
}

std::optional<DropReference> drop_reference(const std::string& said, const std::string& model,
                                            const std::string& plan_dir,
                                            const std::string& job_path, int clusters, int steps,
                                            const std::vector<std::string>& survivor_logs,
                                            std::vector<training::ReferenceJoin> joins,
                                            std::string* why) {
  const PlanRings rings = plan_rings(plan_dir);
  // The drops (membership epochs 1, 2, ...) and the rejoins, in the order said.
  const std::regex event(
      "cluster ([0-9]+) (dropped \\(|rejoined after update ([0-9]+): [^\n]* from cluster "
      "([0-9]+)'s checkpoint)");
  std::vector<int> drops;  // the clusters dropped, in the order said: epochs 1, 2, ...
  std::vector<training::ReferenceJoin> rejoins;
  std::set<int> back;
  for (auto it = std::sregex_iterator(said.begin(), said.end(), event);
       it != std::sregex_iterator(); ++it) {
    const int cluster = std::stoi((*it)[1].str());
    if ((*it)[3].matched) {
      training::ReferenceJoin rejoin;
      rejoin.after_update = std::stoll((*it)[3].str());
      rejoin.source = std::stoi((*it)[4].str());
      rejoin.rejoins = cluster;
      rejoins.push_back(rejoin);
      back.insert(cluster);
      continue;
    }
    const bool said_again = std::find(drops.begin(), drops.end(), cluster) != drops.end();
    if (said_again && !back.count(cluster)) continue;  // the same drop said again
    if (!rejoins.empty()) {
      *why = "cluster " + std::to_string(cluster) + " dropped after a rejoin (a resumed job)";
      return std::nullopt;
    }
    drops.push_back(cluster);
  }
  std::map<int, std::vector<int64_t>> dropped;
  std::ostringstream events;
  for (size_t k = 0; k < drops.size(); ++k) {
    const int epoch = static_cast<int>(k) + 1;
    auto rounds = drop_rounds(survivor_logs, rings.ids, why, epoch);
    if (rounds.empty() && k + 1 < drops.size() && rings.ids.size() == 1) {
      // A member that did not answer ringRounds (a node of the cluster dropped next, dead too)
      // leaves the ring without a round to run from; no round completes over a ring that names
      // a dead member. Where every survivor failed the round the next epoch runs from, over this
      // membership or the one before, that is the round this cluster left at.
      std::string next_why;
      const auto next = drop_rounds(survivor_logs, rings.ids, &next_why, epoch + 1);
      auto failed = [&](const std::string& log, int over) {
        return log.find("ring reduce of round " + std::to_string(next[0]) +
                        " failed over membership epoch " + std::to_string(over) + " ") !=
               std::string::npos;
      };
      if (!next.empty() &&
          std::all_of(survivor_logs.begin(), survivor_logs.end(), [&](const std::string& log) {
            return failed(log, epoch - 1) || failed(log, epoch);
          })) {
        rounds = next;
      }
    }
    if (rounds.empty()) return std::nullopt;
    dropped[drops[k]] = rounds;
    events << "; cluster " << drops[k] << " dropped at round(s)";
    for (auto r : rounds) events << " " << r;
  }
  for (const auto& rejoin : rejoins) {
    events << "; cluster " << rejoin.rejoins << " back after update " << rejoin.after_update
           << " from " << rejoin.source;
  }
  if (dropped.empty()) throw std::runtime_error("train said no cluster dropped");
  joins.insert(joins.begin(), rejoins.begin(), rejoins.end());
  // Rejoins before a newcomer at the same update, as one take-in admits them.
  std::stable_sort(joins.begin(), joins.end(),
                   [](const training::ReferenceJoin& a, const training::ReferenceJoin& b) {
                     return a.after_update < b.after_update;
                   });
  for (const auto& j : joins) {
    if (j.rejoins < 0) {
      events << "; a new cluster after update " << j.after_update << " from " << j.source;
    }
  }
  DropReference out;
  out.events = events.str().substr(2);
  out.state = training::train_reference_clusters(model, config::load_job(job_path), clusters,
                                                 steps, {}, dropped, joins, rings.names)
                  .state;
  return out;
}

}  // namespace ravnest::test
