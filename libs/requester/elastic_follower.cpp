#include "libs/requester/elastic_follower.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <stdexcept>
#include <vector>

#include "libs/base/clock.h"
#include "libs/config/pool/node_pool.h"
#include "libs/requester/following_marker.h"
#include "libs/requester/joining.h"
#include "libs/requester/replacement.h"
#include "libs/requester/requester.h"
#include "libs/tracker/elastic_choice.h"
#include "libs/tracker/tracker_client.h"
#include "libs/wire/transport_security.h"

namespace ravnest::requester {

namespace fs = std::filesystem;

namespace {

// CSV's quoting: the field in double quotes, each double quote doubled.
std::string quoted(const std::string& field) {
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// The stage's memory need as planned: the measured peak (a daemon's baseline included) when the
// plan has it, else the planner's estimate.
uint64_t need_bytes(const config::NodeMetadata& meta) {
  const auto& e = meta.estimates;
  if (e.peak_memory_bytes > 0) return static_cast<uint64_t>(e.peak_memory_bytes);
  return e.memory_bytes > 0 ? static_cast<uint64_t>(e.memory_bytes) : 0;
}

// Appends one row to <plan>/metrics/job_<job>/elastic.csv (the header first in a new file). A
// job whose train writes no metrics folder gets none; a file that cannot be written is said.
void record_change(const std::string& plan_dir, uint64_t job, const std::string& kind,
                   const std::string& lost, const std::string& joined, int cluster,
                   const std::string& line, const std::function<void(const std::string&)>& log) {
  const fs::path dir = fs::path(plan_dir) / "metrics" / ("job_" + std::to_string(job));
  if (!fs::is_directory(dir)) return;
  const fs::path path = dir / "elastic.csv";
  const bool fresh = !fs::exists(path) || fs::file_size(path) == 0;
  std::ofstream out(path, std::ios::app);
  if (fresh) out << "wall_time,job,kind,lost,replacement,cluster,line\n";
  out << elastic_csv_row(base::seconds_since_epoch(), job, kind, lost, joined, cluster, line);
  out.flush();
  if (!out) log("warning: " + path.string() + ": cannot write the elastic change");
}

}  // namespace

std::string elastic_csv_row(double wall_time, uint64_t job_id, const std::string& kind,
                            const std::string& lost, const std::string& replacement, int cluster,
                            const std::string& line) {
  char time[64];
  std::snprintf(time, sizeof time, "%.3f", wall_time);
  return std::string(time) + "," + std::to_string(job_id) + "," + kind + "," + lost + "," +
         replacement + "," + std::to_string(cluster) + "," + quoted(line) + "\n";
}

uint64_t stage_need_bytes(const config::NodeMetadata& meta) { return need_bytes(meta); }

void record_elastic_change(const std::string& plan_dir, uint64_t job, const std::string& kind,
                           const std::string& lost, const std::string& replacement, int cluster,
                           const std::string& line,
                           const std::function<void(const std::string&)>& log) {
  record_change(plan_dir, job, kind, lost, replacement, cluster, line, log);
}

ElasticFollower::ElasticFollower(ElasticOptions options) : options_(std::move(options)) {
  thread_ = std::thread([this] { run(); });
}

ElasticFollower::~ElasticFollower() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void ElasticFollower::run() {
  const auto& log = options_.log;
  std::shared_ptr<wire::TransportSecurity> security;
  try {
    security = wire::make_transport_security(options_.secret, options_.insecure);
  } catch (const std::exception& e) {
    log(std::string("elastic: off: ") + e.what());
    return;
  }
  bool tracker_silent = false;  // said once, and once when it answers again
  const auto poll = std::chrono::duration<double>(options_.poll_seconds);
  while (!stop_) {
    const auto wake = std::chrono::steady_clock::now() + poll;
    while (!stop_ && std::chrono::steady_clock::now() < wake) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (stop_) break;
    const auto following = read_following(options_.plan_dir);
    if (!following) continue;  // the job is not followed yet (or any more)
    if (seen_.metrics_job == 0) seen_.metrics_job = following->job_id;

    tracker::PoolSnapshot pool;
    std::map<std::string, tracker::Member> live;  // the pool's members by name, once a poll
    try {
      pool = tracker::fetch_pool(options_.tracker, security, 5);
      live = tracker::members_of(pool);
      std::map<std::string, std::string> addresses;
      for (const auto& [name, member] : live) {
        if (!member.registration.addresses.empty()) {
          addresses[name] = member.registration.addresses.front();
        }
      }
      {
        std::lock_guard<std::mutex> lock(live_mutex_);
        live_addresses_ = std::move(addresses);
      }
      if (tracker_silent) log("elastic: tracker " + options_.tracker + " answers again");
      tracker_silent = false;
    } catch (const std::exception& e) {
      // A tracker restarting (its state on disk) answers again within seconds; meanwhile nothing
      // is decided and the job trains on. Its errors may change while it is down: said once.
      if (!tracker_silent) {
        log("elastic: tracker " + options_.tracker + " does not answer (" + e.what() +
            "); the job goes on, asked again every " +
            std::to_string(static_cast<int>(options_.poll_seconds)) + " s");
      }
      tracker_silent = true;
      continue;
    }
    Plan plan;
    try {
      plan = load_plan(options_.plan_dir);
    } catch (const std::exception& e) {
      continue;  // plan.json is rewritten atomically: read again at the next poll
    }
    follow_pool(plan, pool, live, *following);
  }
}

std::map<std::string, std::string> ElasticFollower::live_addresses() const {
  std::lock_guard<std::mutex> lock(live_mutex_);
  return live_addresses_;
}

void ElasticFollower::follow_pool(const Plan& plan, const tracker::PoolSnapshot& pool,
                                  const std::map<std::string, tracker::Member>& live,
                                  const Following& following) {
  std::map<std::string, tracker::Member> idle;
  for (const auto& [name, member] : live) {
    if (!seen_.failed.count(name)) idle.emplace(name, member);
  }
  std::set<std::string> in_plan;
  for (const auto& meta : plan.nodes) in_plan.insert(meta.name);
  if (!seen_.spares_known) {
    for (const auto& [name, member] : live) {
      if (!in_plan.count(name)) seen_.spares.insert(name);
    }
    seen_.spares_known = true;
  }
  std::vector<tracker::PlannedNode> planned;
  std::vector<std::string> lost;
  for (const auto& meta : plan.nodes) {
    planned.push_back({meta.name, meta.cluster, need_bytes(meta)});
    if (live.count(meta.name) || seen_.decided.count(meta.name)) continue;
    if (seen_.dropped_for_good.count(meta.cluster)) continue;
    if (following.dropped.count(meta.cluster)) {
      lost.push_back(meta.name);
    } else if (seen_.said_training.insert(meta.name).second) {
      // The tracker lost it, the requester still hears from it: it goes on training, and its
      // cluster is dropped (then decided on here) only when the requester loses it too.
      // A plan of one cluster is never dropped: losing it fails the job, which
      // replace_after_failure (elastic_resume.h) then takes up.
      bool one_cluster = true;
      for (const auto& other : plan.nodes) one_cluster = one_cluster && other.cluster == meta.cluster;
      options_.log("elastic: " + meta.name + " has no heartbeat at tracker " + options_.tracker +
                   (one_cluster ? "; the job trains with it until the job's requester loses it "
                                  "(then an idle node takes its place and the job resumes)"
                                : "; cluster " + std::to_string(meta.cluster) +
                                      " trains with it until the job's requester drops it"));
    }
  }
  if (lost.empty()) {
    join_newcomers(plan, pool, live, in_plan, following);
  } else {
    replace_lost(tracker::choose_elastic_changes(planned, lost, idle), pool);
  }
}

void ElasticFollower::replace_lost(const std::vector<tracker::ElasticChange>& changes,
                                   const tracker::PoolSnapshot& pool) {
  const auto& log = options_.log;
  const std::string origin = "tracker " + options_.tracker;
  const std::string why =
      "no heartbeat for " + std::to_string(static_cast<int>(pool.expiry_seconds)) + " s";
  for (const auto& change : changes) {
    if (change.kind == tracker::ElasticChange::Kind::drop_cluster) {
      // The requester dropped the cluster already, as a manual drop leaves it.
      const std::string line = change.line(why) + "; the others train on";
      log(line);
      record_change(options_.plan_dir, seen_.metrics_job, "drop_cluster", change.lost, "",
                    change.cluster, line, log);
      seen_.dropped_for_good.insert(change.cluster);
      seen_.decided.insert(change.lost);
      continue;
    }
    try {
      const auto spares =
          config::parse_node_pool(tracker::pool_file_json(pool), origin, /*toml=*/false);
      const config::NodeConfig& spare = config::pool_node(spares, change.replacement, origin);
      replace_node(
          options_.plan_dir, options_.secret, change.lost, spare,
          [&log](const std::string& said) { log("elastic: " + said); }, options_.insecure);
    } catch (const std::exception& e) {
      log("elastic: " + change.replacement + " could not take " + change.lost + "'s place: " +
          e.what() + "; another idle node is tried at the next poll");
      seen_.failed.insert(change.replacement);
      continue;
    }
    const std::string line = change.line(why) + ", which rejoins at the next update boundary";
    log(line);
    record_change(options_.plan_dir, seen_.metrics_job, "replace", change.lost,
                  change.replacement, change.cluster, line, log);
    seen_.decided.insert(change.lost);
  }
}

// Nodes that registered while the job runs (not idle at its start: those stay spares), enough for
// one more cluster cut like the first cluster still training, join it through join_nodes, as
// `ravnest join NODE... --like C` does while a followed job runs; the job's requester takes the
// cluster in at the next update boundary. A join that fails is said; its nodes are not tried again.
void ElasticFollower::join_newcomers(const Plan& plan, const tracker::PoolSnapshot& pool,
                                     const std::map<std::string, tracker::Member>& live,
                                     const std::set<std::string>& in_plan,
                                     const Following& following) {
  const auto& log = options_.log;
  std::map<std::string, tracker::Member> newcomers;
  for (const auto& [name, member] : live) {
    if (!in_plan.count(name) && !seen_.spares.count(name) && !seen_.failed.count(name)) {
      newcomers.emplace(name, member);
    }
  }
  if (newcomers.empty()) return;
  int like = -1;
  for (const int id : plan.cluster_ids()) {
    if (!following.dropped.count(id)) {
      like = id;
      break;
    }
  }
  if (like < 0) return;
  std::vector<uint64_t> needs;
  for (const auto& meta : plan.cluster(like)) needs.push_back(need_bytes(meta));
  const auto chosen = tracker::choose_join(needs, newcomers);
  if (chosen.empty()) return;  // not enough yet: more may register
  const std::string origin = "tracker " + options_.tracker;
  try {
    const auto pool_nodes =
        config::parse_node_pool(tracker::pool_file_json(pool), origin, /*toml=*/false);
    std::vector<config::NodeConfig> joining;
    for (const auto& name : chosen) joining.push_back(config::pool_node(pool_nodes, name, origin));
    const Joining joined = join_nodes(
        options_.plan_dir, options_.secret, joining, like,
        [&log](const std::string& said) { log("elastic: " + said); }, options_.insecure);
    const std::string line = tracker::join_line(chosen, joined.joined.cluster);
    log(line);
    std::string names;
    for (const auto& name : chosen) names += (names.empty() ? "" : ";") + name;
    record_change(options_.plan_dir, seen_.metrics_job, "join", "", names, joined.joined.cluster,
                  line, log);
  } catch (const std::exception& e) {
    std::string names;
    for (const auto& name : chosen) names += (names.empty() ? "" : ", ") + name;
    log("elastic: " + names + " could not join: " + e.what());
    seen_.failed.insert(chosen.begin(), chosen.end());
  }
}

std::optional<GracefulLeave> graceful_leave(const std::string& stopped_by) {
  // libs/daemon/job/agreed_stop.cpp's words: "<node> was stopped (<signal>)".
  std::smatch said;
  if (!std::regex_search(stopped_by, said,
                         std::regex("^(node_[0-9]+) was stopped \\(([A-Z]+)\\)"))) {
    return std::nullopt;
  }
  return GracefulLeave{said[1].str(), said[2].str()};
}

std::optional<std::string> hand_over(const ElasticOptions& options, const std::string& stopped_by,
                                     uint64_t job_id, uint64_t boundary) {
  const auto leave = graceful_leave(stopped_by);
  if (!leave) return std::nullopt;
  const std::string& node = leave->node;
  const std::string& signal = leave->signal;
  const Plan plan = load_plan(options.plan_dir);
  std::vector<tracker::PlannedNode> planned;
  for (const auto& meta : plan.nodes) planned.push_back({meta.name, meta.cluster, need_bytes(meta)});
  const auto security = wire::make_transport_security(options.secret, options.insecure);
  const auto pool = tracker::fetch_pool(options.tracker, security, 5);
  std::map<std::string, tracker::Member> live = tracker::members_of(pool);
  live.erase(node);  // it left, or will within seconds
  const auto changes = tracker::choose_elastic_changes(planned, {node}, live);
  if (changes.empty()) return std::nullopt;  // not a node of the plan
  const auto& change = changes.front();
  const std::string why = "left (" + signal + ") after update " + std::to_string(boundary);
  if (change.kind != tracker::ElasticChange::Kind::replace) {
    options.log("elastic: " + node + " " + why + "; no idle node fits: the job stays stopped");
    return std::nullopt;
  }
  const std::string origin = "tracker " + options.tracker;
  const auto spares = config::parse_node_pool(tracker::pool_file_json(pool), origin, false);
  replace_node(
      options.plan_dir, options.secret, node, config::pool_node(spares, change.replacement, origin),
      [&options](const std::string& line) { options.log("elastic: " + line); }, options.insecure);
  const std::string line = "elastic: " + node + " " + why + "; " + change.replacement +
                           " takes its place in cluster " + std::to_string(change.cluster) +
                           ", the job resumes from there";
  options.log(line);
  record_change(options.plan_dir, job_id, "handover", node, change.replacement, change.cluster,
                line, options.log);
  return line;
}

}  // namespace ravnest::requester
