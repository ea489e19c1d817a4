#include "libs/daemon/node_service.h"

#include <chrono>
#include <fstream>
#include <thread>
#include <sstream>

#include <asio/post.hpp>
#include <spdlog/spdlog.h>

#include "libs/config/atomic_file.h"
#include "libs/config/job_spec.h"
#include "libs/config/secret.h"
#include "libs/config/sha256.h"
#include "libs/daemon/job_setup.h"
#include "libs/ring/ring_allreduce.h"
#include "libs/wire/tensor_stream.h"
#include "libs/wire/value_codec.h"

namespace ravnest::runtime {

namespace {


// Runs `body`, turning any std::exception into a KJ exception with the same message, so that
// the requester sees the reason and the daemon goes on serving.
template <typename Body>
auto checked(Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const kj::Exception&) {
    throw;
  } catch (const std::exception& e) {
    kj::throwFatalException(KJ_EXCEPTION(FAILED, e.what()));
  }
}

schema::Phase to_phase(bool validate) {
  return validate ? schema::Phase::VALIDATE : schema::Phase::TRAIN;
}

schema::TransferKind to_schema(TransferKind kind) {
  switch (kind) {
    case TransferKind::kActivations: return schema::TransferKind::ACTIVATIONS;
    case TransferKind::kGradients: return schema::TransferKind::GRADIENTS;
    case TransferKind::kLabels: return schema::TransferKind::LABELS;
    case TransferKind::kRandomState: return schema::TransferKind::RANDOM_STATE;
  }
  return schema::TransferKind::ACTIVATIONS;
}

TransferKind from_schema(schema::TransferKind kind) {
  switch (kind) {
    case schema::TransferKind::ACTIVATIONS: return TransferKind::kActivations;
    case schema::TransferKind::GRADIENTS: return TransferKind::kGradients;
    case schema::TransferKind::LABELS: return TransferKind::kLabels;
    case schema::TransferKind::RANDOM_STATE: return TransferKind::kRandomState;
  }
  throw std::runtime_error("unknown transfer kind");
}

schema::EventKind to_schema(EventKind kind) {
  switch (kind) {
    case EventKind::kStep: return schema::EventKind::STEP;
    case EventKind::kValidation: return schema::EventKind::VALIDATION;
    case EventKind::kFinished: return schema::EventKind::FINISHED;
    case EventKind::kFailed: return schema::EventKind::FAILED;
  }
  return schema::EventKind::STEP;
}

}  // namespace

NodeService::NodeService(NodeStore& store, std::string secret, asio::io_context& compute)
    : store_(store),
      secret_(std::move(secret)),
      compute_(compute) {
  if (store_.has_stage()) {
    try {
      metadata_ = store_.metadata();
    } catch (const std::exception& e) {
      spdlog::warn("stored metadata unreadable: {}", e.what());
    }
  }
}

NodeService::~NodeService() noexcept(false) = default;

void NodeService::taskFailed(kj::Exception&& exception) {
  spdlog::warn("background task failed: {}", exception.getDescription().cStr());
}

void NodeService::check_secret(capnp::Data::Reader secret, const char* method) {
  std::string_view given(reinterpret_cast<const char*>(secret.begin()), secret.size());
  if (!config::secrets_equal(given, secret_)) {
    spdlog::warn("refused {}: wrong or missing shared secret", method);
    kj::throwFatalException(KJ_EXCEPTION(FAILED, "unauthorized: wrong or missing shared secret"));
  }
}


kj::Promise<void> NodeService::on_compute(std::function<void()> work) {
  auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
  auto fulfiller = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<void>>>(
      kj::mv(paf.fulfiller));
  asio::post(compute_, [work = std::move(work), fulfiller]() {
    try {
      work();
      (*fulfiller)->fulfill();
    } catch (const std::exception& e) {
      (*fulfiller)->reject(KJ_EXCEPTION(FAILED, e.what()));
    }
  });
  return kj::mv(paf.promise);
}

