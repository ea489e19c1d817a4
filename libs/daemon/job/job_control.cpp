#include "libs/daemon/job/job_control.h"

#include <cstdio>
#include <cstdlib>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <algorithm>
#include <sstream>

#include <asio/post.hpp>
#include <spdlog/spdlog.h>

#include "libs/base/clock.h"
#include "libs/base/printable.h"
#include "libs/config/job/job_spec.h"
#include "libs/daemon/rpc/thread_bridge.h"
#include "libs/wire/kj_reason.h"
#include "libs/config/plan/node_metadata.h"
#include "libs/wire/node_report_codec.h"
#include "libs/worker/compute_device.h"
#include "libs/worker/compute_threads.h"
#include "libs/worker/job_setup.h"

namespace ravnest::daemon {

using wire::NodeState;

JobControl::JobControl(store::NodeStore& store, asio::io_context& compute, RingMember& rings,
                       wire::PeerLinks& links, wire::WireTraffic& traffic, RpcThread& rpc,
                       WorkerInbox& inbox, worker::WorkerPort& port, int threads,
                       const std::string& device, int64_t memory_limit)
    : threads_(threads),
      device_(device),
      store_(store),
      compute_(compute),
      rings_(rings),
      links_(links),
      traffic_(traffic),
      inbox_(inbox),
      port_(port),
      checkpoints_(std::make_shared<store::CheckpointStore>(store.checkpoints_dir())),
      events_(store),
      rpc_(rpc),
      peers_(links, rpc),
      memory_(memory_limit, rpc) {
  if (store_.has_stage()) {
    try {
      metadata_ = store_.metadata();
      inbox_.set_role(metadata_.role);
      links_.security()->set_pins(metadata_.tls_fingerprints);
    } catch (const std::exception& e) {
      spdlog::warn("stored metadata unreadable: {}", e.what());
    }
  }
  std::optional<store::LastJob> last;
  try {
    last = store::load_last_job(store_.last_job_path());
  } catch (const std::exception& e) {
    spdlog::warn("{}", e.what());
  }
  if (!last) return;
  job_id_ = last->job_id;
  switch (last->outcome) {
    case store::LastJob::Outcome::kRunning:
      state_ = NodeState::kFailed;
      error_ = "ravnestd stopped during the job (killed, or restarted)";
      spdlog::warn("job {} failed: {}", job_id_, error_);
      events_.record(store::LastJob::Outcome::kFailed, job_id_, error_);
      break;
    case store::LastJob::Outcome::kFinished: state_ = NodeState::kFinished; break;
    case store::LastJob::Outcome::kFailed:
      state_ = NodeState::kFailed;
      error_ = last->error;
      break;
    case store::LastJob::Outcome::kStopped:
      state_ = NodeState::kIdle;
      error_ = "stopped by the requester: " + last->error;
      break;
  }
}

namespace {

// "field<TAB>location" lines (StageCheckpoint::data) as a map.
std::map<std::string, std::string> data_lines(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto tab = line.find('\t');
    if (tab != std::string::npos) out[line.substr(0, tab)] = line.substr(tab + 1);
  }
  return out;
}

// A resume trains on the data its checkpoint was made with, or not at all: a file changed at
// the same path ships as another bundle (named by its contents' SHA-256).
void check_same_data(const training::StageCheckpoint& from, const std::map<std::string, std::string>& shipped,
                     const config::JobSpec& job) {
  if (from.data.empty()) return;  // written before checkpoints recorded it
  const auto then = data_lines(from.data);
  const std::map<std::string, std::string> raw = {{"data.train", job.data.train.raw},
                                                  {"data.validation", job.data.validation.raw},
                                                  {"data.order", job.data.order.raw},
                                                  {"loss.path", job.loss.path.raw}};
  for (const auto& [field, location] : then) {
    auto now = shipped.find(field);
    if (now != shipped.end() && now->second == location) continue;
    auto path = raw.find(field);
    const std::string named = path != raw.end() ? " (" + base::printable(path->second, 200) + ")" : "";
    throw std::runtime_error(
        field + named + " is not the data the checkpoint after update " +
        std::to_string(from.updates) + " was trained on (its files hash to " +
        (now == shipped.end() ? std::string("nothing shipped") : now->second.substr(0, 12)) +
        ", then to " + location.substr(0, 12) +
        "): resume refused; restore the data, or `ravnest train` starts the job afresh");
  }
}

}  // namespace

