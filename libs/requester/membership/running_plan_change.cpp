// A followed job takes in the clusters plan.json gained while it ran
// (docs/faults.md#providers-that-come-and-go): a dropped cluster that `ravnest replace` gave a
// node again (it rejoins: only `ravnest train --drop-failed-clusters` drops one), or a cluster
// `ravnest join` added (it joins). The `ravnest train` that follows the job looks at plan.json
// at every poll; which clusters
// come in and from which cluster each starts is membership::admit_clusters. With `train
// --elastic` (TrainOptions::link_rejoins) a cluster dropped on a lost connection comes in too,
// plan.json unchanged, once its own nodes answer again (link_rejoin.h; admit_on_link), each
// where the tracker's live pool has it when that changed (a relay that died and was swapped:
// the plan, node files included, moves it there). Then:
//
// 1. the roots of the clusters still training hold at one update boundary U (hold_at_boundary),
//    and those clusters stop there, each node writing its checkpoint of update U;
// 2. the requester takes the new plan, gives every node whose metadata changed its new metadata
//    (the ring neighbours, and with a joined cluster every node: one more shard of the data),
//    and copies each stage's checkpoint of update U from the source cluster to the slot of that
//    stage in each cluster taken in;
// 3. every cluster loads the job from update U (resumeFrom = U, a new job id) and starts; the
//    rings' membership is the plan's again. A dropped cluster not taken in (not replaced yet, or
//    for good) stays dropped: its nodes are neither loaded nor started, and the others get their
//    rings without it (epoch 1) before any starts. A rejoin keeps the job's identity (the same slots);
//    a join changes it (one more cluster's slots), and the nodes resume from the checkpoints of
//    the identity they were written under (loadJob's resumeIdentity).
//
// Exact: from U on it is the run of all clusters resumed from U, each cluster taken in with the
// weights, optimizer state, LR step, random state and ring round counter of its source (with
// reduce = "parameters" every update those weights are every cluster's). A rejoining cluster reads
// its own shard from batch U on. A join deals the data into one more shard: from U on every
// cluster reads shard c of N + 1 at the position batch U has in that dealing (epoch B / per
// epoch, batch B % per epoch, B = U * update_frequency), as if the plan had always had N + 1
// clusters; the job's end in updates is that of N + 1 clusters (or max_steps). The epoch of the
// join sees some samples twice and others not at all; the later epochs are whole passes. Not a
// round-level change: every cluster pauses for the stop and the load (seconds).
//
// Long because: the take-in's steps (what comes in, by plan.json or after a lost connection; the
// hold; the copies; the reload) share the state of one TakeIn, which this file keeps private.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <utility>

#include "libs/base/atomic_file.h"
#include "libs/base/clock.h"
#include "libs/membership/cluster_admission.h"
#include "libs/config/plan/plan_layout.h"
#include "libs/requester/checkpoint_copy.h"
#include "libs/requester/elastic_follower.h"
#include "libs/requester/following_marker.h"
#include "libs/requester/job_identity.h"
#include "libs/requester/link_rejoin.h"
#include "libs/requester/requester_impl.h"
#include "libs/training/checkpoint.h"
#include "libs/training/job_length.h"
#include "libs/training/schedule.h"

