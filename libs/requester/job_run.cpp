// Requester::train, predict and attach: a job's run and its phases (check the nodes and the data,
// ship the files, load, subscribe, start, follow), and where a resumed job continues.
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "libs/base/atomic_file.h"
#include "libs/base/clock.h"
#include "libs/base/config_error.h"
#include "libs/base/regular_file.h"
#include "libs/base/sha256.h"
#include "libs/config/job/job_plan_check.h"
#include "libs/config/job/job_spec.h"
#include "libs/config/plan/checkpoint_keeper.h"
#include "libs/config/plan/plan_layout.h"
#include "libs/data/dataset.h"
#include "libs/data/dataset_files.h"
#include "libs/requester/loss_check.h"
#include "libs/data/epoch_orders.h"
#include "libs/requester/checkpoint_copy.h"
#include "libs/requester/following_marker.h"
#include "libs/requester/job_identity.h"
#include "libs/requester/link_rejoin.h"
#include "libs/requester/metrics_files.h"
#include "libs/requester/requester_impl.h"

namespace ravnest::requester {

namespace fs = std::filesystem;

namespace {

using base::now_seconds;

// The data is checked here, before anything is shipped: a bad file fails at the requester.
// Returns the training set's size.
int64_t check_job_data(const config::JobSpec& job, const Log& log, const Plan& plan,
                       const std::string& job_path) {
  // Every file is a regular file before any is opened (a FIFO would block here).
  data::dataset_files(job.data, data::Split::kTrain);
  if (!job.data.validation.empty()) data::dataset_files(job.data, data::Split::kValidation);
  if (job.loss.name == config::LossName::kScript) {
    const std::string kind = base::not_regular_file(job.loss.path.resolved);
    if (!kind.empty()) {
      throw base::ConfigError("loss.path: " + job.loss.path.resolved + " is " + kind +
                                ", not a regular file");
    }
  }
  auto train_data = data::load_dataset(job.data, data::Split::kTrain,
                                       job.predict ? data::Labels::kOptional : data::Labels::kRequired);
  log(std::string(job.predict ? "data to predict on: " : "training data: ") + job.data.train.raw + " (" + std::to_string(train_data.size()) +
      " samples)");
  if (!job.predict && !job.data.order.empty()) {
    const std::string kind = base::not_regular_file(job.data.order.resolved);
    if (!kind.empty()) {
      throw base::ConfigError("data.order: " + job.data.order.resolved + " is " + kind +
                              ", not a regular file");
    }
    const auto orders =
        data::read_epoch_orders(job.data.order.resolved, train_data.size(), job.train.epochs);
    log("sample order: " + job.data.order.raw + " (" + std::to_string(orders.size()) +
        " epochs)");
  }
  // The loss on the model's output, before the data travels (loss_check.h).
  if (!job.predict) check_loss_on_first_sample(plan, job, train_data, job_path, log);
  if (!job.data.validation.empty()) {
    auto validation = data::load_dataset(job.data, data::Split::kValidation);
    log("validation data: " + job.data.validation.raw + " (" +
        std::to_string(validation.size()) + " samples)");
  }
  return train_data.size();
}

// Every cluster's progress, with the seconds since the job started, to the caller's callback.
void report_progress(Watch& watch, const TrainOptions& options, double started) {
  if (!options.on_progress) return;
  std::vector<TrainProgress> all;
  for (auto& [id, p] : watch.progress) {
    p.elapsed_seconds = now_seconds() - started;
    all.push_back(p);
  }
  options.on_progress(all);
}

// The nodes' events from now on into the metrics files (CSV, TensorBoard) under `dir`.
void record_metrics(Watch& watch, const std::string& dir, int update_frequency,
                    const std::function<void(const std::string&)>& log) {
  auto files = std::make_shared<MetricsFiles>(dir, update_frequency);
  watch.record = [files, log](const wire::NodeEvent& e) mutable {
    if (!files) return;
    try {
      files->record(e, base::seconds_since_epoch());  // a date: TensorBoard's wall time
    } catch (const std::exception& error) {
      // Metrics are a record, not the job: said once, and training goes on without them.
      if (log) log(std::string("warning: ") + error.what() + "; no more metrics are written");
      files.reset();
    }
  };
  if (log) log("metrics (CSV, TensorBoard): " + dir);
}

}  // namespace

// Every node answers, serves the plan's node, holds the plan's stage and runs no job: checked
// before anything is shipped, so that a refused train leaves every node as it was.
void Requester::Impl::check_nodes() {
  for (const auto& meta : plan_.nodes) {
    const std::string unfit = unfit_for_job(meta, status_of(meta, 5));
    if (!unfit.empty()) throw std::runtime_error(unfit);
  }
}

// Ships each node the files it reads (job_shipment.h).
void Requester::Impl::ship_job_files(const std::vector<JobShipment>& shipments, const Log& log,
                                     const std::set<int>& skip, const NodeFailure& on_failure) {
  for (size_t n = 0; n < plan_.nodes.size(); ++n) {
    const auto& meta = plan_.nodes[n];
    for (const auto& file : shipments[n].files) {
      if (skip.count(meta.cluster)) break;
      // Streamed from the file (never read whole), checked at the daemon against the size and
      // checksum the shipment measured; a file changed since fails there, and is named here.
      std::error_code ec;
      const uint64_t size = fs::file_size(file.local, ec);
      if (ec) throw std::runtime_error(file.local + ": cannot read: " + ec.message());
      auto request = node(meta).pushFileRequest();
      request.setName(file.name);
      request.setSize(size);
      request.setSha256(file.sha256);
      const std::string base = fs::path(file.local).filename().string();
      try {
        const auto sent = send_file(request, file.local, meta, "ship " + file.local);
        if (sent.sha256 != file.sha256) {
          throw std::runtime_error(file.local + ": changed while it was being shipped");
        }
      } catch (const NodeCallError& e) {
        if (taken(on_failure, meta, e)) break;
        throw;
      }
      log("shipped " + base + " to " + meta.name);
    }
  }
}

// Loads the job everywhere first: a node that refuses it fails the job before anything runs.
void Requester::Impl::load_job(const std::string& job_text, uint64_t job_id,
                               const std::string& identity, uint64_t resume_from,
                               const std::vector<JobShipment>& shipments,
                               const std::string& resume_identity,
                               const std::set<int>& skip, const NodeFailure& on_failure) {
  for (size_t n = 0; n < plan_.nodes.size(); ++n) {
    const auto& meta = plan_.nodes[n];
    if (skip.count(meta.cluster)) continue;
    auto request = node(meta).loadJobRequest();
    request.setJobToml(job_text);
    request.setJobId(job_id);
    request.setIdentity(identity);
    request.setResumeFrom(resume_from);
    request.setResumeIdentity(resume_identity);
    auto shipped = request.initShipped(static_cast<unsigned>(shipments[n].paths.size()));
    for (size_t i = 0; i < shipments[n].paths.size(); ++i) {
      shipped[i].setField(shipments[n].paths[i].field);
      shipped[i].setLocation(shipments[n].paths[i].location);
    }
    try {
      await(request.send().ignoreResult(), meta, "load job");
    } catch (const NodeCallError& e) {
      if (!taken(on_failure, meta, e)) throw;
    }
  }
}

// Starts the consumers before the producers, so nothing arrives at a node not yet started.
void Requester::Impl::start(uint64_t job_id, const std::set<int>& skip,
                            const NodeFailure& on_failure) {
  std::vector<config::NodeMetadata> order = plan_.nodes;
  // A parameter server's servers and evaluator (cluster -1) before the workers that send to them.
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.cluster >= 0, -a.position) < std::make_pair(b.cluster >= 0, -b.position);
  });
  for (const auto& meta : order) {
    if (skip.count(meta.cluster)) continue;  // read per node: on_failure may add to it
    auto request = node(meta).startRequest();
    request.setJobId(job_id);
    try {
      await(request.send().ignoreResult(), meta, "start");
    } catch (const NodeCallError& e) {
      if (!taken(on_failure, meta, e)) throw;
    }
  }
}