double hold_limit_seconds() {
  double limit = 300;
  if (const char* text = std::getenv("RAVNEST_HOLD_SECONDS")) {
    const double asked = std::strtod(text, nullptr);
    if (asked > 0) limit = std::min(asked, 86400.0);
  }
  return limit;
}

kj::Promise<void> JobControl::load_job(LoadJobCall context) {
  auto params = context.getParams();
  const std::string text = params.getJobToml();
  const uint64_t job_id = params.getJobId();
  const std::string identity = params.getIdentity();
  const uint64_t resume_from = params.getResumeFrom();
  // A plan that grew while the job ran resumes from the checkpoints of the job as it was.
  const std::string resume_identity =
      params.getResumeIdentity().size() > 0 ? std::string(params.getResumeIdentity()) : identity;
  std::map<std::string, std::string> shipped;
  for (auto path : params.getShipped()) shipped[path.getField()] = path.getLocation();
  checked([&] {
    if (!identity.empty()) store::CheckpointStore::check_identity(identity);
    if (resume_identity != identity) store::CheckpointStore::check_identity(resume_identity);
    if (resume_from > 0 && identity.empty()) {
      throw std::runtime_error("a job to resume needs its identity");
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (effective_state(nullptr) == NodeState::kTraining) {
      throw std::runtime_error("busy: a job is running");
    }
    if (!store_.has_stage()) throw std::runtime_error("no stage stored: run `ravnest push` first");
  });
  peers_.stop();
  events_.forget_listeners();
  rings_.mailbox().reset();
  rings_.views().reset();
  inbox_.reset();
  links_.drop_all();  // and new connections: a peer may have restarted since the last job
  traffic_.reset();
  return on_compute(compute_, [this, text, job_id, identity, resume_identity, resume_from,
                                shipped]() {
    rings_.end_job();
    auto job = store_.locate_shipped(config::parse_job(text, "job"), shipped);
    auto made = worker::make_worker_setup(store_, job, job_id, training::compute_device(device_));
    worker::WorkerSetup* setup = &made->common;  // the checkpoints every role shares
    for (const auto& [field, location] : shipped) setup->data += field + "\t" + location + "\n";
    if (!identity.empty()) {
      setup->checkpoints = checkpoints_;
      setup->identity = identity;
      if (resume_from > 0) {
        setup->resume = checkpoints_->read(resume_identity, resume_from, setup->node.cluster,
                                            setup->node.position);
        setup->resume->identity = identity;  // what it writes from now on is the job's
        check_same_data(*setup->resume, shipped, job);
        // A take-in (the plan grew): whatever the grown identity holds was left by another run
        // of the same job grown the same way; kept, its higher updates and `finished` would
        // outrank every checkpoint this run writes (docs/faults.md#providers-that-come-and-go).
        if (resume_identity != identity) checkpoints_->clear(identity);
      } else {
        checkpoints_->clear(identity);  // a fresh start: older checkpoints of it are stale
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    pending_setup_ = std::shared_ptr<worker::JobSetup>(std::move(made));
    inbox_.clear();
    job_id_ = job_id;
    state_ = NodeState::kReady;
    error_.clear();
  }).then([job_id, resume_from]() {
    if (resume_from > 0) {
      spdlog::info("job {} loaded, resuming after update {}", job_id, resume_from);
    } else {
      spdlog::info("job {} loaded", job_id);
    }
  });
}

kj::Promise<void> JobControl::start(StartCall context) {
  auto params = context.getParams();
  const uint64_t job_id = params.getJobId();
  return on_compute(compute_, [this, job_id]() {
    std::shared_ptr<worker::JobSetup> setup;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (state_ != NodeState::kReady || job_id != job_id_ || !pending_setup_) {
        throw std::runtime_error("no job " + std::to_string(job_id) + " loaded");
      }
      setup = std::move(pending_setup_);
    }
    // A daemon that dies from here on is found to have failed the job when it starts again.
    save_last_job(store_.last_job_path(), store::LastJob{job_id, store::LastJob::Outcome::kRunning, ""});
    const int threads = worker::apply_compute_threads(threads_, &metadata_);
    spdlog::info("compute threads: {}{}", threads, threads_ > 0 ? "" : " (the cores divided among the plan's daemons on this host)");
    // The job's address book, once: its sends look their peers up in it.
    inbox_.set_addresses(config::peer_addresses(metadata_));
    std::shared_ptr<worker::JobWorker> worker = make_job_worker(std::move(*setup), port_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      inbox_.set(worker);
      state_ = NodeState::kTraining;
    }
    spdlog::info("job {} started", job_id);
    // Reply to start() before the first batch runs; a job stopped meanwhile never starts.
    asio::post(compute_, [this, started = std::weak_ptr<worker::JobWorker>(worker)]() {
      auto worker = started.lock();
      if (!worker || worker != inbox_.current()) return;
      worker->start();
    });
  }).then([this, job_id]() {
    watch_peers(job_id);
    watch_memory(job_id);
  });
}

bool JobControl::running(uint64_t job_id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return job_id_ == job_id && effective_state(nullptr) == NodeState::kTraining;
}

void JobControl::watch_memory(uint64_t job_id) {
  memory_.watch(
      store_.node_name(), [this, job_id]() { return running(job_id); },
      [this](const std::string& message) {
        wire::ProgressEventData event;
        event.kind = wire::EventKind::kWarning;
        event.message = message;
        publish(event);
      });
}

// Every other node of the cluster and each ring's neighbours: the nodes whose silence would leave
// this one waiting (a ring member further away that goes silent stalls a neighbour, whose watch
// then fails its reduce and tells its own neighbours, around the ring).
void JobControl::watch_peers(uint64_t job_id) {
  std::map<std::string, std::string> by_address;
  for (const auto& [id, address] : config::peer_addresses(metadata_)) {
    if (id != metadata_.node_id) by_address.emplace(address, config::node_name(id));
  }
  for (const auto& ring : metadata_.rings) {
    for (const config::RingPeer* peer : {&ring.next, &ring.prev}) {
      if (peer->node != metadata_.node_id) {
        by_address.emplace(peer->address, config::node_name(peer->node));
      }
    }
  }
  std::vector<PeerWatch::Peer> peers;
  const auto others = other_clusters_ring_peers();
  for (const auto& [address, name] : by_address) {
    // Members of other clusters are the requester's to drop when it coordinates the rings.
    if (rings_.views().coordinated() && others.count(address)) continue;
    peers.push_back({name, address});
  }
  peers_.watch(
      job_id, std::move(peers), [this, job_id]() { return running(job_id); },
      [this](const std::string& why) {
        spdlog::error("{}", why);
        inbox_.fail(why);
      },
      [this, job_id](const std::string& reason) {
        // The requester stopped the job everywhere while this node could not hear it (frozen,
        // cut off): it stops as if told.
        tasks_.add(stop_job(job_id, reason));
      });
}

std::set<std::string> JobControl::other_clusters_ring_peers() const {
  std::set<std::string> pipeline;
  for (const auto& [id, address] : config::peer_addresses(metadata_)) pipeline.insert(address);
  std::set<std::string> others;
  for (const auto& ring : metadata_.rings) {
    for (const config::RingPeer* peer : {&ring.next, &ring.prev}) {
      if (peer->cluster != metadata_.cluster && !pipeline.count(peer->address)) {
        others.insert(peer->address);
      }
    }
  }
  return others;
}

std::string JobControl::job_mismatch(uint64_t job_id, bool loaded) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (loaded) {
    const auto state = effective_state(nullptr);
    if (job_id != job_id_ || (state != NodeState::kTraining && state != NodeState::kReady)) {
      return "job " + std::to_string(job_id) +
             " is not loaded or running here (this node's job is " + std::to_string(job_id_) + ")";
    }
  } else if (job_id != job_id_) {
    return "job " + std::to_string(job_id) + " is not this node's (" + std::to_string(job_id_) +
           ")";
  }
  return "";
}

void JobControl::stop_watching_other_clusters() { peers_.forget(other_clusters_ring_peers()); }

void JobControl::abandon_job() {
  const std::shared_ptr<worker::JobWorker> worker = inbox_.current();
  if (worker) {
    try {
      worker->checkpoint_on_stop();
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
    }
  }
  rings_.end_job();
  std::lock_guard<std::mutex> lock(mutex_);
  // A finished job stays finished (its trained stage is whole); any other goes idle, keeping the
  // reason a failed one gave.
  std::string error;
  const NodeState reached = effective_state(&error);
  inbox_.clear();
  pending_setup_.reset();
  if (reached == NodeState::kFinished) {
    state_ = NodeState::kFinished;
  } else if (reached == NodeState::kFailed || state_ == NodeState::kTraining ||
             state_ == NodeState::kReady) {
    state_ = NodeState::kIdle;
    if (reached == NodeState::kFailed) error_ = error;
  }
}

void JobControl::defer(std::function<void()> task) {
  const std::weak_ptr<worker::JobWorker> asking = inbox_.current();
  asio::post(compute_, [this, asking, task = std::move(task)]() {
    // Kept alive while the task runs; a worker abandoned meanwhile is gone or no longer current.
    const auto worker = asking.lock();
    if (!worker || worker != inbox_.current()) return;
    task();
  });
}

kj::Promise<void> JobControl::stop(StopCall context) {
  auto params = context.getParams();
  // Logged, kept in last_job.json and shown by `ravnest status`: one line, at most 1000 bytes.
  std::string reason = base::printable(std::string(params.getReason()), 1000);
  if (reason.empty()) reason = "no reason given";
  // Counted until answered: a daemon shutting down waits for the answer to leave before its
  // connections close (ask_requester_to_stop), else the requester hears "connection reset".
  ++stops_answering_;
  return stop_job(params.getJobId(), reason).attach(kj::defer([this]() { --stops_answering_; }));
}

kj::Promise<void> JobControl::hold(HoldCall context) {
  auto params = context.getParams();
  std::shared_ptr<worker::JobWorker> worker;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (params.getJobId() == job_id_ && effective_state(nullptr) == NodeState::kTraining) {
      worker = inbox_.current();
    }
  }
  // Outside the lock: the worker wakes its feeding through defer(), which takes it.
  const std::optional<uint64_t> holds =
      worker ? worker->hold(params.getTarget()) : std::optional<uint64_t>();
  auto results = context.getResults();
  results.setHolds(holds.has_value());
  if (holds) {
    results.setUpdates(*holds);
    spdlog::info("job {} holds after update {}", params.getJobId(), *holds);
    bound_hold(params.getJobId(), *holds);
  }
  return kj::READY_NOW;
}