namespace ravnest::requester {

namespace fs = std::filesystem;

namespace {

std::string cluster_words(const std::vector<int>& clusters) {
  std::string all;
  for (int c : clusters) all += (all.empty() ? "" : ", ") + std::to_string(c);
  return (clusters.size() > 1 ? "clusters " : "cluster ") + all;
}

// The nodes of `now` whose metadata differs from `before`'s. A node new to the plan is not one:
// it got its stage and metadata from `replace` or `join`.
std::vector<config::NodeMetadata> changed_metadata(const Plan& before, const Plan& now) {
  std::map<int, std::string> old_json;
  for (const auto& m : before.nodes) old_json[m.node_id] = config::to_json(m);
  std::vector<config::NodeMetadata> changed;
  for (const auto& m : now.nodes) {
    auto it = old_json.find(m.node_id);
    if (it != old_json.end() && it->second != config::to_json(m)) changed.push_back(m);
  }
  return changed;
}

// Each stage's checkpoint of update `updates` copied from the source cluster to the slot of that
// stage in each cluster `taken` in, made the slot's own (a checkpoint names its slot, and a node
// resumes only its own); the source's losses and validation rounds are not the new leaf's: its
// losses.txt holds the batches it trains from there on. A cluster of `admission.recut`, cut at
// other points than its source, gets the source's checkpoints re-cut to its stages.
void adopt_checkpoints(Requester& requester, const Plan& now, const std::string& identity,
                       uint64_t updates, const std::vector<int>& taken,
                       const membership::ClusterAdmission& admission,
                       const config::OptimizerSpec& optimizer) {
  const auto& source = admission.source;
  for (int c : taken) {
    if (admission.recut.count(c)) {
      copy_recut_checkpoints(requester, now, identity, updates, source.at(c), c, optimizer);
      continue;
    }
    std::map<int, config::NodeMetadata> source_at;  // by position
    for (const auto& m : now.cluster(source.at(c))) source_at[m.position] = m;
    for (const auto& m : now.cluster(c)) {
      const auto& from = source_at.at(m.position);
      copy_checkpoint(requester, now.dir, identity, updates, {from, from.cluster, from.position},
                      {m, m.cluster, m.position}, [&m](const std::string& path) {
                        training::StageCheckpoint adopted = training::load_checkpoint(path);
                        adopted.cluster = m.cluster;
                        adopted.position = m.position;
                        adopted.losses.clear();
                        adopted.validation.clear();
                        training::save_checkpoint(adopted, path);
                      });
    }
  }
}

}  // namespace

// take_in_clusters' steps, one object a look at plan.json: what it now says, which clusters
// come in, and the hold, copy and reload that take them in. Calling thread (the follower's).
class Requester::TakeIn {
 public:
  TakeIn(Requester& requester, const std::shared_ptr<Watch>& watch, uint64_t job_id,
         const config::JobSpec& job, const std::string& job_text, int64_t train_samples,
         const Log& log)
      : requester_(requester), impl_(*requester.impl_), watch_ptr_(watch), watch_(*watch),
        job_id_(job_id), job_(job), job_text_(job_text), train_samples_(train_samples),
        log_(log) {}

  // Whether plan.json (compared with `*plan_json`, updated once it was looked at) brings
  // clusters in now; said on the log when they come, or once why not yet.
  bool admit(std::string* plan_json);
  // Whether clusters dropped on a lost connection come back with their own nodes now
  // (link_rejoin.h): each said on the log with a row of elastic.csv (kind rejoin_link).
  bool admit_on_link();
  // 1. The others hold at one update boundary U and stop there, each writing its checkpoint;
  // returns U. 0 (said on the log) when every node of the clusters still training finished the
  // job instead: nothing comes in, the job ends as it was. Throws when they reach no boundary
  // within 60 s otherwise.
  uint64_t hold_and_stop();
  // A joining cluster's reason not to come in at `boundary` (training::join_too_late), or "".
  std::string too_late(uint64_t boundary) const;
  bool rejoins() const { return !admission_.rejoining.empty(); }
  const std::vector<int>& rejoining_clusters() const { return admission_.rejoining; }
  // Every node of the running plan loads the job from update `updates` as a new job, followed
  // as the job was; returns its id.
  uint64_t resume_as_it_was(const std::string& identity, uint64_t updates);
  // 2. and 3. The new plan, the checkpoints of update `updates` copied to the slots taken in,
  // and every cluster resumed from there; `*identity` becomes the grown plan's. Returns the id.
  uint64_t resume_grown(std::string* identity, uint64_t updates);
  std::string who() const { return cluster_words(taken_); }
  int grown() const { return static_cast<int>(now_.cluster_ids().size()); }

