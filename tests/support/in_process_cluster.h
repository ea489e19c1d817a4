// InProcessCluster: one cluster of a model cut after chosen units, written by the project's plan
// writer, each node's stage stored as a push stores it and the training set shipped beside it;
// train() runs the job with every node's StageWorker in one LocalPort (local_port.h): the
// daemons' training without sockets.
//
// InProcessPlan: the same for a plan `ravnest clusterize` writes in any mode (parameter servers,
// hybrid): every node's worker, servers and evaluator included, in one LocalPort.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "libs/config/job/job_spec.h"
#include "libs/config/plan/node_metadata.h"
#include "libs/store/node_store.h"
#include "libs/worker/job_setup.h"
#include "libs/worker/pipeline/stage_worker.h"
#include "tests/support/test_env.h"
#include "tests/support/zoo.h"

namespace ravnest::test {

class InProcessCluster {
 public:
  // `cuts` empty: one stage.
  InProcessCluster(const ModelFiles& files, const std::vector<size_t>& cuts);

  const std::vector<config::NodeMetadata>& metadata() const { return metadata_; }
  // Where the plan was written: each node's stage_file is relative to it.
  std::string plan_dir() const;

  // Every stage's trained tensors by state-dict name (a name held by several stages appears once
  // per holder), the leaf's batch losses, the ring rounds reduced, and each node's backward
  // records (with StageWorker::Options::record_versions) and most weight versions kept at once.
  struct Trained {
    std::multimap<std::string, at::Tensor> state;
    std::vector<double> losses;
    std::vector<worker::ProgressEventData> validations;  // the leaf's validation rounds
    size_t rings = 0;
    std::map<int, std::vector<worker::StageWorker::BackwardRecord>> records;
    std::map<int, size_t> most_versions_kept;
  };
  // `tamper` may change a node's setup first.
  Trained train(const config::JobSpec& job,
                const std::function<void(worker::JobSetup&)>& tamper = {});

 private:
  TempDir dir_;
  std::vector<std::unique_ptr<store::NodeStore>> stores_;
  std::vector<config::NodeMetadata> metadata_;
};

class InProcessPlan {
 public:
  // A pool of `nodes` alike loopback nodes (ids 0..nodes-1); `clusterize` writes the plan: it
  // gets the pool file and the plan directory to fill in (graph::ClusterizeOptions' nodes_path
  // and out_dir).
  InProcessPlan(int nodes,
                const std::function<void(const std::string& pool_file,
                                         const std::string& plan_dir)>& clusterize);

  const std::vector<config::NodeMetadata>& metadata() const { return metadata_; }

  // Each node's trained stage as it saved it (NodeStore::trained_path), by state-dict name
  // (empty tensors, a hybrid trainer's table placeholders, left out), and every event.
  struct Trained {
    std::map<int, std::map<std::string, at::Tensor>> stages;
    std::vector<worker::ProgressEventData> events;
  };
  Trained train(const config::JobSpec& job);

 private:
  TempDir dir_;
  std::vector<std::unique_ptr<store::NodeStore>> stores_;
  std::vector<config::NodeMetadata> metadata_;
};

}  // namespace ravnest::test
