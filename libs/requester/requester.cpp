#include "libs/requester/requester.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include <kj/async-io.h>
#include <kj/timer.h>
#include <nlohmann/json.hpp>

#include "libs/config/atomic_file.h"
#include "libs/config/clock.h"
#include "libs/config/job_files.h"
#include "libs/config/job_spec.h"
#include "libs/config/plan_layout.h"
#include "libs/config/sha256.h"
#include "libs/data/dataset.h"
#include "libs/requester/job_identity.h"
#include "libs/wire/peer_links.h"
#include "libs/wire/tensor_stream.h"
#include "libs/wire/transfer_codec.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::runtime {

namespace fs = std::filesystem;

namespace {

using config::now_seconds;

// "remote exception: std::exception: reason" -> "reason"
std::string remote_reason(const kj::Exception& e) {
  std::string text = e.getDescription().cStr();
  for (const char* prefix : {"remote exception: ", "std::exception: ", "(remote) "}) {
    for (auto at = text.find(prefix); at != std::string::npos; at = text.find(prefix)) {
      text.erase(at, std::strlen(prefix));
    }
  }
  return text;
}

using Log = std::function<void(const std::string&)>;

// The data is checked here, before anything is shipped: a bad file fails at the requester.
void check_job_data(const config::JobSpec& job, const Log& log) {
  auto train_data = data::load_dataset(job.data, data::Split::kTrain);
  log("training data: " + job.data.train.raw + " (" + std::to_string(train_data.size()) +
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
  bool active = true;
  std::function<void()> report;
};

void report(const Watch& watch) {
  if (watch.active && watch.report) watch.report();
}

// One event a daemon sent, folded into the watch.
void apply_event(Watch& watch, const wire::NodeEvent& sent, const Log& on_log) {
  const auto& e = sent.event;
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
  }
}

}  // namespace

std::vector<int> Plan::cluster_ids() const {
  std::set<int> ids;
  for (const auto& n : nodes) ids.insert(n.cluster);
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
  Impl(Plan plan, std::string secret) : plan_(std::move(plan)), links_(std::move(secret)) {}

  schema::Node::Client node(const config::NodeMetadata& meta) { return links_.node(meta.address); }

  // Every connection runs on this thread's event loop: any one gives its wait scope and timer.
  kj::WaitScope& wait_scope() {
    return links_.any_client(plan_.nodes.front().address).getWaitScope();
  }
  kj::Timer& timer() {
    return links_.any_client(plan_.nodes.front().address).getIoProvider().getTimer();
  }

  capnp::Data::Reader secret() const { return links_.secret(); }

  // Waits for `promise`, failing with a message naming the node.
  template <typename T>
  T await(kj::Promise<T>&& promise, const config::NodeMetadata& meta, const std::string& what,
          double timeout_seconds = 120) {
    auto timeout = timer()
                       .afterDelay(static_cast<uint64_t>(timeout_seconds * 1000) * kj::MILLISECONDS)
                       .then([]() -> T {
                         kj::throwFatalException(KJ_EXCEPTION(DISCONNECTED, "no answer in time"));
                       });
    try {
      return promise.exclusiveJoin(kj::mv(timeout)).wait(wait_scope());
    } catch (const kj::Exception& e) {
      throw std::runtime_error(meta.name + " (" + meta.address + "): " + what + ": " +
                               remote_reason(e));
    }
  }

  // The node's status; fails like await().
  wire::NodeStatusData status_of(const config::NodeMetadata& meta, double timeout_seconds) {
    auto response = await(node(meta).statusRequest().send(), meta, "status", timeout_seconds);
    return wire::decode_status(response.getStatus());
  }

  // The phases of Requester::train(), in order.
  void ship_job_files(const config::JobSpec& job, const Log& log);
  void load_job(const std::string& job_text, uint64_t job_id, const std::string& identity,
                uint64_t resume_from);
  void subscribe(const std::shared_ptr<Watch>& watch, const Log& on_log);
  void start(uint64_t job_id);
  void watch_until_done(Watch& watch, uint64_t job_id, double unresponsive_seconds);

  // Best effort: a node that cannot be reached in `timeout_seconds` is left alone.
  void stop_all(const std::string& reason, double timeout_seconds = 3);
  // The newest update after which every node holds a checkpoint of the job `identity`.
  uint64_t resume_point(const std::string& identity);
  // await(), but a failure stops every node first: no job runs on part of the plan.
  void await_or_stop_all(kj::Promise<void>&& promise, const config::NodeMetadata& meta,
                         const std::string& what) {
    try {
      await(kj::mv(promise), meta, what);
    } catch (const std::exception& e) {
      stop_all(e.what());
      throw;
    }
  }

  Plan plan_;
  wire::PeerLinks links_;  // one connection per node, kept
};