// ---- requester -> daemon ----------------------------------------------------------------------

kj::Promise<void> NodeService::pushStage(PushStageContext context) {
  auto params = context.getParams();
  check_secret(params.getSecret(), "pushStage");
  checked([&] {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (effective_state(nullptr) == State::kTraining) {
        throw std::runtime_error("busy: a job is running");
      }
    }
    auto stage = params.getStage();
    store_.store_stage(params.getMetadataJson(),
                       std::string(reinterpret_cast<const char*>(stage.begin()), stage.size()),
                       params.getSha256());
    metadata_ = store_.metadata();
    spdlog::info("stored stage {} ({} bytes)", metadata_.stage_sha256.substr(0, 12), stage.size());
  });
  return kj::READY_NOW;
}

kj::Promise<void> NodeService::pushFile(PushFileContext context) {
  auto params = context.getParams();
  check_secret(params.getSecret(), "pushFile");
  const std::string name = params.getName();
  auto opened = checked([&] {
    store_.dataset_path(name);  // refuses names that are not plain file names
    return wire::FileSink::open(store_.dataset_dir(), name, params.getSize(), params.getSha256());
  });
  context.getResults().setSink(kj::mv(opened.sink));
  tasks_.add(opened.completion.then([name]() { spdlog::info("stored file {}", name); }));
  return kj::READY_NOW;
}

kj::Promise<void> NodeService::loadJob(LoadJobContext context) {
  auto params = context.getParams();
  check_secret(params.getSecret(), "loadJob");
  const std::string text = params.getJobToml();
  const uint64_t job_id = params.getJobId();
  checked([&] {
    std::lock_guard<std::mutex> lock(mutex_);
    if (effective_state(nullptr) == State::kTraining) {
      throw std::runtime_error("busy: a job is running");
    }
    if (!store_.has_stage()) throw std::runtime_error("no stage stored: run `ravnest push` first");
  });
  listeners_.clear();  // a new job, new listeners
  mailbox_.reset();
  return on_compute([this, text, job_id]() {
    auto job = config::parse_job(text, "job");
    auto setup = make_worker_setup(store_, job, job_id);
    std::lock_guard<std::mutex> lock(mutex_);
    pending_setup_ = std::shared_ptr<WorkerSetup>(std::move(setup));
    worker_.reset();
    job_id_ = job_id;
    state_ = State::kReady;
    error_.clear();
  }).then([job_id]() { spdlog::info("job {} loaded", job_id); });
}

kj::Promise<void> NodeService::start(StartContext context) {
  auto params = context.getParams();
  check_secret(params.getSecret(), "start");
  const uint64_t job_id = params.getJobId();
  return on_compute([this, job_id]() {
    std::shared_ptr<WorkerSetup> setup;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (state_ != State::kReady || job_id != job_id_ || !pending_setup_) {
        throw std::runtime_error("no job " + std::to_string(job_id) + " loaded");
      }
      setup = std::move(pending_setup_);
      state_ = State::kTraining;
    }
    auto worker = std::make_shared<StageWorker>(std::move(*setup), *this);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      worker_ = worker;
    }
    spdlog::info("job {} started", job_id);
    defer([worker]() { worker->start(); });  // reply to start() before the first batch runs
  });
}

void NodeService::abandon_job() {
  std::lock_guard<std::mutex> lock(mutex_);
  worker_.reset();
  pending_setup_.reset();
  if (state_ == State::kTraining || state_ == State::kReady) state_ = State::kIdle;
}

kj::Promise<void> NodeService::stop(StopContext context) {
  check_secret(context.getParams().getSecret(), "stop");
  std::string reason = context.getParams().getReason();
  if (reason.empty()) reason = "no reason given";
  spdlog::warn("job stopped by the requester: {}", reason);
  // A worker blocked in a reduce holds the compute thread: wake it first.
  mailbox_.abort_all("the job was stopped by the requester: " + reason);
  return on_compute([this]() { abandon_job(); });
}