bool Requester::Impl::finished_everywhere(uint64_t job_id) {
  auto interrupted = std::exchange(interrupted_, nullptr);
  bool finished = true;
  for (const auto& meta : plan_.nodes) {
    try {
      const auto s = status_of(meta, 5);
      finished = finished && s.job_id == job_id && s.state == wire::NodeState::kFinished;
    } catch (const NodeCallError&) {
      finished = false;
    }
    if (!finished) break;
  }
  interrupted_ = std::move(interrupted);
  return finished;
}

std::vector<uint64_t> Requester::Impl::intact_checkpoints(const config::NodeMetadata& at,
                                                         const std::string& identity,
                                                         int cluster, int position,
                                                         bool* finished, bool verify) {
  auto request = node(at).checkpointsRequest();
  request.setIdentity(identity);
  request.setCluster(cluster);
  request.setPosition(position);
  request.setVerify(verify);
  auto response = await(request.send(), at, "list checkpoints", 120);
  if (finished) *finished = response.getFinished();
  std::vector<uint64_t> updates;
  for (uint64_t u : response.getUpdates()) updates.push_back(u);
  return updates;
}

Requester::Impl::ResumePoint Requester::Impl::resume_point(const std::string& identity,
                                                           const std::string& job_path) {
  ResumePoint point;
  // Each node's intact checkpoints, then the intact copies its keeper holds of its slot.
  std::map<int, std::set<uint64_t>> own, kept, listed;  // listed: own and kept, unread
  std::map<int, config::NodeMetadata> keeper_of;
  bool all_finished = true;
  for (const auto& meta : plan_.nodes) {
    bool finished = false;
    for (uint64_t u : intact_checkpoints(meta, identity, -1, -1, &finished)) own[meta.node_id].insert(u);
    for (uint64_t u : intact_checkpoints(meta, identity, -1, -1, nullptr, false)) {
      listed[meta.node_id].insert(u);
    }
    all_finished = all_finished && finished;
  }
  if (all_finished) {
    throw std::runtime_error(job_path + ": this job already finished on every node; `ravnest fuse` "
                             "collects its weights, `ravnest train` runs it again");
  }
  for (const auto& meta : plan_.nodes) {
    const auto keeper = config::checkpoint_keeper(meta);
    if (!keeper) continue;
    for (const auto& k : plan_.nodes) {
      if (k.node_id != keeper->node) continue;
      try {
        for (uint64_t u : intact_checkpoints(k, identity, meta.cluster, meta.position)) {
          kept[meta.node_id].insert(u);
        }
        for (uint64_t u :
             intact_checkpoints(k, identity, meta.cluster, meta.position, nullptr, false)) {
          listed[meta.node_id].insert(u);
        }
        keeper_of[meta.node_id] = k;
      } catch (const NodeCallError&) {
        // A keeper that does not answer offers nothing; its own listing above answered.
      }
    }
  }
  // Said whatever the point: the files each node (and its keeper) has past it that were not
  // usable, so the damage has names.
  auto name_skipped = [&](uint64_t after) {
    for (const auto& meta : plan_.nodes) {
      std::string updates;
      for (uint64_t u : listed[meta.node_id]) {
        if (u <= after || own[meta.node_id].count(u) || kept[meta.node_id].count(u)) continue;
        updates += (updates.empty() ? "" : ", ") + std::string("update_") + std::to_string(u) + ".pt";
      }
      if (updates.empty()) continue;
      const auto keeper = keeper_of.find(meta.node_id);
      point.skipped.push_back(
          meta.name + ": " + updates + " (checkpoints/" + identity + "/ in its data directory" +
          (keeper != keeper_of.end() ? ", and the copies " + keeper->second.name + " keeps" : "") +
          ") damaged or not this job's, slot's and update's: not used");
    }
  };
  std::set<uint64_t> common;
  bool first = true;
  for (const auto& meta : plan_.nodes) {
    std::set<uint64_t> held = own[meta.node_id];
    held.insert(kept[meta.node_id].begin(), kept[meta.node_id].end());
    if (held.empty()) {
      point.why_none = meta.name + " holds none";
      name_skipped(0);
      return point;
    }
    if (first) {
      common = held;
      first = false;
    } else {
      std::set<uint64_t> both;
      std::set_intersection(common.begin(), common.end(), held.begin(), held.end(),
                            std::inserter(both, both.begin()));
      common = std::move(both);
    }
    if (common.empty()) {
      point.why_none = meta.name + " has none in common with the others";
      name_skipped(0);
      return point;
    }
  }
  point.updates = *common.rbegin();
  name_skipped(point.updates);
  for (const auto& meta : plan_.nodes) {
    if (!own[meta.node_id].count(point.updates)) {
      point.repairs.push_back({meta, keeper_of.at(meta.node_id)});
    }
  }
  return point;
}