 private:
  bool wait(const std::string& why);  // said once; false
  // Why a node of `cluster`, dropped from job `dropped_job` on a lost connection, cannot come
  // back now, or "". A node that answers again still on that job (its stop did not reach it) is
  // stopped now, as the drop would have: it comes back at a later look. Each is asked at
  // address_to_ask; one that fits at another address than the plan's is noted in `moved_`. One
  // asked elsewhere must show there the certificate the plan pins for it (when it pins one).
  std::string not_back(int cluster, uint64_t dropped_job);
  // The nodes of clusters coming `back` that answered at a new address: the plan moved there
  // (now_), noted for say_moved. Returns why not, in one line, when one cannot move (the plan
  // has another node there): now_ then is unchanged.
  std::string move_answered(const std::vector<int>& back);
  // Each node moved: one line and a row of elastic.csv (kind moved), once the rejoin is decided.
  void say_moved() const;
  std::string taken_node_busy();      // why a node taken in cannot come yet, or ""
  bool training_finished();           // every node of the clusters still training finished
  void say_coming() const;
  uint64_t load_from_boundary(const std::string& next_identity,
                              const std::string& resume_identity, uint64_t updates);
  void start_followed(uint64_t next_id);
  // A node of a cluster going on that failed a call while the job resumes as `next_id` (`why`
  // names the node and the call; Impl::NodeFailure): while the followed job drops failed
  // clusters and another cluster is left, its cluster is dropped and the take-in goes on without
  // it (a node lost between the hold and the start fails one call, not the job); else false,
  // and the take-in fails. Dropped with drop_cluster once the ring members were told that the
  // requester coordinates them (`coordinated`: they may have started), else left out before
  // anything started. Said with the update the job resumed after.
  bool go_on_without(const config::NodeMetadata& meta, const std::string& why, uint64_t next_id,
                     bool coordinated);
  // go_on_without as the take-in's calls to the nodes take it (Impl::NodeFailure).
  Impl::NodeFailure going_on_without(uint64_t next_id, bool coordinated) {
    return [this, next_id, coordinated](const config::NodeMetadata& meta, const NodeCallError& e) {
      return go_on_without(meta, e.what(), next_id, coordinated);
    };
  }
  void say_taken_in(uint64_t updates, uint64_t next_id) const;
  // ", re-cut to its stages" for a cluster whose source is cut at other points, else nothing.
  std::string recut_words(int c) const {
    return admission_.recut.count(c) ? ", re-cut to its stages" : "";
  }