kj::Promise<void> NodeService::status(StatusContext context) {
  auto out = context.getResults().initStatus();
  out.setNode(store_.node_name());
  out.setHasStage(store_.has_stage());
  if (store_.has_stage()) {
    out.setNodeId(metadata_.node_id);
    out.setCluster(metadata_.cluster);
    out.setRole(config::role_name(metadata_.role));
    out.setStageSha256(metadata_.stage_sha256);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  out.setJobId(job_id_);
  std::string error;
  const State state = effective_state(&error);
  if (worker_) {
    const WorkerStatus w = worker_->status();
    out.setEpoch(w.epoch);
    out.setStep(w.updates);
    out.setBatches(w.batches);
    out.setTotalBatches(w.total_batches);
    out.setLastLoss(w.last_loss);
    out.setSamplesPerSecond(w.samples_per_second);
  }
  switch (state) {
    case State::kIdle: out.setState(schema::NodeState::IDLE); break;
    case State::kReady: out.setState(schema::NodeState::READY); break;
    case State::kTraining: out.setState(schema::NodeState::TRAINING); break;
    case State::kFinished: out.setState(schema::NodeState::FINISHED); break;
    case State::kFailed: out.setState(schema::NodeState::FAILED); break;
  }
  out.setError(error);
  return kj::READY_NOW;
}

kj::Promise<void> NodeService::fetchStage(FetchStageContext context) {
  check_secret(context.getParams().getSecret(), "fetchStage");
  checked([&] {
    if (!store_.has_stage()) throw std::runtime_error("no stage stored");
    const auto path =
        std::filesystem::exists(store_.trained_path()) ? store_.trained_path() : store_.stage_path();
    const std::string bytes = config::read_file(path.string());
    auto results = context.getResults();
    results.setStage(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(bytes.data()),
                                         bytes.size()));
    results.setSha256(config::sha256_hex(bytes));
    results.setMetadataJson(config::read_file((store_.dir() / "metadata.json").string()));
  });
  return kj::READY_NOW;
}

kj::Promise<void> NodeService::subscribe(SubscribeContext context) {
  auto params = context.getParams();
  check_secret(params.getSecret(), "subscribe");
  listeners_.push_back(params.getListener());
  return kj::READY_NOW;
}

kj::Promise<void> NodeService::fetchLosses(FetchLossesContext context) {
  check_secret(context.getParams().getSecret(), "fetchLosses");
  context.getResults().setText(config::read_file(store_.losses_path().string()));
  return kj::READY_NOW;
}

// ---- daemon -> daemon -------------------------------------------------------------------------

kj::Promise<void> NodeService::send(SendContext context) {
  auto params = context.getParams();
  check_secret(params.getSecret(), "send");
  auto transfer = params.getTransfer();
  auto message = std::make_shared<TransferMessage>();
  std::vector<at::Tensor> pending;
  checked([&] {
    message->kind = from_schema(transfer.getKind());
    message->from_node = transfer.getFromNode();
    auto batch = transfer.getBatch();
    message->batch.job_id = batch.getJobId();
    message->batch.validate = batch.getPhase() == schema::Phase::VALIDATE;
    message->batch.step = batch.getStep();
    message->batch.index = batch.getIndex();
    message->batch.count = batch.getCount();
    message->batch.samples = batch.getSamples();
    message->batch.batch_samples = batch.getBatchSamples();
    message->batch.epoch = batch.getEpoch();
    message->batch.last = batch.getLast();
    for (auto& item : wire::decode_values(transfer, pending)) {
      message->values.emplace_back(item.index, std::move(item.value));
    }
  });
  if (pending.empty()) {
    deliver(std::move(*message));
    return kj::READY_NOW;
  }
  auto opened = wire::TensorSink::open(std::move(pending));
  context.getResults().setSink(kj::mv(opened.sink));
  tasks_.add(opened.completion.then([this, message]() { deliver(std::move(*message)); }));
  return kj::READY_NOW;
}

