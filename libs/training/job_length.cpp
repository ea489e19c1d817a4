#include "libs/training/job_length.h"

#include <algorithm>

#include "libs/training/schedule.h"

namespace ravnest::training {

uint64_t job_updates(int64_t train_samples, int clusters, const config::TrainSpec& train) {
  if (clusters < 1 || train.batch_size < 1 || train_samples < 1) return 0;
  const int64_t part = clusters == 1 ? train_samples : train_samples / clusters;
  const int64_t per_epoch =
      train.drop_last ? part / train.batch_size : (part + train.batch_size - 1) / train.batch_size;
  if (per_epoch <= 0) return 0;
  uint64_t batches = static_cast<uint64_t>(per_epoch) * static_cast<uint64_t>(train.epochs);
  if (train.max_steps) batches = std::min<uint64_t>(batches, static_cast<uint64_t>(*train.max_steps));
  return updates_after(batches, train.update_frequency, true);
}

std::string join_too_late(int cluster, uint64_t boundary, int64_t train_samples,
                          int grown_clusters, const config::TrainSpec& train) {
  const uint64_t end = job_updates(train_samples, grown_clusters, train);
  if (boundary < end) return "";
  return "cluster " + std::to_string(cluster) + " is not taken into this job: it would join " +
         "after update " + std::to_string(boundary) + ", where a job of " +
         std::to_string(grown_clusters) + " clusters has ended (after update " +
         std::to_string(end) + "); the job goes on as it was, and the next `ravnest train` " +
         "has the cluster";
}

}  // namespace ravnest::training
