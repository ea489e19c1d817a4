#include "libs/requester/requester.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <map>
#include <optional>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <utility>

#include <kj/async-io.h>
#include <kj/timer.h>
#include <nlohmann/json.hpp>

#include "libs/config/atomic_file.h"
#include "libs/config/checkpoint_keeper.h"
#include "libs/config/clock.h"
#include "libs/config/config_error.h"
#include "libs/config/job_plan_check.h"
#include "libs/config/job_spec.h"
#include "libs/config/plan_layout.h"
#include "libs/config/regular_file.h"
#include "libs/config/sha256.h"
#include "libs/data/dataset.h"
#include "libs/data/dataset_files.h"
#include "libs/requester/job_identity.h"
#include "libs/requester/job_shipment.h"
#include "libs/wire/file_stream.h"
#include "libs/wire/kj_reason.h"
#include "libs/wire/peer_links.h"
#include "libs/wire/tensor_stream.h"
#include "libs/wire/transport_security.h"
#include "libs/wire/transfer_codec.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::runtime {

namespace fs = std::filesystem;

namespace {

using config::now_seconds;

using Log = std::function<void(const std::string&)>;

// A failed call to a node, one line naming it. `disconnected`: the node did not answer (no
// connection, or no answer in time), as opposed to an answer refusing the call.
class NodeCallError : public std::runtime_error {
 public:
  NodeCallError(const std::string& what, std::string reason, bool disconnected)
      : std::runtime_error(what), reason(std::move(reason)), disconnected(disconnected) {}
  std::string reason;  // without the node's name and the call
  bool disconnected;
};

// TrainOptions::interrupted turned true while train() waited.
struct Interrupted {};

// A node's daemon got SIGTERM and asked for the stop every node agrees on (EventKind stopping);
// `why` names the node.
struct NodeStopping {
  std::string why;
};

// The data is checked here, before anything is shipped: a bad file fails at the requester.
void check_job_data(const config::JobSpec& job, const Log& log) {
  // Every file is a regular file before any is opened (a FIFO would block here).
  data::dataset_files(job.data, data::Split::kTrain);
  if (!job.data.validation.empty()) data::dataset_files(job.data, data::Split::kValidation);
  if (job.loss.name == config::LossName::kScript) {
    const std::string kind = config::not_regular_file(job.loss.path.resolved);
    if (!kind.empty()) {
      throw config::ConfigError("loss.path: " + job.loss.path.resolved + " is " + kind +
                                ", not a regular file");
    }
  }
  auto train_data = data::load_dataset(job.data, data::Split::kTrain);
  log(std::string(job.predict ? "data to predict on: " : "training data: ") + job.data.train.raw + " (" + std::to_string(train_data.size()) +
      " samples)");
  if (!job.data.validation.empty()) {
    auto validation = data::load_dataset(job.data, data::Split::kValidation);
    log("validation data: " + job.data.validation.raw + " (" +
        std::to_string(validation.size()) + " samples)");
  }
}

// Progress, as the leaves and roots report it. Listeners may be called after train() returns
// (the daemons hold them), so what they touch is shared and switched off at the end.
struct Watch {
  std::map<int, TrainProgress> progress;
  std::set<int> finished;
  std::string failure;
  std::string stopping;  // a node asked for the agreed stop (kStopping): which, and why
  bool active = true;
  std::function<void()> report;
};

void report(const Watch& watch) {
  if (watch.active && watch.report) watch.report();
}

// One event a daemon sent, folded into the watch.
void apply_event(Watch& watch, const wire::NodeEvent& sent, const Log& on_log) {
  const auto& e = sent.event;
  if (e.kind == wire::EventKind::kWarning) {
    // The node goes on (memory near its budget, say): said, never taken for a failure.
    if (on_log) on_log("warning: " + e.message);
    return;
  }
  if (e.kind == wire::EventKind::kStopping) {
    // Acted on by watch_until_done: the node waits for that stop before its daemon exits.
    if (watch.stopping.empty()) watch.stopping = e.message;
    return;
  }
  if (sent.cluster < 0) {
    // A parameter server's evaluator: its score is every worker's model's.
    if (e.kind == wire::EventKind::kValidation) {
      for (auto& [cluster, p] : watch.progress) {
        p.has_validation = true;
        p.validation_loss = e.loss;
        p.validation_accuracy = e.accuracy;
      }
      if (on_log) {
        on_log("evaluator: the servers' weights after " + std::to_string(e.step) +
               " updates: loss " + std::to_string(e.loss) + ", accuracy " +
               std::to_string(e.accuracy));
      }
    } else if (e.kind == wire::EventKind::kFinished) {
      watch.finished.insert(sent.node_id);
    } else if (e.kind == wire::EventKind::kFailed && watch.failure.empty()) {
      watch.failure = e.message;
    }
    return;
  }
  auto& p = watch.progress[sent.cluster];
  switch (e.kind) {
    case wire::EventKind::kStep:
      p.loss = e.loss;
      p.epoch = e.epoch;
      break;
    case wire::EventKind::kValidation:
      p.has_validation = true;
      p.validation_loss = e.loss;
      p.validation_accuracy = e.accuracy;
      if (on_log) {
        on_log("cluster " + std::to_string(sent.cluster) + " validation: loss " +
               std::to_string(e.loss) + ", accuracy " + std::to_string(e.accuracy));
      }
      break;
    case wire::EventKind::kFinished:
      watch.finished.insert(sent.node_id);
      break;
    case wire::EventKind::kFailed:
      if (watch.failure.empty()) watch.failure = e.message;
      break;
    case wire::EventKind::kWarning:
    case wire::EventKind::kStopping:
      break;  // handled above
  }
}

}  // namespace

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
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(config::read_file(plan_path));
  } catch (const std::exception& e) {
    throw std::runtime_error(plan_path + ": no readable plan (run `ravnest clusterize`): " +
                             e.what());
  }
  for (const auto& cluster : json.at("clusters")) {
    for (int id : cluster.at("nodes")) {
      plan.nodes.push_back(config::load_node_metadata(layout.node_file(id)));
    }
  }
  // A parameter-server plan's servers and evaluator belong to no cluster.
  if (json.contains("parameter_server")) {
    const auto& ps = json.at("parameter_server");
    for (const auto& server : ps.at("servers")) {
      plan.nodes.push_back(config::load_node_metadata(layout.node_file(server.at("node").get<int>())));
    }
    if (ps.contains("evaluator")) {
      plan.nodes.push_back(config::load_node_metadata(layout.node_file(ps.at("evaluator").get<int>())));
    }
  }
  return plan;
}