void NodeService::deliver(TransferMessage message) {
  auto shared = std::make_shared<TransferMessage>(std::move(message));
  asio::post(compute_, [this, shared]() {
    std::shared_ptr<StageWorker> worker;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      worker = worker_;
    }
    if (worker) worker->receive(std::move(*shared));
  });
}

schema::Node::Client NodeService::peer(int node_id) {
  auto address = metadata_.addresses.find(node_id);
  if (address == metadata_.addresses.end()) {
    throw std::runtime_error("no address for node " + std::to_string(node_id));
  }
  return links_.node(address->second);
}

// ---- rings ------------------------------------------------------------------------------------

namespace {

// Segments between daemons: each one costs two thread hops and a call, so they are larger than
// the algorithm's default. RAVNEST_RING_SEGMENT_BYTES overrides it (for benchmarks).
RingAllReduceOptions ring_options() {
  RingAllReduceOptions options;
  options.segment_bytes = size_t{4} << 20;
  if (const char* text = std::getenv("RAVNEST_RING_SEGMENT_BYTES")) {
    options.segment_bytes = std::max<size_t>(4096, std::strtoull(text, nullptr, 10));
  }
  return options;
}

// One ring's segments from its previous member. A segment's call stays open until the
// all-reduce has copied the bytes out of the message: one copy fewer, and the stream's flow
// control then also bounds what waits here.
class RingSinkImpl final : public schema::RingSink::Server {
 public:
  RingSinkImpl(RingMailbox& mailbox, uint32_t ring) : mailbox_(mailbox), ring_(ring) {}

 protected:
  kj::Promise<void> segment(SegmentContext context) override {
    auto params = context.getParams();
    auto data = params.getData();
    auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
    auto fulfiller = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<void>>>(
        kj::mv(paf.fulfiller));
    mailbox_.deposit_borrowed({ring_, params.getRound(), params.getStep(), params.getSegment()},
                              data.begin(), data.size(),
                              [fulfiller]() { (*fulfiller)->fulfill(); });
    return kj::mv(paf.promise);
  }

  kj::Promise<void> sync(SyncContext) override { return kj::READY_NOW; }

 private:
  RingMailbox& mailbox_;
  uint32_t ring_;
};

}  // namespace

kj::Promise<void> NodeService::openRing(OpenRingContext context) {
  auto params = context.getParams();
  check_secret(params.getSecret(), "openRing");
  context.getResults().setSink(kj::heap<RingSinkImpl>(mailbox_, params.getRing()));
  return kj::READY_NOW;
}

kj::Promise<void> NodeService::abortReduce(AbortReduceContext context) {
  auto params = context.getParams();
  check_secret(params.getSecret(), "abortReduce");
  mailbox_.abort(params.getRing(), params.getReason());
  return kj::READY_NOW;
}

namespace {

// Runs `body` on a thread of its own and resolves on the RPC thread when it is done.
kj::Promise<void> on_thread(std::function<void()> body) {
  auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
  auto fulfiller = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<void>>>(
      kj::mv(paf.fulfiller));
  std::thread([body = std::move(body), fulfiller]() {
    try {
      body();
      (*fulfiller)->fulfill();
    } catch (const std::exception& e) {
      (*fulfiller)->reject(KJ_EXCEPTION(FAILED, e.what()));
    }
  }).detach();
  return kj::mv(paf.promise);
}

}  // namespace