// Ships each node the files it needs.
void Requester::Impl::ship_job_files(const config::JobSpec& job, const Log& log) {
  for (const auto& meta : plan_.nodes) {
    for (const auto& path : config::job_files_for(job, meta)) {
      std::vector<fs::path> files;
      if (fs::is_directory(path)) {
        for (const auto& entry : fs::directory_iterator(path)) {
          if (entry.is_regular_file()) files.push_back(entry.path());
        }
      } else {
        files.push_back(path);
      }
      for (const auto& file : files) {
        auto bytes = std::make_shared<std::string>(config::read_file(file.string()));
        auto request = node(meta).pushFileRequest();
        request.setSecret(secret());
        request.setName(file.filename().string());
        request.setSize(bytes->size());
        request.setSha256(config::sha256_hex(*bytes));
        auto sink = request.send().getSink();
        await(wire::stream_bytes(sink, kj::ArrayPtr<const kj::byte>(
                                           reinterpret_cast<const kj::byte*>(bytes->data()),
                                           bytes->size()))
                  .attach(kj::heap<std::shared_ptr<std::string>>(bytes)),
              meta, "ship " + file.filename().string());
        log("shipped " + file.filename().string() + " to " + meta.name);
      }
    }
  }
}

// Loads the job everywhere first: a node that refuses it fails the job before anything runs.
void Requester::Impl::load_job(const std::string& job_text, uint64_t job_id,
                               const std::string& identity, uint64_t resume_from) {
  for (const auto& meta : plan_.nodes) {
    auto request = node(meta).loadJobRequest();
    request.setSecret(secret());
    request.setJobToml(job_text);
    request.setJobId(job_id);
    request.setIdentity(identity);
    request.setResumeFrom(resume_from);
    await_or_stop_all(request.send().ignoreResult(), meta, "load job");
  }
}

// Gives every node a listener for its progress events.
void Requester::Impl::subscribe(const std::shared_ptr<Watch>& watch, const Log& on_log) {
  for (const auto& meta : plan_.nodes) {
    auto request = node(meta).subscribeRequest();
    request.setSecret(secret());
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
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.position > b.position; });
  for (const auto& meta : order) {
    auto request = node(meta).startRequest();
    request.setSecret(secret());
    request.setJobId(job_id);
    await_or_stop_all(request.send().ignoreResult(), meta, "start");
  }
}

// Events as they come, and every node's status twice a second, until every node finished. A
// node that does not answer for `unresponsive_seconds` fails the job; a failure stops every node.
void Requester::Impl::watch_until_done(Watch& watch, uint64_t job_id,
                                       double unresponsive_seconds) {
  auto& failure = watch.failure;
  std::map<int, double> last_heard;
  for (const auto& meta : plan_.nodes) last_heard[meta.node_id] = now_seconds();
  while (true) {
    timer().afterDelay(500 * kj::MILLISECONDS).wait(wait_scope());
    for (const auto& meta : plan_.nodes) {
      try {
        const auto s = status_of(meta, 2);
        last_heard[meta.node_id] = now_seconds();
        if (s.job_id != job_id) {
          failure = meta.name + " (" + meta.address + ") is no longer running the job (restarted?)";
        } else if (s.state == wire::NodeState::kFailed && failure.empty()) {
          failure = meta.name + ": " + s.error;
        } else if (s.state == wire::NodeState::kFinished) {
          watch.finished.insert(meta.node_id);
        }
        if (meta.position == 0) {
          auto& p = watch.progress[meta.cluster];
          p.batches = s.batches;
          p.total_batches = s.total_batches;
          p.samples_per_second = s.samples_per_second;
          p.epoch = std::max(p.epoch, s.epoch);
        }
      } catch (const std::exception& e) {
        if (now_seconds() - last_heard[meta.node_id] > unresponsive_seconds && failure.empty()) {
          failure = meta.name + " (" + meta.address + ") stopped answering: " + e.what();
        }
      }
    }
    report(watch);
    if (!failure.empty()) {
      stop_all(failure);
      throw std::runtime_error("training failed: " + failure);
    }
    if (watch.finished.size() == plan_.nodes.size()) break;
  }
}

uint64_t Requester::Impl::resume_point(const std::string& identity) {
  std::set<uint64_t> common;
  bool first = true;
  for (const auto& meta : plan_.nodes) {
    auto request = node(meta).checkpointsRequest();
    request.setSecret(secret());
    request.setIdentity(identity);
    auto response = await(request.send(), meta, "list checkpoints", 30);
    std::set<uint64_t> held;
    for (uint64_t u : response.getUpdates()) held.insert(u);
    if (held.empty()) {
      throw std::runtime_error(meta.name + " (" + meta.address +
                               ") holds no checkpoint of this job; run it without --resume");
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
      throw std::runtime_error("no checkpoint of this job is held by every node (" + meta.name +
                               " has none in common with the others); run it without --resume");
    }
  }
  return *common.rbegin();
}

void Requester::Impl::stop_all(const std::string& reason, double timeout_seconds) {
  for (const auto& meta : plan_.nodes) {
    try {
      auto request = node(meta).stopRequest();
      request.setSecret(secret());
      request.setReason(reason);
      await(request.send().ignoreResult(), meta, "stop", timeout_seconds);
    } catch (const std::exception&) {
      // A node that cannot be reached cannot be stopped; the others are.
    }
  }
}