TrainResult Requester::train(const std::string& job_path, const TrainOptions& options) {
  return run(config::load_job(job_path), base::read_file(job_path), job_path, options);
}

TrainResult Requester::predict(const std::string& job_text, const std::string& origin,
                               const TrainOptions& options) {
  const config::JobSpec job = config::parse_job(job_text, origin);
  if (!job.predict) throw std::runtime_error(origin + ": not a prediction job (no [predict])");
  if (!servers().empty()) {
    throw std::runtime_error("a parameter-server plan predicts in one process: ravnest fuse, "
                             "then ravnest predict the fused model.pt");
  }
  TrainOptions once = options;
  once.resume = false;
  once.detach = false;
  return run(job, job_text, origin, once);
}

TrainResult Requester::run(const config::JobSpec& job, const std::string& job_text,
                           const std::string& job_path, const TrainOptions& options) {
  auto log = [&](const std::string& line) {
    if (options.log) options.log(line);
  };
  config::check_job_for_plan(job, impl_->plan_.nodes, job_path);
  const int64_t train_samples = check_job_data(job, log, impl_->plan_, job_path);

  TrainResult result;
  result.job_id = std::random_device{}() ^ (static_cast<uint64_t>(std::time(nullptr)) << 20);
  if (!job.train.max_steps) result.epochs = static_cast<uint32_t>(job.train.epochs);
  auto& plan = impl_->plan_;
  // Changes when a cluster joins the running job (take_in_clusters).
  std::string identity = job_identity(job_text, plan);
  if (options.resume) {
    // Nodes still on the interrupted job (its requester died, or it runs detached) stop it after
    // the same update, each writing its checkpoint of it.
    impl_->hold_at_boundary(0, 60);
    impl_->stop_all("the job is being resumed", 0, 60);
  }
  // Everything that can be checked here is, before any node is touched.
  impl_->check_nodes();
  std::string resume_identity;  // the checkpoints', when a resume takes a join in
  if (options.resume) {
    auto point = impl_->resume_point(identity, job_path);
    for (const auto& line : point.skipped) log("warning: " + line);
    if (point.updates == 0) {
      if (const auto joined = take_in_at_resume(job_text, job_path, options.log)) {
        point = {};
        point.updates = joined->updates;
        resume_identity = joined->identity;
      }
    }
    // A node whose own checkpoint is damaged or gone gets its keeper's copy first.
    for (const auto& repair : point.repairs) {
      const auto& n = repair.node;
      copy_checkpoint(*this, impl_->plan_.dir, identity, point.updates,
                      {repair.keeper, n.cluster, n.position}, {n, n.cluster, n.position});
      log(n.name + ": its checkpoint after update " + std::to_string(point.updates) +
          " is damaged or missing: restored from the copy " + repair.keeper.name + " keeps");
    }
    result.resumed_from = point.updates;
    log(result.resumed_from > 0
            ? "resuming after update " + std::to_string(result.resumed_from) +
                  ", the newest checkpoint every node holds intact"
            : "no checkpoint of this job that every node holds (" + point.why_none +
                  "): it starts from the beginning");
  }
  std::vector<JobShipment> shipments;
  std::map<std::string, std::string> checksums;
  for (const auto& meta : plan.nodes) shipments.push_back(job_shipment_for(job, meta, checksums));

  // Read now: a later change (`ravnest replace` of a dropped cluster's node, `ravnest join`)
  // brings clusters in.
  std::string plan_json = base::read_file(config::PlanLayout(plan.dir).plan_file());
  std::function<uint64_t(const std::shared_ptr<Watch>&, uint64_t)> take_in;
  link_rejoins_ = options.link_rejoins;
  live_addresses_ = options.live_addresses;
  if (!job.predict) {
    take_in = [&](const std::shared_ptr<Watch>& watch, uint64_t job_id) {
      return take_in_clusters(watch, job_id, job, job_text, &identity, &plan_json, train_samples,
                              options.log);
    };
  }
  auto ran = impl_->run_job(result, options,
                        [&]() {
                          impl_->ship_job_files(shipments, log);
                          impl_->load_job(job_text, result.job_id, identity,
                                          result.resumed_from, shipments, resume_identity);
                          if (!job.predict) remember_job(plan.dir, job_path);
                        },
                        [&]() {
                          impl_->start(result.job_id);
                          log("job " + std::to_string(result.job_id) + " started on " +
                              std::to_string(plan.nodes.size()) + " node(s)");
                        },
                        job.predict ? 0 : job.train.update_frequency, take_in);
  if (!job.predict && !options.detach) hand_over_plan(options.log);
  return ran;
}