void JobControl::bound_hold(uint64_t job_id, uint64_t boundary) {
  const uint64_t hold = ++holds_;
  const double limit = hold_limit_seconds();
  tasks_.add(rpc_.timer()
                 .afterDelay(static_cast<uint64_t>(limit * 1000) * kj::MILLISECONDS)
                 .then([this, job_id, boundary, hold, limit]() -> kj::Promise<void> {
                   if (hold != holds_ || !running(job_id)) return kj::READY_NOW;
                   char seconds[32];
                   std::snprintf(seconds, sizeof seconds, "%g", limit);
                   const std::string reason =
                       store_.node_name() + " held job " + std::to_string(job_id) +
                       " after update " + std::to_string(boundary) + " and no stop came within " +
                       seconds + " s (the requester that held it went away): every node of its " +
                       "cluster stopped there; `ravnest resume` continues it";
                   spdlog::warn("{}", reason);
                   // The others of the cluster first (each writes its checkpoint of the held
                   // update); a node that misses it learns of the stop from this one (PeerWatch).
                   for (const auto& [id, address] : metadata_.addresses) {
                     if (id == metadata_.node_id) continue;
                     auto request = links_.node(address).stopRequest();
                     request.setJobId(job_id);
                     request.setReason(reason);
                     tasks_.add(request.send().ignoreResult());
                   }
                   return stop_job(job_id, reason);
                 }));
}

