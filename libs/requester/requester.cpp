// Requester: the façade over Requester::Impl (requester_impl.h) — the plan, its nodes' servers,
// stopping a job everywhere. A job's run is in job_run.cpp, following it in job_watch.cpp, the
// calls to one node in node_calls.cpp.
#include "libs/requester/requester.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "libs/base/clock.h"
#include "libs/config/plan/plan_file.h"
#include "libs/config/plan/plan_layout.h"
#include "libs/requester/requester_impl.h"

namespace ravnest::requester {

using base::now_seconds;

std::vector<int> Plan::cluster_ids() const {
  std::set<int> ids;
  for (const auto& n : nodes) {
    if (n.cluster >= 0) ids.insert(n.cluster);  // a parameter server's servers and evaluator: -1
  }
  return {ids.begin(), ids.end()};
}

std::vector<config::NodeMetadata> Plan::cluster(int id) const {
  std::vector<config::NodeMetadata> out;
  for (const auto& n : nodes) {
    if (n.cluster == id) out.push_back(n);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.position < b.position; });
  return out;
}

Plan load_plan(const std::string& dir) {
  Plan plan;
  plan.dir = dir;
  const config::PlanLayout layout(dir);
  const std::string plan_path = layout.plan_file();
  config::PlanFile file;
  try {
    file = config::load_plan_file(plan_path);
  } catch (const std::exception& e) {
    throw std::runtime_error(plan_path + ": no readable plan (run `ravnest clusterize`): " +
                             e.what());
  }
  for (int id : file.node_ids()) plan.nodes.push_back(config::load_node_metadata(layout.node_file(id)));
  return plan;
}

std::optional<uint64_t> Requester::Impl::hold_at_boundary(uint64_t job_id,
                                                         double timeout_seconds,
                                                         const std::set<int>& skip) {
  // Holding is what an interruption asks for: it is not itself interrupted.
  auto interrupted = std::exchange(interrupted_, nullptr);
  struct Restore {
    Impl& impl;
    std::function<bool()>& interrupted;
    ~Restore() { impl.interrupted_ = std::move(interrupted); }
  } restore{*this, interrupted};
  std::vector<config::NodeMetadata> roots;
  for (const auto& meta : plan_.nodes) {
    // A parameter server applies every worker's gradients as they come: no update count is the
    // same on every node, so such a plan stops as after a failure.
    if (meta.role == config::Role::kServer || meta.role == config::Role::kEvaluator) return {};
    if (meta.position == 0 && !skip.count(meta.cluster)) roots.push_back(meta);
  }
  const double deadline = now_seconds() + timeout_seconds;
  try {
    if (job_id == 0) {
      for (const auto& root : roots) {
        const auto s = status_of(root, 5);
        if (s.state == wire::NodeState::kTraining) job_id = s.job_id;
      }
      if (job_id == 0) return {};
    }
    auto hold = [&](const config::NodeMetadata& root, uint64_t target) -> std::optional<uint64_t> {
      auto request = node(root).holdRequest();
      request.setJobId(job_id);
      request.setTarget(target);
      auto response = await(request.send(), root, "hold", 5);
      if (!response.getHolds()) return std::nullopt;
      return response.getUpdates();
    };
    // Each root's nearest boundary, then the furthest of them for all: a cluster's rings need
    // every cluster at each update up to it.
    std::map<std::string, uint64_t> held;
    uint64_t boundary = 0;
    for (const auto& root : roots) {
      const auto at = hold(root, 0);
      if (!at) return {};  // this job does not run there (any longer)
      held[root.name] = *at;
      boundary = std::max(boundary, *at);
    }
    for (const auto& root : roots) {
      if (held[root.name] < boundary) hold(root, boundary);
    }
    while (true) {
      bool reached = true;
      for (const auto& meta : plan_.nodes) {
        if (skip.count(meta.cluster)) continue;
        const auto s = status_of(meta, 5);
        if (s.job_id == job_id && s.state == wire::NodeState::kTraining && s.updates < boundary) {
          reached = false;
          break;
        }
      }
      if (reached) return boundary;
      if (now_seconds() > deadline) return {};
      timer().afterDelay(20 * kj::MILLISECONDS).wait(wait_scope());
    }
  } catch (const NodeCallError&) {
    return {};  // the stop names the node that does not answer
  }
}