TrainResult Requester::attach(const TrainOptions& options) {
  TrainResult result;
  std::string first;
  for (const auto& meta : impl_->plan_.nodes) {
    const auto s = impl_->status_of(meta, 5);
    if (s.state != wire::NodeState::kTraining && s.state != wire::NodeState::kReady) continue;
    if (result.job_id != 0 && s.job_id != result.job_id) {
      throw std::runtime_error(first + " runs job " + std::to_string(result.job_id) + ", " +
                               meta.name + " job " + std::to_string(s.job_id) +
                               "; `ravnest stop` ends both");
    }
    result.job_id = s.job_id;
    first = meta.name;
  }
  if (result.job_id == 0) {
    throw std::runtime_error("no job runs on the plan's nodes; `ravnest status` shows them");
  }
  if (options.log) options.log("attached to job " + std::to_string(result.job_id));
  TrainOptions follow = options;
  follow.detach = false;
  // The validation rounds' steps need the job's update_frequency: the plan remembers its last
  // job file (a job started elsewhere may not be it; then steps are counted in updates).
  int update_frequency = 1;
  try {
    update_frequency = config::load_job(last_job_path(impl_->plan_.dir)).train.update_frequency;
  } catch (const std::exception&) {
  }
  // Whoever attached only watches: Ctrl-C leaves the job to its nodes (and to `ravnest stop`).
  follow.interrupt_detaches = true;
  return impl_->run_job(result, follow, nullptr, nullptr, update_frequency);
}