// A listener the daemons call back with progress events.
class ProgressListenerImpl final : public schema::ProgressListener::Server {
 public:
  explicit ProgressListenerImpl(std::function<void(const wire::NodeEvent&)> on_event)
      : on_event_(std::move(on_event)) {}

 protected:
  kj::Promise<void> event(EventContext context) override {
    on_event_(wire::decode_event(context.getParams().getEvent()));
    return kj::READY_NOW;
  }

 private:
  std::function<void(const wire::NodeEvent&)> on_event_;
};

class Requester::Impl {
 public:
  Impl(Plan plan, const std::string& secret, bool insecure)
      : plan_(std::move(plan)), links_(wire::make_transport_security(secret, insecure)) {
    // The certificates the pool file pinned, which the plan's nodes must show: each node's own
    // metadata says its own; addresses outside the plan (a spare) come from any node's.
    std::map<std::string, std::string> pins;
    for (const auto& node : plan_.nodes) {
      auto own = node.tls_fingerprints.find(node.address);
      if (own != node.tls_fingerprints.end()) pins[node.address] = own->second;
    }
    for (const auto& node : plan_.nodes) {
      pins.insert(node.tls_fingerprints.begin(), node.tls_fingerprints.end());
    }
    links_.security()->set_pins(std::move(pins));
  }

  schema::Node::Client node(const config::NodeMetadata& meta) { return links_.node(meta.address); }

  // Every connection runs on this thread's event loop.
  kj::WaitScope& wait_scope() { return links_.wait_scope(); }
  kj::Timer& timer() { return links_.timer(); }