  Requester& requester_;
  Impl& impl_;
  const std::shared_ptr<Watch>& watch_ptr_;
  Watch& watch_;
  const uint64_t job_id_;
  const config::JobSpec& job_;
  const std::string& job_text_;
  const int64_t train_samples_;
  const Log& log_;
  Plan now_;
  membership::ClusterAdmission admission_;
  std::vector<int> taken_;
  std::map<int, std::string> moved_;  // node id -> the address it answered at (not the plan's)
  // The nodes moved (as the plan had them) and where to, said by say_moved.
  std::vector<std::pair<config::NodeMetadata, std::string>> moving_;
  double paused_ = 0;
  uint64_t resumed_after_ = 0;  // the update the job resumes after, once the hold found it
};

bool Requester::TakeIn::wait(const std::string& why) {
  // Not yet: plan.json is read again at the next poll, and each wait is said once.
  if (log_ && requester_.waiting_for_ != why) log_("warning: " + why);
  requester_.waiting_for_ = why;
  return false;
}

bool Requester::TakeIn::admit(std::string* plan_json) {
  const config::PlanLayout layout(impl_.plan_.dir);
  std::string text;
  try {
    text = base::read_file(layout.plan_file());
  } catch (const std::exception&) {
    return false;
  }
  if (text == *plan_json) return false;
  try {
    now_ = load_plan(impl_.plan_.dir);
  } catch (const std::exception&) {
    // Half-written by a replace or join that goes on (plan.json is written last): the next poll.
    return false;
  }
  admission_ = membership::admit_clusters(impl_.plan_.nodes, now_.nodes, watch_.dropped);
  if (!admission_.wait.empty()) return wait(admission_.wait);
  if (admission_.empty()) {
    *plan_json = text;
    return false;
  }
  taken_ = admission_.rejoining;
  taken_.insert(taken_.end(), admission_.joining.begin(), admission_.joining.end());
  const std::string busy = taken_node_busy();
  if (!busy.empty()) return wait(busy);
  // A join whose boundary lies at or past where the grown job ends is not taken in: said once,
  // and the job goes on as it was. Seen already from the batches the clusters reported (the
  // boundary is at least theirs), then for sure at the hold (too_late).
  if (!rejoins()) {
    uint64_t reported = 0;
    for (const auto& [c, p] : watch_.progress) {
      if (!watch_.dropped.count(c)) reported = std::max(reported, p.batches);
    }
    const auto why =
        too_late(training::updates_after(reported, job_.train.update_frequency, false));
    if (!why.empty()) {
      *plan_json = text;
      if (log_) log_(why);
      return false;
    }
  }
  *plan_json = text;
  say_coming();
  return true;
}

std::string Requester::TakeIn::not_back(int cluster, uint64_t dropped_job) {
  const auto live = requester_.live_addresses_ ? requester_.live_addresses_()
                                               : std::map<std::string, std::string>{};
  std::map<int, std::string> asked_elsewhere;  // id -> address: not the plan's
  for (auto m : impl_.plan_.cluster(cluster)) {
    const std::string planned = m.address;
    m.address = address_to_ask(m, live);
    if (m.address != planned) {
      // The same daemon, moved: it shows there the certificate pinned for it, if any.
      asked_elsewhere[m.node_id] = m.address;
      impl_.pin_certificates(asked_elsewhere);
    }
    try {
      const auto s = impl_.status_of(m, 2);
      if (s.state != wire::NodeState::kTraining && s.state != wire::NodeState::kReady) {
        const std::string why = unfit_for_job(m, s);
        if (!why.empty()) return why;
        if (m.address != planned) moved_[m.node_id] = m.address;
        continue;
      }
      if (s.job_id == dropped_job) {
        auto request = impl_.node(m).stopRequest();
        request.setReason("cluster " + std::to_string(cluster) + " was dropped: its connection "
                          "was lost");
        request.setJobId(dropped_job);
        impl_.await(request.send().ignoreResult(), m, "stop", 2);
      }
      return m.name + " runs job " + std::to_string(s.job_id);
    } catch (const Interrupted&) {
      throw;
    } catch (const std::exception& e) {
      return e.what();  // silent still (or dead: the tracker's expiry, then a replacement)
    }
  }
  return "";
}

bool Requester::TakeIn::admit_on_link() {
  if (watch_.dropped_on_link.empty() || requester_.link_rejoins_ <= 0) return false;
  // At most once a second, one cluster a look (in turn): a node still cut off may cost a status
  // call that waits its 2 s, and the live nodes' polls wait with it.
  if (base::now_seconds() < watch_.link_probe_at) return false;
  watch_.link_probe_at = base::now_seconds() + 1;
  std::map<int, std::string> why_not;
  std::vector<std::pair<int, uint64_t>> to_ask;  // the one after the cluster asked last is asked
  for (const auto& [c, dropped_job] : watch_.dropped_on_link) {
    if (!watch_.dropped.count(c)) continue;
    const auto done = watch_.link_rejoins.find(c);
    if (done != watch_.link_rejoins.end() && done->second >= requester_.link_rejoins_) {
      why_not[c] = "no rejoins left";
    } else {
      to_ask.emplace_back(c, dropped_job);  // ascending, as the map is
    }
  }
  if (!to_ask.empty()) {
    auto next = std::find_if(to_ask.begin(), to_ask.end(),
                             [&](const auto& c) { return c.first > watch_.link_asked_last; });
    if (next == to_ask.end()) next = to_ask.begin();
    watch_.link_asked_last = next->first;
    why_not[next->first] = not_back(next->first, next->second);
  }
  const LinkRejoins choice =
      choose_link_rejoins(why_not, watch_.link_rejoins, requester_.link_rejoins_);
  const std::string most = std::to_string(requester_.link_rejoins_);
  for (int c : choice.given_up) {
    if (watch_.link_given_up.insert(c).second && log_) {
      log_("warning: cluster " + std::to_string(c) + " stays dropped: its connection was lost "
           "again after it came back " + most + " times (at most " + most + "); `ravnest "
           "replace` of its nodes brings it back");
    }
  }
  if (choice.back.empty()) return false;
  now_ = impl_.plan_;
  const std::string unmoved = move_answered(choice.back);
  if (!unmoved.empty()) return wait(unmoved);
  admission_ = membership::admit_clusters(impl_.plan_.nodes, now_.nodes, watch_.dropped,
                                          {choice.back.begin(), choice.back.end()});
  if (!admission_.wait.empty()) return wait(admission_.wait);
  if (admission_.empty()) return false;
  taken_ = admission_.rejoining;
  const std::string busy = taken_node_busy();
  if (!busy.empty()) return wait(busy);
  say_moved();
  for (int c : admission_.rejoining) {
    const int nth = ++watch_.link_rejoins[c];
    std::string names, row_names;  // the row's with ';' between, as a join's
    for (const auto& m : now_.cluster(c)) {
      names += (names.empty() ? "" : ", ") + m.name;
      row_names += (row_names.empty() ? "" : ";") + m.name;
    }
    const std::string line = "elastic: cluster " + std::to_string(c) + " was dropped on a lost "
                             "connection and " + names + (now_.cluster(c).size() > 1 ? " answer"
                                                                                     : " answers") +
                             " again: it rejoins with its own nodes at the next update boundary (" +
                             std::to_string(nth) + " of at most " + most + ")";
    if (log_) log_(line);
    record_elastic_change(impl_.plan_.dir, watch_.metrics_job, "rejoin_link", row_names,
                          row_names, c, line, log_ ? log_ : Log([](const std::string&) {}));
  }
  return true;
}

std::string Requester::TakeIn::move_answered(const std::vector<int>& back) {
  std::vector<std::pair<config::NodeMetadata, std::string>> moving;
  auto nodes = now_.nodes;
  for (const auto& [id, address] : moved_) {
    const config::NodeMetadata& was =
        *std::find_if(impl_.plan_.nodes.begin(), impl_.plan_.nodes.end(),
                      [id = id](const config::NodeMetadata& m) { return m.node_id == id; });
    if (std::find(back.begin(), back.end(), was.cluster) == back.end()) continue;
    try {
      move_node(nodes, id, address);
    } catch (const std::runtime_error& e) {
      return "cluster " + std::to_string(was.cluster) + " waits to come in: " + e.what();
    }
    moving.emplace_back(was, address);
  }
  now_.nodes = std::move(nodes);
  moving_ = std::move(moving);
  return "";
}

void Requester::TakeIn::say_moved() const {
  for (const auto& [was, address] : moving_) {
    const std::string line = "elastic: " + was.name + " answers at " + address + " now (its " +
                             "relay changed; the plan had " + was.address + ")";
    if (log_) log_(line);
    record_elastic_change(impl_.plan_.dir, watch_.metrics_job, "moved", was.name, address,
                          was.cluster, line, log_ ? log_ : Log([](const std::string&) {}));
  }
}

bool Requester::TakeIn::training_finished() {
  // A root that finished refuses the hold while its pipeline's last batch may still be on the
  // way down: a few seconds for every node to say finished.
  for (int tries = 0; tries < 50; ++tries) {
    bool finished = true;
    for (const auto& m : impl_.plan_.nodes) {
      if (watch_.dropped.count(m.cluster)) continue;
      try {
        const auto s = impl_.status_of(m, 5);
        if (s.job_id != job_id_) return false;
        if (s.state == wire::NodeState::kFinished) continue;
        if (s.state != wire::NodeState::kTraining) return false;
        finished = false;
        break;
      } catch (const Interrupted&) {
        throw;
      } catch (const std::exception&) {
        return false;
      }
    }
    if (finished) return true;
    impl_.timer().afterDelay(100 * kj::MILLISECONDS).wait(impl_.wait_scope());
  }
  return false;
}

std::string Requester::TakeIn::taken_node_busy() {
  // The clusters still training hold at the boundary: a node of theirs that died and is not yet
  // dropped (another cluster lost at the same time) would fail the hold. Its cluster is dropped
  // at the requester's next status polls; then this one comes in without it.
  for (const auto& m : impl_.plan_.nodes) {
    if (watch_.dropped.count(m.cluster)) continue;
    try {
      impl_.status_of(m, 2);
    } catch (const Interrupted&) {
      throw;
    } catch (const std::exception& e) {
      return who() + " waits to come in: " + e.what();
    }
  }
  for (int c : taken_) {
    for (const auto& m : now_.cluster(c)) {
      try {
        const auto s = impl_.status_of(m, 2);
        if (s.state == wire::NodeState::kTraining || s.state == wire::NodeState::kReady) {
          return who() + " waits to come in: " + m.name + " runs job " +
                 std::to_string(s.job_id);
        }
      } catch (const Interrupted&) {
        throw;
      } catch (const std::exception& e) {
        return who() + " waits to come in: " + e.what();
      }
    }
  }
  return "";
}

void Requester::TakeIn::say_coming() const {
  if (!log_) return;
  auto node_names = [&](int c) {
    std::string names;
    for (const auto& m : now_.cluster(c)) names += (names.empty() ? "" : ", ") + m.name;
    return names;
  };
  for (int c : admission_.rejoining) {
    log_("cluster " + std::to_string(c) + " rejoins: plan.json names " + node_names(c));
  }
  for (int c : admission_.joining) {
    log_("cluster " + std::to_string(c) + " joins: plan.json names " + node_names(c));
  }
}

std::string Requester::TakeIn::too_late(uint64_t boundary) const {
  for (int c : admission_.joining) {
    auto why = training::join_too_late(c, boundary, train_samples_, grown(), job_.train);
    if (!why.empty()) return why;
  }
  return std::string();
}

uint64_t Requester::TakeIn::hold_and_stop() {
  paused_ = base::now_seconds();
  const auto boundary = impl_.hold_at_boundary(job_id_, 60, watch_.dropped);
  if ((!boundary || *boundary == 0) && training_finished()) {
    // The replacement or join came as the job ended (a short job, a slow replacement): there is
    // no boundary left to come in at, and the job is done; not a failure.
    if (log_) {
      log_(who() + " does not come in: the clusters still training finished the job before an "
                   "update boundary it could come in at");
    }
    return 0;
  }
  if (!boundary || *boundary == 0) {
    throw std::runtime_error(who() + " cannot come in: the clusters still training did not "
                             "reach one update boundary within 60 s");
  }
  // The dropped clusters' nodes may be gone (their failures to stop say nothing); a node still
  // training is found by the status polls of the job that follows.
  impl_.stop_all(who() + (admission_.joining.empty() ? " rejoins" : " joins") + " the job",
                 job_id_, 30);
  return *boundary;
}

uint64_t Requester::TakeIn::load_from_boundary(const std::string& next_identity,
                                               const std::string& resume_identity,
                                               uint64_t updates) {
  // The clusters that stay dropped are left out: their nodes may be gone.
  std::vector<JobShipment> shipments;
  std::map<std::string, std::string> checksums;
  for (const auto& meta : impl_.plan_.nodes) {
    shipments.push_back(job_shipment_for(job_, meta, checksums));
  }
  resumed_after_ = updates;
  const uint64_t next_id =
      std::random_device{}() ^ (static_cast<uint64_t>(std::time(nullptr)) << 20);
  const Impl::NodeFailure before_start = going_on_without(next_id, false);
  impl_.ship_job_files(shipments, log_, watch_.dropped, before_start);
  impl_.load_job(job_text_, next_id, next_identity, updates, shipments, resume_identity,
                 watch_.dropped, before_start);
  return next_id;
}

void Requester::TakeIn::start_followed(uint64_t next_id) {
  watch_.finished.clear();
  watch_.ring_epoch = 0;
  const Impl::NodeFailure before_start = going_on_without(next_id, false);
  // Clusters that stay dropped (and any whose node was lost since the hold) are left out: their
  // nodes may be gone.
  impl_.subscribe(watch_ptr_, log_, watch_.dropped, before_start);
  // Before any node starts, the ring members are told that the requester coordinates the rings
  // (epoch 0; job_run.cpp says why before) and, with clusters left out, given their rings
  // without them (epoch 1), so that no reduce waits for a node that is gone and no node watches
  // one. A plan of one cluster that grew to two has rings to coordinate now.
  if (watch_.drop_requested || !watch_.dropped.empty()) {
    watch_.drop_failed_clusters = impl_.coordinate_rings(next_id, watch_.dropped, before_start);
  }
  if (!watch_.dropped.empty()) {
    impl_.set_live_rings(next_id, ++watch_.ring_epoch, impl_.live_clusters(watch_), {}, log_);
  }
  impl_.start(next_id, watch_.dropped, going_on_without(next_id, watch_.drop_failed_clusters));
  write_following(impl_.plan_.dir, {::getpid(), next_id, watch_.dropped});
}

bool Requester::TakeIn::go_on_without(const config::NodeMetadata& meta, const std::string& failure,
                                      uint64_t next_id, bool coordinated) {
  if (!watch_.drop_requested || meta.cluster < 0 || watch_.dropped.count(meta.cluster)) {
    return false;
  }
  if (impl_.live_clusters(watch_).size() < 2) return false;
  // Said with the update it left at (tests/support/drop_reference.h reads it).
  const std::string why =
      failure + ", when the job resumed after update " + std::to_string(resumed_after_);
  if (coordinated) {
    impl_.drop_cluster(watch_, next_id, meta.cluster, why, log_);
  } else {
    impl_.leave_out_cluster(watch_, next_id, meta.cluster, why, log_);
  }
  return true;
}

uint64_t Requester::TakeIn::resume_as_it_was(const std::string& identity, uint64_t updates) {
  const uint64_t next_id = load_from_boundary(identity, "", updates);
  start_followed(next_id);
  return next_id;
}

uint64_t Requester::TakeIn::resume_grown(std::string* identity, uint64_t updates) {
  // 2. The new plan: metadata where it changed, the checkpoints of update U to the slots taken in.
  const Plan before = impl_.plan_;
  impl_.plan_ = now_;
  impl_.pin_certificates();
  if (!moved_.empty()) {
    // A node moved (link_rejoin.h): the plan directory says so too, for `ravnest fuse`, `resume`
    // and the elastic follower. Each node file is replaced whole (plan.json names no address).
    const config::PlanLayout layout(now_.dir);
    for (const auto& m : changed_metadata(before, now_)) {
      base::write_file_atomically(layout.node_file(m.node_id), config::to_json(m));
    }
  }
  for (int c : admission_.rejoining) {
    watch_.dropped.erase(c);
    watch_.dropped_on_link.erase(c);
  }
  // The nodes of clusters taken in get theirs too: a spare got its metadata from `replace`, whose
  // ring neighbours may have been replaced since (two clusters lost at once). The nodes of
  // clusters that stay dropped may be gone: theirs waits until their cluster is back.
  std::vector<config::NodeMetadata> changed;
  std::set<int> pushed;
  for (const auto& m : changed_metadata(before, now_)) {
    if (watch_.dropped.count(m.cluster)) {
      requester_.metadata_owed_.insert(m.node_id);
    } else {
      changed.push_back(m);
      pushed.insert(m.node_id);
    }
  }
  for (const auto& m : now_.nodes) {
    const bool taken = std::count(taken_.begin(), taken_.end(), m.cluster) > 0;
    if (!watch_.dropped.count(m.cluster) && !pushed.count(m.node_id) &&
        (taken || requester_.metadata_owed_.count(m.node_id))) {
      changed.push_back(m);
    }
  }
  resumed_after_ = updates;
  // A node that cannot take the new plan (lost since the hold) leaves its cluster out while
  // another goes on; its metadata is owed until its cluster comes back.
  std::map<int, std::string> not_pushed;
  requester_.push_metadata(changed, log_, &not_pushed);
  for (const auto& m : changed) {
    auto failed = not_pushed.find(m.node_id);
    if (failed == not_pushed.end()) {
      requester_.metadata_owed_.erase(m.node_id);
    } else if (watch_.dropped.count(m.cluster) ||
               go_on_without(m, failed->second, job_id_, false)) {
      requester_.metadata_owed_.insert(m.node_id);
    } else {
      throw std::runtime_error("the plan was rewritten, but not every node has it (" +
                               failed->second + "); run `ravnest push` once they answer");
    }
  }
  const std::string resumed_identity = *identity;
  const std::string next_identity = job_identity(job_text_, now_);
  adopt_checkpoints(requester_, now_, resumed_identity, updates, taken_, admission_,
                    job_.optimizer);

  // 3. Every cluster loads the job from update U and starts; the rings are the plan's again.
  const uint64_t next_id = load_from_boundary(
      next_identity, next_identity == resumed_identity ? "" : resumed_identity, updates);
  *identity = next_identity;
  for (int c : admission_.joining) {
    watch_.progress[c].cluster = c;
    if (!before.cluster_ids().empty()) {
      watch_.progress[c].epochs = watch_.progress[before.cluster_ids().front()].epochs;
    }
  }
  start_followed(next_id);
  say_taken_in(updates, next_id);
  return next_id;
}

void Requester::TakeIn::say_taken_in(uint64_t updates, uint64_t next_id) const {
  if (!log_) return;
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f", base::now_seconds() - paused_);
  const std::string how = " after update " + std::to_string(updates) +
                          ": every cluster resumed from there as job " + std::to_string(next_id) +
                          " (" + seconds + " s from the hold to the start)";
  // Clusters that stay dropped (not replaced yet, or for good) are named: the job runs without them.
  const std::vector<int> still(watch_.dropped.begin(), watch_.dropped.end());
  const std::string without =
      still.empty() ? "" : "; " + cluster_words(still) + (still.size() > 1 ? " stay" : " stays") +
                               " dropped";
  for (int c : admission_.rejoining) {
    if (watch_.dropped.count(c)) continue;  // its node was lost meanwhile: said as a drop
    log_("cluster " + std::to_string(c) + " rejoined" + how + ", cluster " + std::to_string(c) +
         " from cluster " + std::to_string(admission_.source.at(c)) + "'s checkpoint" +
         recut_words(c) + without);
  }
  for (int c : admission_.joining) {
    if (watch_.dropped.count(c)) continue;
    log_("cluster " + std::to_string(c) + " joined" + how + ", cluster " + std::to_string(c) +
         " from cluster " + std::to_string(admission_.source.at(c)) + "'s checkpoint" +
         recut_words(c) + "; the data is dealt into " + std::to_string(now_.cluster_ids().size()) +
         " shards from batch " +
         std::to_string(updates * static_cast<uint64_t>(std::max(1, job_.train.update_frequency))) +
         " on" + without);
  }
}

uint64_t Requester::take_in_clusters(const std::shared_ptr<Watch>& watch, uint64_t job_id,
                                     const config::JobSpec& job, const std::string& job_text,
                                     std::string* identity, std::string* plan_json,
                                     int64_t train_samples, const Log& log) {
  TakeIn take_in(*this, watch, job_id, job, job_text, train_samples, log);
  if (!take_in.admit(plan_json) && !take_in.admit_on_link()) return 0;
  const uint64_t updates = take_in.hold_and_stop();
  if (updates == 0) return 0;  // the job ended first
  const std::string late = take_in.too_late(updates);
  if (!late.empty() && !take_in.rejoins()) {
    // The hold landed past the grown job's end: the running plan resumes from U as it was.
    if (log) log(late);
    return take_in.resume_as_it_was(*identity, updates);
  }
  if (!late.empty() && log) {
    // A rejoin at the same boundary needs the new plan (its nodes are in it): both come in, and
    // the grown job, already at its end, ends there.
    log(late.substr(0, late.find(':')) + " comes in with the rejoining " +
        cluster_words(take_in.rejoining_clusters()) + " after update " + std::to_string(updates) +
        ", where a job of " + std::to_string(take_in.grown()) +
        " clusters has ended: every cluster ends there");
  }
  return take_in.resume_grown(identity, updates);
}

void Requester::hand_over_plan(const Log& log) {
  Impl& impl = *impl_;
  Plan now;
  try {
    now = load_plan(impl.plan_.dir);
  } catch (const std::exception& e) {
    if (log) log(std::string("warning: ") + e.what());
    return;
  }
  const std::vector<config::NodeMetadata> changed = changed_metadata(impl.plan_, now);
  if (changed.empty()) return;
  impl.plan_ = now;
  impl.pin_certificates();
  try {
    push_metadata(changed, log);
  } catch (const Interrupted&) {
    throw;
  } catch (const std::exception& e) {
    if (log) log(std::string("warning: ") + e.what());
  }
}

std::optional<Requester::ResumedJoin> Requester::take_in_at_resume(
    const std::string& job_text, const std::string& job_path, const Log& log) {
  Impl& impl = *impl_;
  const Plan now = impl.plan_;
  const auto ids = now.cluster_ids();
  // The clusters a join appended are the last ones: the plan before it is a prefix of them.
  for (size_t kept = ids.size() > 1 ? ids.size() - 1 : 0; kept >= 1; --kept) {
    Plan before = now;
    before.nodes.clear();
    for (const auto& m : now.nodes) {
      if (std::find(ids.begin(), ids.begin() + kept, m.cluster) != ids.begin() + kept) {
        before.nodes.push_back(m);
      }
    }
    const auto admission = membership::admit_clusters(before.nodes, now.nodes, {});
    if (!admission.wait.empty() || admission.joining.empty() || !admission.rejoining.empty()) {
      continue;
    }
    const std::string identity = job_identity(job_text, before);
    const Plan whole = std::exchange(impl.plan_, before);
    Impl::ResumePoint point;
    try {
      point = impl.resume_point(identity, job_path);
    } catch (...) {
      impl.plan_ = whole;
      throw;
    }
    impl.plan_ = whole;
    if (point.updates == 0) continue;
    for (const auto& repair : point.repairs) {
      const auto& n = repair.node;
      copy_checkpoint(*this, now.dir, identity, point.updates, {repair.keeper, n.cluster, n.position},
                      {n, n.cluster, n.position});
      if (log) {
        log(n.name + ": its checkpoint after update " + std::to_string(point.updates) +
            " is damaged or missing: restored from the copy " + repair.keeper.name + " keeps");
      }
    }
    // The nodes that trained got no metadata of the grown plan (their follower gives it at the
    // take-in): they get it now, and the joined clusters their source's checkpoints.
    push_metadata(before.nodes, log);
    // The job's optimizer is what a re-cut needs (each stage's optimizer as its node makes it).
    const config::OptimizerSpec optimizer = admission.recut.empty()
                                                ? config::OptimizerSpec{}
                                                : config::parse_job(job_text, job_path).optimizer;
    adopt_checkpoints(*this, now, identity, point.updates, admission.joining, admission, optimizer);
    if (log) {
      for (int c : admission.joining) {
        log("cluster " + std::to_string(c) + " joined the plan after the job's last `ravnest "
            "train` ended: it comes in now, from cluster " + std::to_string(admission.source.at(c)) +
            "'s checkpoint after update " + std::to_string(point.updates));
      }
    }
    return ResumedJoin{identity, point.updates};
  }
  return std::nullopt;
}

}  // namespace ravnest::requester
