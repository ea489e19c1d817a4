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
#include "libs/wire/lost_connection.h"
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

// How long a tracker that does not answer is asked again before the job fails: a restart.
constexpr double kTrackerGraceSeconds = 30;

// The plan's nodes that do not answer now.
std::vector<std::string> silent_nodes(const Plan& plan, const ElasticOptions& options) {
  std::vector<std::string> silent;
  Requester requester(plan, options.secret, options.insecure);
  for (const auto& report : requester.status()) {
    if (!report.reachable && report.state == "unreachable") silent.push_back(report.node.name);
  }
  return silent;
}

// The job resumed with the same nodes after a lost connection (elastic_resume.h): its line and
// row; nothing when `link_resumes_left` is spent.
std::optional<AfterFailure> resume_same_nodes(const ElasticOptions& options,
                                              const TrainFailed& failed, int link_resumes_left) {
  if (link_resumes_left <= 0) return std::nullopt;
  const int nth = kLinkResumes - link_resumes_left + 1;
  const std::string line = "elastic: job " + std::to_string(failed.job_id) +
                           " failed on a lost connection (" + failed.what() +
                           ") and every node answers: it resumes from the newest checkpoint "
                           "every node holds (" + std::to_string(nth) + " of at most " +
                           std::to_string(kLinkResumes) + ")";
  options.log(line);
  record_elastic_change(options.plan_dir, failed.metrics_job, "resume_link", "", "", -1, line,
                        options.log);
  return AfterFailure{line, false};
}

// Reads the tracker's pool into `pool` (true). A tracker that does not answer (restarting) is
// asked again every 0.5 s for up to kTrackerGraceSeconds, said once (`said`), `stop_waiting`
// asked between tries: true ends the wait (false). Throws fetch_pool's error after the grace.
bool read_pool_patiently(const ElasticOptions& options,
                         const std::shared_ptr<wire::TransportSecurity>& security,
                         tracker::PoolSnapshot& pool, bool& said,
                         const std::function<bool()>& stop_waiting) {
  const auto give_up = std::chrono::steady_clock::now() +
                       std::chrono::duration<double>(kTrackerGraceSeconds);
  for (;;) {
    try {
      pool = tracker::fetch_pool(options.tracker, security, 5);
      return true;
    } catch (const std::exception& e) {
      if (std::chrono::steady_clock::now() >= give_up) throw;
      if (!said) {
        options.log("elastic: " + std::string(e.what()) + "; asking again for up to " +
                    std::to_string(static_cast<int>(kTrackerGraceSeconds)) + " s");
        said = true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    if (stop_waiting()) return false;
  }
}

}  // namespace

std::optional<AfterFailure> replace_after_failure(const ElasticOptions& options,
                                                  const TrainFailed& failed,
                                                  int link_resumes_left,
                                                  const std::function<bool()>& interrupted) {
  const auto& log = options.log;
  const Plan plan = load_plan(options.plan_dir);
  const bool lost_connection = wire::is_lost_connection(failed.what());
  // The same nodes again, when the job failed on a connection and no node is lost.
  auto resume_link = [&]() -> std::optional<AfterFailure> {
    if (!lost_connection) return std::nullopt;
    return resume_same_nodes(options, failed, link_resumes_left);
  };
  // Only a node that does not answer can be lost; any other failure fails the job as it is.
  std::vector<std::string> silent = silent_nodes(plan, options);
  if (silent.empty()) return resume_link();

  // The tracker decides that a node is gone: no heartbeat for its expiry. A node that answers
  // again meanwhile was not gone (its connection was). A tracker that does not answer (it
  // restarts: the relay it is may be what the job lost) is asked again every 0.5 s for up to
  // kTrackerGraceSeconds, the silent nodes asked again meanwhile.
  const auto security = wire::make_transport_security(options.secret, options.insecure);
  tracker::PoolSnapshot pool;
  std::optional<AfterFailure> resumed;
  bool tracker_silence_said = false;
  // Between tries: Ctrl-C, or the silent nodes answering again after a lost connection.
  auto stop_waiting = [&]() {
    if (interrupted && interrupted()) return true;
    if (!lost_connection) return false;
    silent = silent_nodes(plan, options);
    if (!silent.empty()) return false;
    resumed = resume_link();
    return true;
  };
  auto read_pool = [&]() {
    return read_pool_patiently(options, security, pool, tracker_silence_said, stop_waiting);
  };
  if (!read_pool()) return resumed;
  const double wait = pool.expiry_seconds + 5;
  const std::string who = names_of(silent);
  std::vector<std::string> heartbeating = still_registered(silent, pool);
  if (!heartbeating.empty()) {
    log("elastic: job " + std::to_string(failed.job_id) + " failed with no cluster left (" +
        who + (silent.size() == 1 ? " does" : " do") + " not answer); waiting up to " +
        std::to_string(static_cast<int>(wait)) + " s for tracker " + options.tracker +
        " to expire " + (silent.size() == 1 ? "it" : "them") +
        (lost_connection ? " or for every node to answer again" : ""));
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(wait);
    while (!heartbeating.empty() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      if (stop_waiting() || !read_pool()) return resumed;
      heartbeating = still_registered(silent, pool);
    }
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
  return AfterFailure{said, true};
}

}  // namespace ravnest::requester