std::vector<std::string> Requester::Impl::stop_all(const std::string& reason, uint64_t job_id,
                                                   double timeout_seconds) {
  // Stopping is what an interruption asks for: it is not itself interrupted.
  auto interrupted = std::exchange(interrupted_, nullptr);
  std::vector<std::string> failures;
  for (const auto& meta : plan_.nodes) {
    auto stop_once = [&](double timeout_seconds) {
      auto request = node(meta).stopRequest();
      request.setReason(reason);
      request.setJobId(job_id);
      await(request.send().ignoreResult(), meta, "stop", timeout_seconds);
    };
    try {
      stop_once(timeout_seconds);
    } catch (const NodeCallError& e) {
      if (!e.disconnected) {
        failures.push_back(e.what());
        continue;
      }
      // The failure dropped the connection: a daemon started again on its port is reached over a
      // new one. A frozen daemon cannot be (TLS and the gate need it awake): it learns of the
      // stop from its peers once it runs again (PeerWatch), so a short try is enough.
      try {
        stop_once(1);
      } catch (const std::exception& again) {
        failures.push_back(again.what());
      }
    }
  }
  interrupted_ = std::move(interrupted);
  return failures;
}

TrainInterrupted::TrainInterrupted(uint64_t id, std::vector<std::string> failed,
                                   std::string node_stopped, std::optional<uint64_t> after)
    : std::runtime_error((node_stopped.empty() ? std::string("interrupted") : node_stopped) +
                         ": job " + std::to_string(id) + " stopped"),
      job_id(id),
      not_stopped(std::move(failed)),
      stopped_by(std::move(node_stopped)),
      boundary(after) {}

TrainFailed::TrainFailed(const std::string& what, uint64_t id, uint64_t started_as)
    : std::runtime_error(what), job_id(id), metrics_job(started_as) {}

Requester::Requester(Plan plan, const std::string& secret, bool insecure)
    : impl_(std::make_unique<Impl>(std::move(plan), secret, insecure)) {}
Requester::~Requester() = default;

std::vector<std::string> Requester::stop_all(const std::string& reason, uint64_t job_id,
                                             double timeout_seconds) {
  impl_->hold_at_boundary(job_id, 60);
  return impl_->stop_all(reason, job_id, timeout_seconds);
}

std::optional<uint64_t> Requester::hold(uint64_t job_id, double timeout_seconds) {
  return impl_->hold_at_boundary(job_id, timeout_seconds);
}

void Requester::check_finished(int cluster) {
  const auto nodes = impl_->plan_.cluster(cluster);
  if (nodes.empty()) throw std::runtime_error("no cluster " + std::to_string(cluster) + " in the plan");
  check_finished(nodes);
}

std::vector<config::NodeMetadata> Requester::servers() const {
  std::vector<config::NodeMetadata> out;
  for (const auto& meta : impl_->plan_.nodes) {
    if (meta.role == config::Role::kServer) out.push_back(meta);
  }
  return out;
}

void Requester::check_finished(const std::vector<config::NodeMetadata>& nodes) {
  for (const auto& meta : nodes) {
    const std::string who = meta.name + " (" + meta.address + ")";
    const auto s = impl_->status_of(meta, 5);
    if (!s.has_stage || !base::same_sha256(s.stage_sha256, meta.stage_sha256)) {
      throw std::runtime_error(who + ": does not hold the plan's stage; run `ravnest push`, then "
                               "`ravnest train`");
    }
    const std::string job = "job " + std::to_string(s.job_id);
    std::string why;
    switch (s.state) {
      case wire::NodeState::kFinished: continue;
      case wire::NodeState::kFailed: why = "its last " + job + " failed: " + s.error; break;
      case wire::NodeState::kTraining: why = job + " is still running"; break;
      case wire::NodeState::kReady: why = job + " was loaded but never started"; break;
      case wire::NodeState::kIdle:
        why = s.job_id ? "its last " + job + " did not finish: " + s.error
                       : "no job has run since its stage was pushed";
        break;
    }
    throw std::runtime_error(who + ": " + why +
                             "; `ravnest fuse --allow-unfinished` takes the weights as they are");
  }
}

}  // namespace ravnest::requester