kj::Promise<void> NodeService::benchAllReduce(BenchAllReduceContext context) {
  auto params = context.getParams();
  check_secret(params.getSecret(), "benchAllReduce");
  std::vector<std::string> peers;
  for (auto p : params.getPeers()) peers.push_back(p);
  const uint32_t position = params.getPosition();
  const uint64_t bytes = params.getBytes();
  const uint32_t repetitions = params.getRepetitions();
  if (peers.empty() || position >= peers.size()) {
    kj::throwFatalException(KJ_EXCEPTION(FAILED, "benchAllReduce: position outside the peers"));
  }
  auto seconds = std::make_shared<std::vector<double>>();
  const uint32_t ring = 0xffffffffu;  // apart from the rings of any plan
  mailbox_.reset();
  return on_thread([this, peers, position, bytes, repetitions, seconds, ring]() {
           const size_t n = peers.size();
           RingLink link(*rpc_executor_, links_, *timer_, mailbox_, ring, -1,
                         {"peer " + std::to_string((position + 1) % n), peers[(position + 1) % n]},
                         {"peer " + std::to_string((position + n - 1) % n),
                          peers[(position + n - 1) % n]});
           RingAllReduce reduce(link, static_cast<int>(position), static_cast<int>(n), ring_options());
           std::vector<at::Tensor> tensors = {
               at::full({static_cast<int64_t>(bytes / 4)}, float(position + 1))};
           for (uint32_t r = 0; r <= repetitions; ++r) {
             const auto start = std::chrono::steady_clock::now();
             reduce.run(r, tensors);
             const double s =
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
             if (r > 0) seconds->push_back(s);  // the first is a warm-up
           }
         })
      .then([context, seconds]() mutable {
        auto out = context.getResults().initSeconds(seconds->size());
        for (size_t i = 0; i < seconds->size(); ++i) out.set(i, (*seconds)[i]);
      });
}