  bool interrupt_requested() const { return interrupted_ && interrupted_(); }
  // Rejects once interrupt_requested(); never resolves otherwise.
  kj::Promise<void> interruption() {
    return timer().afterDelay(100 * kj::MILLISECONDS).then([this]() -> kj::Promise<void> {
      if (interrupt_requested()) return kj::Promise<void>(KJ_EXCEPTION(FAILED, "interrupted"));
      return interruption();
    });
  }

  // Waits for `promise`, failing with a NodeCallError naming the node; a call that fails (or
  // does not answer in time) drops the node's connection, so the next call connects anew. While
  // an interruption is watched for, throws Interrupted once it is requested.
  // With `progress` (the bytes a transfer moved so far), the time limit is on a transfer that
  // stops moving, not on the whole of it: a stage of GB over a slow link takes what it takes.
  template <typename T>
  T await(kj::Promise<T>&& promise, const config::NodeMetadata& meta, const std::string& what,
          double timeout_seconds = 120, std::function<uint64_t()> progress = {}) {
    const auto limit = static_cast<uint64_t>(timeout_seconds * 1000) * kj::MILLISECONDS;
    auto timeout = (progress ? stalled(limit, std::move(progress), ~uint64_t{0})
                             : timer().afterDelay(limit))
                       .then([]() -> T {
                         kj::throwFatalException(KJ_EXCEPTION(DISCONNECTED, "no answer in time"));
                       });
    kj::Promise<T> joined = links_.watch(meta.address, promise.exclusiveJoin(kj::mv(timeout)));
    if (interrupted_) {
      joined = joined.exclusiveJoin(interruption().then([]() -> T {
        kj::throwFatalException(KJ_EXCEPTION(FAILED, "interrupted"));
      }));
    }
    try {
      return joined.wait(wait_scope());
    } catch (const kj::Exception& e) {
      if (interrupt_requested()) throw Interrupted();
      const std::string reason = wire::kj_reason(e);
      throw NodeCallError(meta.name + " (" + meta.address + "): " + what + ": " + reason, reason,
                          e.getType() == kj::Exception::Type::DISCONNECTED);
    }
  }

  // Resolves once `progress` stayed at one value for `limit`.
  kj::Promise<void> stalled(kj::Duration limit, std::function<uint64_t()> progress, uint64_t last) {
    return timer().afterDelay(limit).then(
        [this, limit, progress = std::move(progress), last]() mutable -> kj::Promise<void> {
          const uint64_t now = progress();
          if (now == last) return kj::READY_NOW;
          return stalled(limit, std::move(progress), now);
        });
  }

  // Streams the file at `path` into the sink `call` returns (pushStage, pushFile,
  // storeCheckpoint), a chunk at a time; fails like await(), naming the node and `what`.
  template <typename Request>
  wire::SentFile send_file(Request&& call, const std::string& path,
                           const config::NodeMetadata& meta, const std::string& what) {
    auto sent = std::make_shared<uint64_t>(0);
    auto sink = call.send().getSink();
    return await(wire::stream_file(sink, path, wire::kDefaultChunkBytes, sent.get())
                     .attach(std::shared_ptr<uint64_t>(sent)),
                 meta, what, 120, [sent]() { return *sent; });
  }

  // The node's status; fails like await().
  wire::NodeStatusData status_of(const config::NodeMetadata& meta, double timeout_seconds) {
    auto response = await(node(meta).statusRequest().send(), meta, "status", timeout_seconds);
    return wire::decode_status(response.getStatus());
  }

  // The phases of Requester::train(), in order.
  void check_nodes();
  void ship_job_files(const std::vector<JobShipment>& shipments, const Log& log);
  void load_job(const std::string& job_text, uint64_t job_id, const std::string& identity,
                uint64_t resume_from, const std::vector<JobShipment>& shipments);
  void subscribe(const std::shared_ptr<Watch>& watch, const Log& on_log);
  void start(uint64_t job_id);
  void watch_until_done(Watch& watch, uint64_t job_id, double unresponsive_seconds);
  // The phases around them: `load` (when given), the listeners, `start` (when given), then
  // following the job until it ends (unless detached). A failure or an interruption stops the
  // job `result.job_id` on every node.
  TrainResult run_job(TrainResult& result, const TrainOptions& options,
                      const std::function<void()>& load, const std::function<void()>& start);