kj::Promise<void> JobControl::stop_job(uint64_t job_id, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (job_id != 0 && job_id != job_id_) {
      spdlog::info("stop of job {} ignored: this node's job is {}", job_id, job_id_);
      return kj::READY_NOW;
    }
  }
  spdlog::warn("job stopped by the requester: {}", reason);
  // A worker blocked in a reduce holds the compute thread: wake it first (and one waiting for a
  // new ring membership: none comes for a stopped job).
  rings_.views().end();
  rings_.mailbox().abort_all("the job was stopped by the requester: " + reason);
  inbox_.abort("the job was stopped by the requester: " + reason);
  return on_compute(compute_, [this, job_id, reason]() {
    uint64_t stopped = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (job_id != 0 && job_id != job_id_) return;  // another job was loaded meanwhile
      const NodeState state = effective_state(nullptr);
      if (state == NodeState::kTraining || state == NodeState::kReady) stopped = job_id_;
    }
    abandon_job();
    if (stopped == 0) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = "stopped by the requester: " + reason;
    }
    events_.record(store::LastJob::Outcome::kStopped, stopped, reason);
  });
}

namespace {

// This process's resident memory, from /proc/self/statm (0 where there is none).
uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace

kj::Promise<void> JobControl::status(StatusCall context) {
  wire::NodeStatusData out;
  out.node = store_.node_name();
  out.has_stage = store_.has_stage();
  if (out.has_stage) {
    out.node_id = metadata_.node_id;
    out.cluster = metadata_.cluster;
    out.role = config::role_name(metadata_.role);
    out.stage_sha256 = metadata_.stage_sha256;
    // A stat and a small file: cheap enough for every status call.
    out.stage_problem = store_.stage_problem();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out.job_id = job_id_;
    out.state = effective_state(&out.error);
    if (const auto worker = inbox_.current()) {
      const worker::WorkerStatus w = worker->status();
      out.epoch = w.epoch;
      out.updates = w.updates;
      out.batches = w.batches;
      out.total_batches = w.total_batches;
      out.last_loss = w.last_loss;
      out.samples_per_second = w.samples_per_second;
      out.busy_seconds = w.busy_seconds;
      out.running_seconds = w.running_seconds;
    }
  }
  out.traffic = traffic_.snapshot();
  out.resident_bytes = resident_bytes();
  const config::MemoryReading memory = memory_.read();
  out.memory_limit_bytes = static_cast<uint64_t>(memory.budget.bytes);
  out.memory_limit_source = memory.budget.source;
  out.memory_baseline_bytes = static_cast<uint64_t>(memory_.baseline_bytes());
  out.memory_used_bytes = static_cast<uint64_t>(memory.use.used_bytes);
  out.memory_peak_bytes = static_cast<uint64_t>(memory.use.peak_bytes);
  wire::encode_status(out, context.getResults().initStatus());
  return kj::READY_NOW;
}

void JobControl::publish(const wire::ProgressEventData& event) {
  uint64_t job_id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_id = job_id_;
  }
  events_.publish(event, metadata_, job_id);
}

