// NodeFiles: the node's files as the requester moves them (pushStage, pushFile, fetchStage,
// fetchLosses, fetchPredictions): each streamed in chunks, never held whole.
//
// RPC thread only; nothing blocks. A stage is refused while a job trains (JobControl), or when
// its measured peak exceeds the daemon's memory budget (MemoryWatch, docs/daemon.md#memory) or
// the card's memory; once stored whole and checked, JobControl rereads its metadata
// (JobControl::stage_stored). Predictions are refused while a job trains.
#pragma once

#include <cstdint>
#include <string>

#include "libs/daemon/job/job_control.h"
#include "libs/daemon/rpc/background_tasks.h"
#include "libs/daemon/rpc/node_calls.h"
#include "libs/store/node_store.h"
#include "libs/wire/stream_limits.h"

namespace ravnest::daemon {

class NodeFiles {
 public:
  // `device`: where the node's stages compute (compute_device.h), whose memory a pushed stage
  // must fit.
  NodeFiles(store::NodeStore& store, JobControl& job, const std::string& device = "cpu")
      : store_(store), job_(job), device_(device) {}

  // The stage streams into a sink (schemas: pushStage); `slot` and `max_bytes` as push_file's.
  kj::Promise<void> push_stage(PushStageCall context, wire::StreamSlot slot, uint64_t max_bytes);
  // New metadata for the stored stage (schemas: pushMetadata); nothing travels but the text.
  kj::Promise<void> push_metadata(PushMetadataCall context);
  // `slot` counts the file's stream against its peer's limit until the file is stored or dropped;
  // a size above `max_bytes` is refused.
  kj::Promise<void> push_file(PushFileCall context, wire::StreamSlot slot, uint64_t max_bytes);
  kj::Promise<void> fetch_stage(FetchStageCall context);
  kj::Promise<void> fetch_losses(FetchLossesCall context);
  kj::Promise<void> fetch_predictions(FetchPredictionsCall context);

 private:
  // Throws (one line) when a stage of `pushed`'s measured peak would not fit the daemon's memory
  // budget or the card's memory.
  void check_fits(const config::NodeMetadata& pushed) const;

  store::NodeStore& store_;
  JobControl& job_;
  const std::string device_;
  BackgroundTasks tasks_;  // last: cancelled before what its tasks use
};

}  // namespace ravnest::daemon