  std::vector<std::string> stop_all(const std::string& reason, uint64_t job_id,
                                    double timeout_seconds = 3);
  // The first half of a stop every node agrees on (docs/faults.md#stopping): each cluster's root
  // holds the job `job_id` (0: whatever runs) at an update boundary, the furthest of the nearest
  // ones the roots can reach, and this waits until every node has made that many updates (or no
  // longer trains), so that the stop that follows checkpoints every node at the same update.
  // Returns the boundary, or nothing when no job runs, the plan has parameter servers, or a
  // node does not answer or reach it within `timeout_seconds` (the stop then checkpoints each
  // node at its own last update, as a stop after a failure does).
  std::optional<uint64_t> hold_at_boundary(uint64_t job_id, double timeout_seconds);
  // Every node reports the job `job_id` finished (any that does not answer: false).
  bool finished_everywhere(uint64_t job_id);
  // Where a resume of the job `identity` continues: the newest update after which every node
  // holds a checkpoint that still matches its checksum, its own or, where its own is damaged or
  // gone, the copy its keeper holds (`repairs`: to be stored on the node first); 0 (the job's
  // start, which every node holds: its pushed stage) when there is none, `why_none` then saying
  // which node has none. Throws when every node finished the job.
  struct ResumePoint {
    uint64_t updates = 0;
    std::string why_none;
    struct Repair {
      config::NodeMetadata node, keeper;
    };
    std::vector<Repair> repairs;
  };
  ResumePoint resume_point(const std::string& identity, const std::string& job_path);
  // The intact checkpoints `at` holds of the slot (cluster, position; -1: its own) and whether it
  // finished the job.
  std::vector<uint64_t> intact_checkpoints(const config::NodeMetadata& at,
                                           const std::string& identity, int cluster,
                                           int position, bool* finished = nullptr);

  Plan plan_;
  wire::PeerLinks links_;  // one connection per node, kept until a call over it fails
  std::function<bool()> interrupted_;  // set while train() watches for an interruption
};

// Every node answers, serves the plan's node, holds the plan's stage and runs no job: checked
// before anything is shipped, so that a refused train leaves every node as it was.
void Requester::Impl::check_nodes() {
  for (const auto& meta : plan_.nodes) {
    const std::string who = meta.name + " (" + meta.address + ")";
    const auto s = status_of(meta, 5);
    if (s.node != meta.name) {
      throw std::runtime_error(who + ": the daemon there serves " + s.node +
                               "; start `ravnestd --node " + meta.name + "` there");
    }
    if (!s.has_stage) throw std::runtime_error(who + ": no stage stored; run `ravnest push`");
    if (!s.stage_problem.empty()) {
      throw std::runtime_error(who + ": " + s.stage_problem + "; run `ravnest push`");
    }
    if (!config::same_sha256(s.stage_sha256, meta.stage_sha256)) {
      throw std::runtime_error(who + ": holds stage " + s.stage_sha256.substr(0, 12) +
                               ", not the plan's " + meta.stage_sha256.substr(0, 12) +
                               " (another plan, or an older one); run `ravnest push`");
    }
    if (s.state == wire::NodeState::kTraining) {
      throw std::runtime_error(who + ": busy: job " + std::to_string(s.job_id) +
                               " is running; wait for it, or stop it with `ravnest stop`");
    }
  }
}

// Ships each node the files it reads (job_shipment.h).
void Requester::Impl::ship_job_files(const std::vector<JobShipment>& shipments, const Log& log) {
  for (size_t n = 0; n < plan_.nodes.size(); ++n) {
    const auto& meta = plan_.nodes[n];
    for (const auto& file : shipments[n].files) {
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
      const auto sent = send_file(request, file.local, meta, "ship " + file.local);
      if (sent.sha256 != file.sha256) {
        throw std::runtime_error(file.local + ": changed while it was being shipped");
      }
      log("shipped " + base + " to " + meta.name);
    }
  }
}