void JobControl::metadata_stored() {
  metadata_ = store_.metadata();
  inbox_.set_role(metadata_.role);
  // The plan's pinned certificates: what this node's peers must show it.
  links_.security()->set_pins(metadata_.tls_fingerprints);
}

void JobControl::stage_stored() {
  metadata_stored();
  // A new stage: no job has run on it (its last_job.json went with the old one), and no job
  // finished on it: `ravnest resume` continues from the checkpoints instead of saying it did.
  checkpoints_->forget_finished();
  std::lock_guard<std::mutex> lock(mutex_);
  inbox_.clear();
  state_ = NodeState::kIdle;
  job_id_ = 0;
  error_.clear();
}

bool JobControl::training() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return effective_state(nullptr) == NodeState::kTraining;
}

bool JobControl::busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const NodeState state = effective_state(nullptr);
  return state == NodeState::kTraining || state == NodeState::kReady;
}

NodeState JobControl::effective_state(std::string* error) const {
  NodeState state = state_;
  if (error) *error = error_;
  const auto worker = state == NodeState::kTraining ? inbox_.current() : nullptr;
  if (worker) {
    const worker::WorkerStatus w = worker->status();
    if (w.state == worker::WorkerStatus::State::kFinished) state = NodeState::kFinished;
    if (w.state == worker::WorkerStatus::State::kFailed) {
      state = NodeState::kFailed;
      if (error) *error = w.error;
    }
  }
  return state;
}

}  // namespace ravnest::daemon
