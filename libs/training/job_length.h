// How long a job runs for a number of clusters, and whether a join comes too late for it
// (docs/faults.md#joining-a-running-job). Pure: the job's [train] and the training set's size.
#pragma once

#include <cstdint>
#include <string>

#include "libs/config/job/job_spec.h"

namespace ravnest::training {

// The updates a job of `clusters` pipeline clusters runs, as each root counts them
// (RootFeeder::start): each cluster reads train_samples / clusters samples (the remainder left
// out; one cluster reads them all), cut into batches of batch_size (the last one partial unless
// drop_last), `epochs` times, at most max_steps batches, and update_frequency batches to an
// update (the last one closing a partial update). 0 when a cluster's part yields no batch.
uint64_t job_updates(int64_t train_samples, int clusters, const config::TrainSpec& train);

// A join at update boundary `boundary` grows the job to `grown_clusters` clusters, whose job
// ends after job_updates(train_samples, grown_clusters) updates. At or past that end the grown
// job would have nothing left to train (every cluster would stop at once at the boundary, short
// of where the running job ends): the cluster is not taken in. Returns why in one line naming
// the cluster ("cluster 2 is not taken into this job: ..."), or "" when it comes in.
std::string join_too_late(int cluster, uint64_t boundary, int64_t train_samples,
                          int grown_clusters, const config::TrainSpec& train);

}  // namespace ravnest::training