// Loads the job everywhere first: a node that refuses it fails the job before anything runs.
void Requester::Impl::load_job(const std::string& job_text, uint64_t job_id,
                               const std::string& identity, uint64_t resume_from,
                               const std::vector<JobShipment>& shipments) {
  for (size_t n = 0; n < plan_.nodes.size(); ++n) {
    const auto& meta = plan_.nodes[n];
    auto request = node(meta).loadJobRequest();
    request.setJobToml(job_text);
    request.setJobId(job_id);
    request.setIdentity(identity);
    request.setResumeFrom(resume_from);
    auto shipped = request.initShipped(static_cast<unsigned>(shipments[n].paths.size()));
    for (size_t i = 0; i < shipments[n].paths.size(); ++i) {
      shipped[i].setField(shipments[n].paths[i].field);
      shipped[i].setLocation(shipments[n].paths[i].location);
    }
    await(request.send().ignoreResult(), meta, "load job");
  }
}

// Gives every node a listener for its progress events.
void Requester::Impl::subscribe(const std::shared_ptr<Watch>& watch, const Log& on_log) {
  for (const auto& meta : plan_.nodes) {
    auto request = node(meta).subscribeRequest();
    request.setListener(kj::heap<ProgressListenerImpl>(
        [watch, on_log](const wire::NodeEvent& e) {
          if (!watch->active) return;
          apply_event(*watch, e, on_log);
          report(*watch);
        }));
    await(request.send().ignoreResult(), meta, "subscribe");
  }
}

// Starts the consumers before the producers, so nothing arrives at a node not yet started.
void Requester::Impl::start(uint64_t job_id) {
  std::vector<config::NodeMetadata> order = plan_.nodes;
  // A parameter server's servers and evaluator (cluster -1) before the workers that send to them.
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.cluster >= 0, -a.position) < std::make_pair(b.cluster >= 0, -b.position);
  });
  for (const auto& meta : order) {
    auto request = node(meta).startRequest();
    request.setJobId(job_id);
    await(request.send().ignoreResult(), meta, "start");
  }
}

// Events as they come, and every node's status twice a second, until every node finished. A
// node that does not answer for `unresponsive_seconds`, fails, was stopped or moved on to
// another job fails the job (the caller then stops it everywhere).
void Requester::Impl::watch_until_done(Watch& watch, uint64_t job_id,
                                       double unresponsive_seconds) {
  auto& failure = watch.failure;
  bool stopped = false;  // the failure is that somebody stopped the job
  std::map<int, double> last_heard;
  for (const auto& meta : plan_.nodes) last_heard[meta.node_id] = now_seconds();
  while (true) {
    timer().afterDelay(500 * kj::MILLISECONDS).wait(wait_scope());
    if (interrupt_requested()) throw Interrupted();
    if (!watch.stopping.empty()) throw NodeStopping{watch.stopping};
    for (const auto& meta : plan_.nodes) {
      try {
        const auto s = status_of(meta, 2);
        last_heard[meta.node_id] = now_seconds();
        if (!failure.empty()) continue;
        if (s.job_id != job_id) {
          failure = meta.name + " (" + meta.address + ") is no longer running the job" +
                    (s.job_id ? " (it runs job " + std::to_string(s.job_id) + ")" : "");
        } else if (s.state == wire::NodeState::kFailed) {
          failure = meta.name + ": " + s.error;
        } else if (s.state == wire::NodeState::kIdle || s.state == wire::NodeState::kReady) {
          failure = "job " + std::to_string(job_id) + " was stopped (" + meta.name + ": " +
                    (s.error.empty() ? std::string("stopped") : s.error) + ")";
          stopped = true;
        } else if (s.state == wire::NodeState::kFinished) {
          watch.finished.insert(meta.node_id);
        }
        if (meta.position == 0 && meta.cluster >= 0) {
          auto& p = watch.progress[meta.cluster];
          p.batches = s.batches;
          p.total_batches = s.total_batches;
          p.samples_per_second = s.samples_per_second;
          p.epoch = std::max(p.epoch, s.epoch);
        }
      } catch (const Interrupted&) {
        throw;
      } catch (const std::exception& e) {
        const auto* call = dynamic_cast<const NodeCallError*>(&e);
        const double silent = now_seconds() - last_heard[meta.node_id];
        if (silent > unresponsive_seconds && failure.empty()) {
          failure = meta.name + " (" + meta.address + ") stopped answering (" +
                    (call ? call->reason : std::string(e.what())) + "; silent for " +
                    std::to_string(static_cast<int>(silent)) + " s)";
        }
      }
    }
    report(watch);
    if (!failure.empty()) throw std::runtime_error(stopped ? failure : "training failed: " + failure);
    if (watch.finished.size() == plan_.nodes.size()) break;
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
                                                         bool* finished) {
  auto request = node(at).checkpointsRequest();
  request.setIdentity(identity);
  request.setCluster(cluster);
  request.setPosition(position);
  request.setVerify(true);
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
  std::map<int, std::set<uint64_t>> own, kept;
  std::map<int, config::NodeMetadata> keeper_of;
  bool all_finished = true;
  for (const auto& meta : plan_.nodes) {
    bool finished = false;
    for (uint64_t u : intact_checkpoints(meta, identity, -1, -1, &finished)) own[meta.node_id].insert(u);
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
        keeper_of[meta.node_id] = k;
      } catch (const NodeCallError&) {
        // A keeper that does not answer offers nothing; its own listing above answered.
      }
    }
  }
  std::set<uint64_t> common;
  bool first = true;
  for (const auto& meta : plan_.nodes) {
    std::set<uint64_t> held = own[meta.node_id];
    held.insert(kept[meta.node_id].begin(), kept[meta.node_id].end());
    if (held.empty()) {
      point.why_none = meta.name + " holds none";
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
      return point;
    }
  }
  point.updates = *common.rbegin();
  for (const auto& meta : plan_.nodes) {
    if (!own[meta.node_id].count(point.updates)) {
      point.repairs.push_back({meta, keeper_of.at(meta.node_id)});
    }
  }
  return point;
}

