#include "libs/requester/link_rejoin.h"

#include "libs/base/sha256.h"

namespace ravnest::requester {

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
