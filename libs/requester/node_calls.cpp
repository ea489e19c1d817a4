// Requester's calls to one node at a time: push a stage, status, fetch stages, checkpoints,
// predictions and losses.
#include <filesystem>

#include "libs/base/atomic_file.h"
#include "libs/base/sha256.h"
#include "libs/config/plan/plan_layout.h"
#include "libs/requester/requester_impl.h"
#include "libs/wire/tensor_stream.h"
#include "libs/wire/transfer_codec.h"

namespace ravnest::requester {

namespace fs = std::filesystem;

void Requester::push(const std::function<void(const std::string&)>& log) {
  const config::PlanLayout layout(impl_->plan_.dir);
  for (const auto& meta : impl_->plan_.nodes) {
    const std::string stage = layout.resolve(meta.stage_file);
    const uint64_t bytes = push_stage(meta, stage, base::read_file(layout.node_file(meta.node_id)));
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
  const std::string sha256 = base::sha256_file_hex(stage_path);
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

void Requester::push_metadata(const std::vector<config::NodeMetadata>& nodes,
                              const std::function<void(const std::string&)>& log,
                              std::map<int, std::string>* failed) {
  const config::PlanLayout layout(impl_->plan_.dir);
  std::vector<std::string> json;
  for (const auto& meta : nodes) json.push_back(config::to_json(meta));
  // The stage each stores already: only the text travels, to 16 nodes at a time.
  const auto refused = impl_->fan_out(
      nodes, "push metadata", [&](size_t i, const config::NodeMetadata& meta) -> kj::Promise<void> {
        auto request = impl_->node(meta).pushMetadataRequest();
        request.setMetadataJson(json[i]);
        return request.send().ignoreResult();
      });
  std::vector<std::string> not_pushed;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto& meta = nodes[i];
    if (refused[i].empty()) {
      if (log) log("pushed the new metadata to " + meta.name);
      continue;
    }
    try {
      // No stage there, another one, or a daemon before pushMetadata: the stage travels too.
      push_stage(meta, layout.resolve(meta.stage_file), json[i]);
      if (log) log("pushed the new metadata to " + meta.name + ", with its stage (" + refused[i] +
                   ")");
    } catch (const Interrupted&) {
      throw;
    } catch (const std::exception& e) {
      not_pushed.push_back(e.what());
      if (failed) (*failed)[meta.node_id] = e.what();
    }
  }
  if (!not_pushed.empty() && !failed) {
    std::string all;
    for (const auto& line : not_pushed) all += (all.empty() ? "" : "; ") + line;
    throw std::runtime_error("the plan was rewritten, but not every node has it (" + all +
                             "); run `ravnest push` once they answer");
  }
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
  const std::string sha256 = base::sha256_file_hex(path);
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

}  // namespace ravnest::requester