TrainResult Requester::Impl::run_job(TrainResult& result, const TrainOptions& options,
                                     const std::function<void()>& load,
                                     const std::function<void()>& start, int update_frequency,
                                     const std::function<uint64_t(const std::shared_ptr<Watch>&,
                                                                  uint64_t)>& take_in) {
  struct Unwatch {
    Impl& impl;
    ~Unwatch() { impl.interrupted_ = nullptr; }
  } unwatch{*this};
  interrupted_ = options.interrupted;
  auto watch = std::make_shared<Watch>();
  struct Deactivate {
    std::shared_ptr<Watch> watch;
    ~Deactivate() { watch->active = false; watch->report = nullptr; }
  } deactivate{watch};
  const double started = now_seconds();
  try {
    if (load) load();
    for (int id : plan_.cluster_ids()) {
      watch->progress[id].cluster = id;
      watch->progress[id].epochs = result.epochs;
    }
    watch->report = [&watch = *watch, &options, started]() {
      report_progress(watch, options, started);
    };
    if (!options.detach && update_frequency > 0) {
      result.metrics_dir = (std::filesystem::path(plan_.dir) / "metrics" /
                            ("job_" + std::to_string(result.job_id)))
                               .string();
      record_metrics(*watch, result.metrics_dir, update_frequency, options.log);
    }
    if (!options.detach) subscribe(watch, options.log);
    watch->drop_requested = options.drop_failed_clusters && !options.detach;
    if (watch->drop_requested) {
      watch->drop_failed_clusters = coordinate_rings(result.job_id);  // before the start
      if (options.log && !watch->drop_failed_clusters) {
        options.log("warning: --drop-failed-clusters: the plan has one cluster; a failure "
                    "stops the job");
      }
    }
    if (start) start();
    if (options.detach) return result;
    struct Unmark {
      std::string dir;
      ~Unmark() {
        if (!dir.empty()) remove_following(dir);
      }
    } unmark;
    if (take_in) {
      // `ravnest join` and `ravnest replace` read it: a joined cluster, or a dropped cluster's
      // node replaced, comes into this job without a stop (running_plan_change.cpp).
      write_following(plan_.dir, {::getpid(), result.job_id, {}});
      unmark.dir = plan_.dir;
      watch->take_in = [take_in, w = std::weak_ptr<Watch>(watch)](uint64_t job_id) -> uint64_t {
        auto locked = w.lock();
        return locked ? take_in(locked, job_id) : 0;
      };
    }
    watch_until_done(*watch, &result.job_id, options.unresponsive_seconds, options.log);
    result.seconds = now_seconds() - started;
  } catch (const Interrupted&) {
    watch->active = false;
    if (options.interrupt_detaches) {
      result.detached = true;
      result.seconds = now_seconds() - started;
      return result;
    }
    // Every node stops after the same update, so that `ravnest resume` continues from there.
    const auto boundary = hold_at_boundary(result.job_id, 60);
    if (!finished_everywhere(result.job_id)) {
      throw TrainInterrupted(result.job_id,
                             stop_all("the requester was interrupted", result.job_id), "",
                             boundary);
    }
    // The interruption came after the last update: the job is done, not stopped.
    result.seconds = now_seconds() - started;
  } catch (const NodeStopping& stopping) {
    watch->active = false;
    // As for an interruption, within the 20 s the stopping daemon waits before it exits anyway
    // (a hold that takes longer ends in a stop without agreement, as after a failure).
    const auto boundary = hold_at_boundary(result.job_id, 12);
    if (!finished_everywhere(result.job_id)) {
      const std::string reason =
          stopping.why + (boundary ? "; every node stopped after update " +
                                         std::to_string(*boundary)
                                   : std::string("; the nodes did not reach one update in time"));
      throw TrainInterrupted(result.job_id, stop_all(reason, result.job_id), stopping.why,
                             boundary);
    }
    result.seconds = now_seconds() - started;
  } catch (const std::exception& e) {
    // Every node is told, so that none stays loaded or training (only this job is stopped).
    watch->active = false;
    stop_all(e.what(), result.job_id);
    throw;
  }
  for (auto& [id, p] : watch->progress) result.clusters.push_back(p);
  result.dropped_clusters = watch->dropped_lines;
  return result;
}

}  // namespace ravnest::requester
