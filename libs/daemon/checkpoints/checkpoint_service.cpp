#include "libs/daemon/checkpoints/checkpoint_service.h"

#include <filesystem>
#include <map>
#include <vector>

#include <spdlog/spdlog.h>

#include "libs/base/atomic_file.h"
#include "libs/config/plan/checkpoint_keeper.h"
#include "libs/base/sha256.h"
#include "libs/wire/kj_reason.h"
#include "libs/wire/file_stream.h"
#include "libs/wire/tensor_stream.h"
#include "libs/config/plan/node_metadata.h"

namespace ravnest::daemon {

namespace {

bool own_slot(const config::NodeMetadata* self, int cluster, int position) {
  return cluster < 0 || (self && self->cluster == cluster && self->position == position);
}

}  // namespace

CheckpointService::CheckpointService(std::shared_ptr<store::CheckpointStore> store,
                                     wire::PeerLinks& links,
                                     RpcThread& rpc, asio::io_context& compute,
                                     std::function<const config::NodeMetadata*()> metadata,
                                     std::function<bool()> busy)
    : store_(std::move(store)),
      links_(links),
      rpc_(rpc),
      compute_(compute),
      metadata_(std::move(metadata)),
      busy_(std::move(busy)) {}

kj::Promise<void> CheckpointService::checkpoints(CheckpointsCall context) {
  auto params = context.getParams();
  bool finished = false;
  // The files to check, by update, named here (the store is the RPC thread's).
  auto files = std::make_shared<std::map<uint64_t, std::filesystem::path>>();
  std::string identity;
  int slot_cluster = -1, slot_position = -1;
  const auto listed = checked([&] {
    identity = params.getIdentity();
    const int cluster = params.getCluster(), position = params.getPosition();
    const bool own = own_slot(metadata_(), cluster, position);
    if (own) finished = store_->finished(identity);
    auto listed = own ? store_->updates(identity) : store_->kept_updates(identity, cluster, position);
    const config::NodeMetadata* self = metadata_();
    slot_cluster = own ? (self ? self->cluster : -1) : cluster;
    slot_position = own ? (self ? self->position : -1) : position;
    for (uint64_t u : listed) {
      (*files)[u] = own ? store_->file(identity, u) : store_->kept_file(identity, cluster, position, u);
    }
    return listed;
  });
  context.getResults().setFinished(finished);
  auto answer = [context](const std::vector<uint64_t>& updates) mutable {
    auto out = context.getResults().initUpdates(static_cast<unsigned>(updates.size()));
    for (size_t i = 0; i < updates.size(); ++i) out.set(static_cast<unsigned>(i), updates[i]);
  };
  if (!params.getVerify()) {
    answer(listed);
    return kj::READY_NOW;
  }
  // Each file loaded (hashed, and read for its job, slot and update): one intact but of another
  // node, job or update would make the resume refuse it instead of taking the keeper's copy or
  // an older update. A file trimmed meanwhile is not usable.
  auto usable = std::make_shared<std::vector<uint64_t>>();
  return on_compute(compute_, [usable, listed, files, identity, slot_cluster, slot_position] {
           *usable = store::CheckpointStore::usable(
               listed, [&](uint64_t u) { return files->at(u); }, identity, slot_cluster,
               slot_position);
         })
      .then([answer, usable]() mutable { answer(*usable); });
}

kj::Promise<void> CheckpointService::store_checkpoint(StoreCheckpointCall context,
                                                      wire::StreamSlot slot, uint64_t max_bytes) {
  auto params = context.getParams();
  const std::string identity = params.getIdentity();
  const int cluster = params.getCluster(), position = params.getPosition();
  const uint64_t updates = params.getUpdates();
  const config::NodeMetadata* self = metadata_();
  const bool own = self && self->cluster == cluster && self->position == position;
  auto opened = checked([&] {
    wire::check_stream_size(params.getSize(), max_bytes, "storeCheckpoint");
    if (own && busy_()) throw std::runtime_error("busy: a job is running");
    const std::filesystem::path file = own ? store_->file(identity, updates)
                                           : store_->kept_file(identity, cluster, position, updates);
    store_->make_room(file);
    return wire::FileSink::open(file.parent_path(), file.filename().string(), params.getSize(),
                                params.getSha256());
  });
  context.getResults().setSink(kj::mv(opened.sink));
  tasks_.add(opened.completion.attach(kj::mv(slot)).then([this, own, identity, cluster, position,
                                                          updates]() {
    if (own) {
      store_->trim(identity);
      spdlog::info("stored the checkpoint after update {} of job {}", updates, identity);
    } else {
      store_->trim_kept(identity, cluster, position);
      spdlog::debug("keeping the checkpoint after update {} of slot {}/{}", updates, cluster,
                    position);
    }
  }));
  return kj::READY_NOW;
}

kj::Promise<void> CheckpointService::fetch_checkpoint(FetchCheckpointCall context) {
  auto params = context.getParams();
  const auto file = checked([&] {
    const std::string identity = params.getIdentity();
    const int cluster = params.getCluster(), position = params.getPosition();
    const uint64_t updates = params.getUpdates();
    const auto file = own_slot(metadata_(), cluster, position)
                          ? store_->file(identity, updates)
                          : store_->kept_file(identity, cluster, position, updates);
    if (!std::filesystem::is_regular_file(file)) {
      throw std::runtime_error("no checkpoint after update " + std::to_string(updates) +
                               " of that slot here");
    }
    if (!params.hasSink()) {
      throw std::runtime_error("no sink to stream the checkpoint into: fetch with a ravnest of "
                               "this daemon's version");
    }
    return file;
  });
  // Streamed in chunks: a checkpoint (the stage's state several times over) is never held whole.
  return wire::stream_file(params.getSink(), file).then([context](wire::SentFile sent) mutable {
    auto results = context.getResults();
    results.setSize(sent.bytes);
    results.setSha256(sent.sha256);
  });
}

void CheckpointService::checkpoint_written(const config::NodeMetadata& self,
                                           const std::string& identity, uint64_t updates) {
  const auto keeper = config::checkpoint_keeper(self);
  if (!keeper || !rpc_.attached()) return;
  // Hashed, then streamed from the file a chunk at a time: the copy never holds the whole file
  // (a checkpoint is the stage's state several times) in the daemon's memory, nor maps it (a
  // mapping's pages count in the daemon's resident memory as they are read).
  const std::filesystem::path file = store_->file(identity, updates);
  std::string sha;
  uint64_t size = 0;
  try {
    sha = base::sha256_file_hex(file.string());
    size = std::filesystem::file_size(file);
  } catch (const std::exception& e) {
    spdlog::warn("no copy of the checkpoint for {}: {}", config::node_name(keeper->node), e.what());
    return;
  }
  const int cluster = self.cluster, position = self.position;
  try {
    rpc_.call([&]() {
      auto request = links_.node(keeper->address).storeCheckpointRequest();
      request.setIdentity(identity);
      request.setCluster(cluster);
      request.setPosition(position);
      request.setUpdates(updates);
      request.setSize(size);
      request.setSha256(sha);
      auto sink = request.send().getSink();
      const std::string who = config::node_name(keeper->node);
      tasks_.add(wire::stream_file(sink, file)
                     .ignoreResult()
                     .catch_([who, updates](kj::Exception&& e) {
                       spdlog::warn("the copy of the checkpoint after update {} did not reach {}: {}",
                                    updates, who, wire::kj_reason(e));
                     }));
    });
  } catch (const kj::Exception&) {
    // The RPC loop is gone: the daemon is shutting down.
  }
}

}  // namespace ravnest::daemon