void NodeService::reduce_rings(uint64_t round, std::vector<RingWork>& work, bool average) {
  std::vector<std::string> errors(work.size());
  std::vector<std::thread> threads;
  for (size_t w = 0; w < work.size(); ++w) {
    threads.emplace_back([this, round, average, &work, &errors, w]() {
      const auto& ring = *work[w].ring;
      const size_t n = ring.peers.size();
      const auto& next = ring.peers[(ring.position + 1) % n];
      const auto& prev = ring.peers[(ring.position + n - 1) % n];
      try {
        RingLink link(*rpc_executor_, links_, *timer_, mailbox_, static_cast<uint32_t>(ring.id),
                      metadata_.node_id, {"node_" + std::to_string(next.node), next.address},
                      {"node_" + std::to_string(prev.node), prev.address});
        RingAllReduceOptions options = ring_options();
        options.average = average;
        RingAllReduce reduce(link, ring.position, static_cast<int>(n), options);
        reduce.run(round, work[w].tensors);
      } catch (const std::exception& e) {
        errors[w] = e.what();
        // Tell the other members, so that none of them waits for a round that cannot finish.
        const std::string reason = metadata_.name + ": " + e.what();
        try {
          rpc_executor_->executeSync([&]() {
            for (const auto& peer : ring.peers) {
              if (peer.node == metadata_.node_id) continue;
              auto request = links_.node(peer.address).abortReduceRequest();
              request.setSecret(links_.secret());
              request.setRing(static_cast<uint32_t>(ring.id));
              request.setReason(reason);
              tasks_.add(request.send().ignoreResult().catch_([](kj::Exception&&) {}));
            }
          });
        } catch (const kj::Exception&) {
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& error : errors) {
    if (!error.empty()) throw std::runtime_error(error);
  }
}

// ---- worker -> outside (compute thread) -------------------------------------------------------

void NodeService::send(TransferMessage message) {
  auto shared = std::make_shared<TransferMessage>(std::move(message));
  try {
    rpc_executor_->executeSync([this, shared]() { dispatch(std::move(*shared)); });
  } catch (const kj::Exception&) {
    // The RPC loop is gone: the daemon is shutting down.
  }
}

void NodeService::dispatch(TransferMessage message) {
  const int to = message.to_node;
  try {
    auto request = peer(to).sendRequest();
    request.setSecret(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(secret_.data()),
                                          secret_.size()));
    auto transfer = request.initTransfer();
    transfer.setKind(to_schema(message.kind));
    transfer.setFromNode(message.from_node);
    auto batch = transfer.initBatch();
    batch.setJobId(message.batch.job_id);
    batch.setPhase(to_phase(message.batch.validate));
    batch.setStep(message.batch.step);
    batch.setIndex(message.batch.index);
    batch.setCount(message.batch.count);
    batch.setSamples(message.batch.samples);
    batch.setBatchSamples(message.batch.batch_samples);
    batch.setEpoch(message.batch.epoch);
    batch.setLast(message.batch.last);
    std::vector<wire::IndexedIValue> values;
    for (auto& [index, value] : message.values) values.push_back({index, std::move(value)});
    auto encoded = std::make_shared<wire::EncodedTensors>(
        wire::encode_values(transfer, values, wire::kDefaultInlineLimit));
    auto sent = request.send();
    kj::Promise<void> done = nullptr;
    if (encoded->streamed.empty()) {
      done = sent.ignoreResult();
    } else {
      auto sink = sent.getSink();
      done = wire::stream_tensors(sink, encoded->streamed)
                 .then([sent = kj::mv(sent)]() mutable { return sent.ignoreResult(); });
    }
    tasks_.add(done.attach(kj::heap<std::shared_ptr<wire::EncodedTensors>>(encoded))
                   .catch_([this, to](kj::Exception&& e) {
                     const std::string why = "cannot send to node_" + std::to_string(to) + " (" +
                                             metadata_.addresses[to] +
                                             "): " + e.getDescription().cStr();
                     spdlog::error("{}", why);
                     fail_worker(why);
                   }));
  } catch (const std::exception& e) {
    const std::string why = "cannot send to node_" + std::to_string(to) + ": " + e.what();
    fail_worker(why);
  }
}

void NodeService::fail_worker(const std::string& why) {
  asio::post(compute_, [this, why]() {
    std::shared_ptr<StageWorker> worker;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      worker = worker_;
    }
    if (worker) worker->fail(why);  // outside the lock: fail() reports through the RPC thread
  });
}

NodeService::State NodeService::effective_state(std::string* error) const {
  State state = state_;
  if (error) *error = error_;
  if (worker_ && state == State::kTraining) {
    const WorkerStatus w = worker_->status();
    if (w.state == WorkerStatus::State::kFinished) state = State::kFinished;
    if (w.state == WorkerStatus::State::kFailed) {
      state = State::kFailed;
      if (error) *error = w.error;
    }
  }
  return state;
}

void NodeService::event(const ProgressEventData& event) {
  auto shared = std::make_shared<ProgressEventData>(event);
  try {
    rpc_executor_->executeSync([this, shared]() { publish(*shared); });
  } catch (const kj::Exception&) {
    // The RPC loop is gone: the daemon is shutting down.
  }
}

void NodeService::publish(const ProgressEventData& event) {
  switch (event.kind) {
    case EventKind::kStep: spdlog::debug("step {} loss {:.6f}", event.step, event.loss); break;
    case EventKind::kValidation:
      spdlog::info("validation after update {}: loss {:.6f} accuracy {:.4f}", event.step,
                   event.loss, event.accuracy);
      break;
    case EventKind::kFinished: spdlog::info("job finished"); break;
    case EventKind::kFailed: spdlog::error("job failed: {}", event.message); break;
  }
  for (auto& listener : listeners_) {
    auto request = listener.eventRequest();
    auto out = request.initEvent();
    out.setKind(to_schema(event.kind));
    out.setNodeId(metadata_.node_id);
    out.setCluster(metadata_.cluster);
    out.setEpoch(event.epoch);
    out.setStep(event.step);
    out.setLoss(event.loss);
    out.setAccuracy(event.accuracy);
    out.setSamples(event.samples);
    out.setMessage(event.message);
    tasks_.add(request.send().ignoreResult().catch_([](kj::Exception&&) {
      // A requester that went away: the job goes on; `ravnest status` still reports.
    }));
  }
}

void NodeService::defer(std::function<void()> task) { asio::post(compute_, std::move(task)); }

}  // namespace ravnest::runtime
