#include "libs/requester/elastic_resume.h"

#include <chrono>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "libs/config/pool/node_pool.h"
#include "libs/requester/replacement.h"
#include "libs/tracker/elastic_choice.h"
#include "libs/tracker/tracker_client.h"
#include "libs/wire/transport_security.h"

namespace ravnest::requester {

namespace {

// "node_1", "node_1 and node_3": the names as a sentence's subject.
std::string names_of(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " and " : ", ";
    out += names[i];
  }
  return out;
}

// The names of `nodes` still in the tracker's pool.
std::vector<std::string> still_registered(const std::vector<std::string>& nodes,
                                          const tracker::PoolSnapshot& pool) {
  std::set<std::string> live;
  for (const auto& m : pool.members) live.insert(m.registration.name);
  std::vector<std::string> kept;
  for (const auto& name : nodes) {
    if (live.count(name)) kept.push_back(name);
  }
  return kept;
}

}  // namespace

std::optional<std::string> replace_after_failure(const ElasticOptions& options,
                                                 const TrainFailed& failed,
                                                 const std::function<bool()>& interrupted) {
  const auto& log = options.log;
  const Plan plan = load_plan(options.plan_dir);
  // Only a node that does not answer can be lost; any other failure fails the job as it is.
  std::vector<std::string> silent;
  {
    Requester requester(plan, options.secret, options.insecure);
    for (const auto& report : requester.status()) {
      if (!report.reachable && report.state == "unreachable") silent.push_back(report.node.name);
    }
  }
  if (silent.empty()) return std::nullopt;

  // The tracker decides that a node is gone: no heartbeat for its expiry.
  const auto security = wire::make_transport_security(options.secret, options.insecure);
  auto pool = tracker::fetch_pool(options.tracker, security, 5);
  const double wait = pool.expiry_seconds + 5;
  const std::string who = names_of(silent);
  std::vector<std::string> heartbeating = still_registered(silent, pool);
  if (!heartbeating.empty()) {
    log("elastic: job " + std::to_string(failed.job_id) + " failed with no cluster left (" +
        who + (silent.size() == 1 ? " does" : " do") + " not answer); waiting up to " +
        std::to_string(static_cast<int>(wait)) + " s for tracker " + options.tracker +
        " to expire " + (silent.size() == 1 ? "it" : "them"));
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(wait);
    while (!heartbeating.empty() && std::chrono::steady_clock::now() < deadline) {
      if (interrupted && interrupted()) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      pool = tracker::fetch_pool(options.tracker, security, 5);
      heartbeating = still_registered(silent, pool);
    }
  }
  if (!heartbeating.empty()) {
    const bool one = heartbeating.size() == 1;
    log("elastic: " + names_of(heartbeating) + (one ? " does" : " do") + " not answer but still " +
        (one ? "heartbeats" : "heartbeat") + " at tracker " + options.tracker +
        ": not replaced, the job fails");
    return std::nullopt;
  }

  std::vector<tracker::PlannedNode> planned;
  for (const auto& meta : plan.nodes) {
    planned.push_back({meta.name, meta.cluster, stage_need_bytes(meta)});
  }
  const std::map<std::string, tracker::Member> idle = tracker::members_of(pool);
  const auto changes = tracker::choose_elastic_changes(planned, silent, idle);
  const std::string why =
      "no heartbeat for " + std::to_string(static_cast<int>(pool.expiry_seconds)) + " s";
  // Every lost node needs its replacement, else none is made: the job could not resume.
  for (const auto& change : changes) {
    if (change.kind == tracker::ElasticChange::Kind::replace) continue;
    const std::string line = "elastic: " + change.lost + " lost (" + why +
                             "); no idle node fits its stage: the job fails (`ravnest replace`, "
                             "then `ravnest resume`, once one does)";
    log(line);
    record_elastic_change(options.plan_dir, failed.metrics_job, "fail", change.lost, "",
                          change.cluster, line, log);
    return std::nullopt;
  }

  const std::string origin = "tracker " + options.tracker;
  const auto pool_nodes =
      config::parse_node_pool(tracker::pool_file_json(pool), origin, /*toml=*/false);
  std::string said;
  // Each lost node's replacement leaves the others (gone too, replaced next) out of its checks.
  const std::set<std::string> lost(silent.begin(), silent.end());
  for (const auto& change : changes) {
    const Replacement replaced = replace_node(
        options.plan_dir, options.secret, change.lost,
        config::pool_node(pool_nodes, change.replacement, origin),
        [&log](const std::string& line) { log("elastic: " + line); }, options.insecure, lost);
    const std::string line =
        change.line(why) + ", the job resumes " +
        (replaced.checkpoint ? "after update " + std::to_string(*replaced.checkpoint)
                             : std::string("from its start (no checkpoint of its slot that "
                                           "every other node holds)"));
    log(line);
    record_elastic_change(options.plan_dir, failed.metrics_job, "replace_resume", change.lost,
                          change.replacement, change.cluster, line, log);
    said += (said.empty() ? "" : "\n") + line;
  }
  return said;
}

}  // namespace ravnest::requester