std::optional<uint64_t> Requester::Impl::hold_at_boundary(uint64_t job_id,
                                                         double timeout_seconds) {
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
    if (meta.position == 0) roots.push_back(meta);
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

Requester::Requester(Plan plan, const std::string& secret, bool insecure)
    : impl_(std::make_unique<Impl>(std::move(plan), secret, insecure)) {}
Requester::~Requester() = default;

void Requester::push(const std::function<void(const std::string&)>& log) {
  const config::PlanLayout layout(impl_->plan_.dir);
  for (const auto& meta : impl_->plan_.nodes) {
    const std::string stage = layout.resolve(meta.stage_file);
    const uint64_t bytes = push_stage(meta, stage, config::read_file(layout.node_file(meta.node_id)));
    log("pushed " + meta.stage_file + " (" + std::to_string(bytes) + " bytes) to " + meta.name +
        " at " + meta.address);
  }
}

std::vector<NodeReport> Requester::status() {
  std::vector<NodeReport> reports;
  for (const auto& meta : impl_->plan_.nodes) {
    NodeReport report;
    report.node = meta;
    try {
      report.status = impl_->status_of(meta, 3);
      report.reachable = true;
      report.state = wire::state_name(report.status.state);
      report.error = report.status.error;
      if (!report.status.stage_problem.empty()) {
        // Shown first: a job would fail on it.
        report.error = "stage damaged: " + report.status.stage_problem + "; run `ravnest push`" +
                       (report.error.empty() ? "" : "; " + report.error);
      }
    } catch (const std::exception& e) {
      report.error = e.what();
      // A daemon that answered but refused us (another secret) is not unreachable.
      report.state =
          report.error.find(": refused: ") != std::string::npos ? "refused" : "unreachable";
    }
    reports.push_back(report);
  }
  return reports;
}

std::vector<std::string> Requester::stop_all(const std::string& reason, uint64_t job_id,
                                             double timeout_seconds) {
  impl_->hold_at_boundary(job_id, 60);
  return impl_->stop_all(reason, job_id, timeout_seconds);
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
    if (!s.has_stage || !config::same_sha256(s.stage_sha256, meta.stage_sha256)) {
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

TrainResult Requester::train(const std::string& job_path, const TrainOptions& options) {
  return run(config::load_job(job_path), config::read_file(job_path), job_path, options);
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
  check_job_data(job, log);

  TrainResult result;
  result.job_id = std::random_device{}() ^ (static_cast<uint64_t>(std::time(nullptr)) << 20);
  if (!job.train.max_steps) result.epochs = static_cast<uint32_t>(job.train.epochs);
  auto& plan = impl_->plan_;
  const std::string identity = job_identity(job_text, plan);
  if (options.resume) {
    // Nodes still on the interrupted job (its requester died, or it runs detached) stop it after
    // the same update, each writing its checkpoint of it.
    impl_->hold_at_boundary(0, 60);
    impl_->stop_all("the job is being resumed", 0, 60);
  }
  // Everything that can be checked here is, before any node is touched.
  impl_->check_nodes();
  if (options.resume) {
    const auto point = impl_->resume_point(identity, job_path);
    // A node whose own checkpoint is damaged or gone gets its keeper's copy first.
    for (const auto& repair : point.repairs) {
      const auto& n = repair.node;
      // Through a temporary file of the plan directory, as `ravnest replace` moves one: streamed
      // in, then out, never held whole in memory; removed whatever happens.
      const std::string copy = (std::filesystem::path(impl_->plan_.dir) /
                                (".checkpoint." + std::to_string(::getpid()) + ".pt"))
                                   .string();
      try {
        fetch_checkpoint(repair.keeper, identity, n.cluster, n.position, point.updates, copy);
        store_checkpoint(n, identity, n.cluster, n.position, point.updates, copy);
      } catch (...) {
        std::error_code ignored;
        std::filesystem::remove(copy, ignored);
        throw;
      }
      std::error_code ignored;
      std::filesystem::remove(copy, ignored);
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

  return impl_->run_job(result, options,
                        [&]() {
                          impl_->ship_job_files(shipments, log);
                          impl_->load_job(job_text, result.job_id, identity,
                                          result.resumed_from, shipments);
                          if (!job.predict) remember_job(plan.dir, job_path);
                        },
                        [&]() {
                          impl_->start(result.job_id);
                          log("job " + std::to_string(result.job_id) + " started on " +
                              std::to_string(plan.nodes.size()) + " node(s)");
                        });
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
  return impl_->run_job(result, follow, nullptr, nullptr);
}

TrainResult Requester::Impl::run_job(TrainResult& result, const TrainOptions& options,
                                     const std::function<void()>& load,
                                     const std::function<void()>& start) {
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
    watch->report = [&]() {
      if (!options.on_progress) return;
      std::vector<TrainProgress> all;
      for (auto& [id, p] : watch->progress) {
        p.elapsed_seconds = now_seconds() - started;
        all.push_back(p);
      }
      options.on_progress(all);
    };
    if (!options.detach) subscribe(watch, options.log);
    if (start) start();
    if (options.detach) return result;
    watch_until_done(*watch, result.job_id, options.unresponsive_seconds);
    result.seconds = now_seconds() - started;
  } catch (const Interrupted&) {
    watch->active = false;
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
  return result;
}

std::vector<Requester::FetchedStage> Requester::fetch_cluster(int cluster,
                                                              const std::string& dir) {
  auto stages = fetch_nodes(impl_->plan_.cluster(cluster), dir);
  if (stages.empty()) throw std::runtime_error("no cluster " + std::to_string(cluster) + " in the plan");
  return stages;
}

std::vector<Requester::FetchedStage> Requester::fetch_nodes(
    const std::vector<config::NodeMetadata>& nodes, const std::string& dir) {
  std::vector<FetchedStage> stages;
  for (const auto& meta : nodes) {
    FetchedStage stage;
    stage.path = (fs::path(dir) / (meta.name + ".pt")).string();
    wire::FileDownload download(stage.path);
    auto request = impl_->node(meta).fetchStageRequest();
    request.setSink(download.sink());
    auto response = impl_->await(request.send(), meta, "fetch stage", 120,
                                 [&download]() { return download.received_bytes(); });
    try {
      download.keep(response.getSize(), response.getSha256());
    } catch (const std::exception& e) {
      throw std::runtime_error(meta.name + ": the fetched stage: " + e.what());
    }
    stage.bytes = response.getSize();
    stage.metadata = config::node_metadata_from_json(response.getMetadataJson(),
                                                     meta.name + " metadata");
    stages.push_back(std::move(stage));
  }
  return stages;
}

wire::NodeStatusData Requester::status_of(const config::NodeMetadata& at,
                                          double timeout_seconds) {
  return impl_->status_of(at, timeout_seconds);
}

uint64_t Requester::push_stage(const config::NodeMetadata& at, const std::string& stage_path,
                               const std::string& metadata_json) {
  // Hashed first (the daemon checks the checksum against the metadata before anything
  // travels), then streamed from the file a chunk at a time.
  const std::string sha256 = config::sha256_file_hex(stage_path);
  std::error_code ec;
  const uint64_t size = fs::file_size(stage_path, ec);
  if (ec) throw std::runtime_error(stage_path + ": cannot read: " + ec.message());
  auto request = impl_->node(at).pushStageRequest();
  request.setMetadataJson(metadata_json);
  request.setSize(size);
  request.setSha256(sha256);
  impl_->send_file(request, stage_path, at, "push stage");
  return size;
}

std::vector<uint64_t> Requester::checkpoints(const config::NodeMetadata& at,
                                             const std::string& identity, int cluster,
                                             int position, double timeout_seconds) {
  auto request = impl_->node(at).checkpointsRequest();
  request.setIdentity(identity);
  request.setCluster(cluster);
  request.setPosition(position);
  auto response = impl_->await(request.send(), at, "list checkpoints", timeout_seconds);
  std::vector<uint64_t> updates;
  for (uint64_t u : response.getUpdates()) updates.push_back(u);
  return updates;
}

void Requester::fetch_checkpoint(const config::NodeMetadata& at, const std::string& identity,
                                 int cluster, int position, uint64_t updates,
                                 const std::string& path) {
  wire::FileDownload download(path);
  auto request = impl_->node(at).fetchCheckpointRequest();
  request.setIdentity(identity);
  request.setCluster(cluster);
  request.setPosition(position);
  request.setUpdates(updates);
  request.setSink(download.sink());
  auto response = impl_->await(request.send(), at, "fetch checkpoint", 120,
                               [&download]() { return download.received_bytes(); });
  try {
    download.keep(response.getSize(), response.getSha256());
  } catch (const std::exception& e) {
    throw std::runtime_error(at.name + ": the fetched checkpoint: " + e.what());
  }
}

void Requester::store_checkpoint(const config::NodeMetadata& at, const std::string& identity,
                                 int cluster, int position, uint64_t updates,
                                 const std::string& path) {
  const std::string sha256 = config::sha256_file_hex(path);
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) throw std::runtime_error(path + ": cannot read: " + ec.message());
  auto request = impl_->node(at).storeCheckpointRequest();
  request.setIdentity(identity);
  request.setCluster(cluster);
  request.setPosition(position);
  request.setUpdates(updates);
  request.setSize(size);
  request.setSha256(sha256);
  impl_->send_file(request, path, at, "store checkpoint");
}

uint64_t Requester::fetch_predictions(int node_id, const std::string& path) {
  for (const auto& meta : impl_->plan_.nodes) {
    if (meta.node_id != node_id) continue;
    wire::FileDownload download(path);
    auto request = impl_->node(meta).fetchPredictionsRequest();
    request.setSink(download.sink());
    auto response = impl_->await(request.send(), meta, "fetch predictions", 120,
                                 [&download]() { return download.received_bytes(); });
    try {
      download.keep(response.getSize(), response.getSha256());
    } catch (const std::exception& e) {
      throw std::runtime_error(meta.name + ": the fetched predictions: " + e.what());
    }
    return response.getSize();
  }
  throw std::runtime_error("no node " + std::to_string(node_id) + " in the plan");
}

Requester::Losses Requester::fetch_losses(int node_id) {
  for (const auto& meta : impl_->plan_.nodes) {
    if (meta.node_id != node_id) continue;
    auto request = impl_->node(meta).fetchLossesRequest();
    auto response = impl_->await(request.send(), meta, "fetch losses");
    return Losses{response.getText(), response.getValidation()};
  }
  throw std::runtime_error("no node " + std::to_string(node_id) + " in the plan");
}

}  // namespace ravnest::runtime
