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
                                 const std::vector<int>& ring_ids, std::string* why, int epoch,
                                 const std::string& job, const std::string& next_job) {
  const std::string e = std::to_string(epoch);
  std::map<int, int64_t> by_ring;
  const std::regex one("([0-9]+) \\(ring ([0-9]+)\\)");
  for (const std::string& whole : survivor_logs) {
    const std::string log = job_part(whole, job, next_job);
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
  // A ring that completed the round before the membership named it, with no member left to run
  // it again for, runs from the next (RingMember::catch_up says so).
  const std::regex later("ring reduce over membership epoch " + e +
                         ": round [0-9]+ was completed before the membership named it, [^\n]*"
                         "runs from round ([0-9]+) \\(ring ([0-9]+)\\)");
  for (const std::string& whole : survivor_logs) {
    const std::string log = job_part(whole, job, next_job);
    for (auto it = std::sregex_iterator(log.begin(), log.end(), later);
         it != std::sregex_iterator(); ++it) {
      by_ring[std::stoi((*it)[2].str())] = std::stoll((*it)[1].str());
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

std::string job_part(const std::string& log, const std::string& job,
                     const std::string& next_job) {
  size_t begin = 0;
  if (!job.empty()) {
    begin = log.find("job " + job);
    if (begin == std::string::npos) return "";
  }
  size_t end = std::string::npos;
  if (!next_job.empty()) {
    end = log.find("job " + next_job, begin);
    if (end != std::string::npos) end -= begin;
  }
  return log.substr(begin, end);
}

std::optional<DropReference> drop_reference(const std::string& said, const std::string& model,
                                            const std::string& plan_dir,
                                            const std::string& job_path, int clusters, int steps,
                                            const std::vector<std::string>& survivor_logs,
                                            std::vector<training::ReferenceJoin> joins,
                                            std::string* why) {
  const PlanRings rings = plan_rings(plan_dir);
  // The drops and the rejoins, in the order said. Each take-in (a rejoin, a join) resumes the
  // job under a new id, which counts its membership epochs anew: a drop is epoch k of the job it
  // happened in (k-th since that job started), found in that job's part of each log.
  const std::regex event(
      "cluster ([0-9]+) (dropped \\(|(re)?joined after update ([0-9]+): every cluster resumed "
      "from there as job ([0-9]+)[^\n]* from cluster ([0-9]+)'s checkpoint)");
  struct Drop {
    int cluster = 0;
    int epoch = 1;
    size_t job = 0;  // in `jobs`
    int64_t at_resume = -1;  // >= 0: left out at a take-in, before this round (of every ring)
  };
  std::vector<Drop> drops;
  std::vector<std::string> jobs{""};  // the first job's id is not said: its part starts the log
  std::vector<training::ReferenceJoin> rejoins;
  std::set<int> out_now, ever_out;
  int epoch_in_job = 0;
  for (auto it = std::sregex_iterator(said.begin(), said.end(), event);
       it != std::sregex_iterator(); ++it) {
    const int cluster = std::stoi((*it)[1].str());
    if ((*it)[4].matched) {
      if ((*it)[5].str() != jobs.back()) {
        jobs.push_back((*it)[5].str());
        epoch_in_job = 0;
      }
      if (!(*it)[3].matched) continue;  // a newcomer's join: in `joins`
      training::ReferenceJoin rejoin;
      rejoin.after_update = std::stoll((*it)[4].str());
      rejoin.source = std::stoi((*it)[6].str());
      rejoin.rejoins = cluster;
      rejoins.push_back(rejoin);
      out_now.erase(cluster);
      continue;
    }
    if (out_now.count(cluster)) continue;  // the same drop said again
    if (ever_out.count(cluster)) {
      *why = "cluster " + std::to_string(cluster) + " dropped again after its rejoin";
      return std::nullopt;
    }
    out_now.insert(cluster);
    ever_out.insert(cluster);
    // A node lost while a take-in resumed the job after update U: its cluster took part in the
    // rounds up to that update's (rounds 0 to U - 1, one after each update) and in none of the
    // resumed job's, which starts at round U; no membership epoch of the job before names it.
    const auto line_end = said.find('\n', static_cast<size_t>(it->position(0)));
    const std::string rest = said.substr(static_cast<size_t>(it->position(0)),
                                         line_end == std::string::npos
                                             ? std::string::npos
                                             : line_end - static_cast<size_t>(it->position(0)));
    std::smatch resumed;
    if (std::regex_search(rest, resumed,
                          std::regex("when the job resumed after update ([0-9]+)\\)"))) {
      drops.push_back({cluster, 0, jobs.size() - 1, std::stoll(resumed[1].str())});
      continue;
    }
    drops.push_back({cluster, ++epoch_in_job, jobs.size() - 1});
  }
  std::map<int, std::vector<int64_t>> dropped;
  std::ostringstream events;
  for (size_t k = 0; k < drops.size(); ++k) {
    const Drop& drop = drops[k];
    if (drop.at_resume >= 0) {
      dropped[drop.cluster] = {drop.at_resume};
      events << "; cluster " << drop.cluster << " left out at round " << drop.at_resume;
      continue;
    }
    const std::string& job = jobs[drop.job];
    const std::string next_job = drop.job + 1 < jobs.size() ? jobs[drop.job + 1] : "";
    auto rounds = drop_rounds(survivor_logs, rings.ids, why, drop.epoch, job, next_job);
    if (rounds.empty() && k + 1 < drops.size() && drops[k + 1].job == drop.job &&
        drops[k + 1].at_resume < 0 &&
        rings.ids.size() == 1) {
      // A member that did not answer ringRounds (a node of the cluster dropped next, dead too)
      // leaves the ring without a round to run from; no round completes over a ring that names
      // a dead member. Where every survivor failed the round the next epoch runs from, over this
      // membership or the one before, that is the round this cluster left at.
      std::string next_why;
      const auto next =
          drop_rounds(survivor_logs, rings.ids, &next_why, drop.epoch + 1, job, next_job);
      auto failed = [&](const std::string& log, int over) {
        return job_part(log, job, next_job)
                   .find("ring reduce of round " + std::to_string(next[0]) +
                         " failed over membership epoch " + std::to_string(over) + " ") !=
               std::string::npos;
      };
      if (!next.empty() &&
          std::all_of(survivor_logs.begin(), survivor_logs.end(), [&](const std::string& log) {
            return failed(log, drop.epoch - 1) || failed(log, drop.epoch);
          })) {
        rounds = next;
      }
    }
    if (rounds.empty()) return std::nullopt;
    dropped[drop.cluster] = rounds;
    events << "; cluster " << drop.cluster << " dropped at round(s)";
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