Requester::Requester(Plan plan, std::string secret)
    : impl_(std::make_unique<Impl>(std::move(plan), std::move(secret))) {}
Requester::~Requester() = default;

void Requester::push(const std::function<void(const std::string&)>& log) {
  const config::PlanLayout layout(impl_->plan_.dir);
  for (const auto& meta : impl_->plan_.nodes) {
    const std::string stage = config::read_file(layout.resolve(meta.stage_file));
    const std::string metadata = config::read_file(layout.node_file(meta.node_id));
    auto request = impl_->node(meta).pushStageRequest();
    request.setSecret(impl_->secret());
    request.setMetadataJson(metadata);
    request.setStage(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(stage.data()),
                                         stage.size()));
    request.setSha256(config::sha256_hex(stage));
    impl_->await(request.send().ignoreResult(), meta, "push stage");
    log("pushed " + meta.stage_file + " (" + std::to_string(stage.size()) + " bytes) to " +
        meta.name + " at " + meta.address);
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
    } catch (const std::exception& e) {
      report.state = "unreachable";
      report.error = e.what();
    }
    reports.push_back(report);
  }
  return reports;
}

void Requester::stop_all(const std::string& reason) { impl_->stop_all(reason); }

TrainResult Requester::train(const std::string& job_path, const TrainOptions& options) {
  auto log = [&](const std::string& line) {
    if (options.log) options.log(line);
  };
  const config::JobSpec job = config::load_job(job_path);
  const std::string job_text = config::read_file(job_path);
  check_job_data(job, log);

  TrainResult result;
  result.job_id = std::random_device{}() ^ (static_cast<uint64_t>(std::time(nullptr)) << 20);
  auto& plan = impl_->plan_;
  const std::string identity = job_identity(job_text, plan);
  if (options.resume) {
    // Nodes still on the interrupted job stop it, writing a checkpoint of its last update.
    impl_->stop_all("the job is being resumed", 60);
    result.resumed_from = impl_->resume_point(identity);
    log("resuming after update " + std::to_string(result.resumed_from) +
        ", the newest checkpoint every node holds");
  }
  impl_->ship_job_files(job, log);
  impl_->load_job(job_text, result.job_id, identity, result.resumed_from);
  remember_job(plan.dir, job_path);

  auto watch = std::make_shared<Watch>();
  struct Deactivate {
    std::shared_ptr<Watch> watch;
    ~Deactivate() { watch->active = false; watch->report = nullptr; }
  } deactivate{watch};
  for (int id : plan.cluster_ids()) watch->progress[id].cluster = id;
  const double started = now_seconds();
  watch->report = [&]() {
    if (!options.on_progress) return;
    std::vector<TrainProgress> all;
    for (auto& [id, p] : watch->progress) {
      p.elapsed_seconds = now_seconds() - started;
      all.push_back(p);
    }
    options.on_progress(all);
  };
  if (!options.detach) impl_->subscribe(watch, options.log);

  impl_->start(result.job_id);
  log("job " + std::to_string(result.job_id) + " started on " + std::to_string(plan.nodes.size()) +
      " node(s)");
  if (options.detach) return result;

  impl_->watch_until_done(*watch, result.job_id, options.unresponsive_seconds);
  result.seconds = now_seconds() - started;
  for (auto& [id, p] : watch->progress) result.clusters.push_back(p);
  return result;
}

std::vector<Requester::FetchedStage> Requester::fetch_cluster(int cluster) {
  std::vector<FetchedStage> stages;
  for (const auto& meta : impl_->plan_.cluster(cluster)) {
    auto request = impl_->node(meta).fetchStageRequest();
    request.setSecret(impl_->secret());
    auto response = impl_->await(request.send(), meta, "fetch stage");
    auto bytes = response.getStage();
    FetchedStage stage;
    stage.metadata = config::node_metadata_from_json(response.getMetadataJson(),
                                                     meta.name + " metadata");
    stage.bytes.assign(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
    if (config::sha256_hex(stage.bytes) != std::string(response.getSha256().cStr())) {
      throw std::runtime_error(meta.name + ": fetched stage fails its checksum");
    }
    stages.push_back(std::move(stage));
  }
  if (stages.empty()) throw std::runtime_error("no cluster " + std::to_string(cluster) + " in the plan");
  return stages;
}

std::string Requester::fetch_losses(int node_id) {
  for (const auto& meta : impl_->plan_.nodes) {
    if (meta.node_id != node_id) continue;
    auto request = impl_->node(meta).fetchLossesRequest();
    request.setSecret(impl_->secret());
    return impl_->await(request.send(), meta, "fetch losses").getText();
  }
  throw std::runtime_error("no node " + std::to_string(node_id) + " in the plan");
}

}  // namespace ravnest::runtime
