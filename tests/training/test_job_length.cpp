// job_updates and join_too_late (libs/training/job_length.h): the length of a job of N clusters
// as the roots count it, and the join that lands at or past the grown job's end.
#include <catch2/catch.hpp>

#include "libs/data/batch_order.h"
#include "libs/training/job_length.h"

using namespace ravnest;

namespace {

config::TrainSpec train_of(int64_t epochs, int64_t batch_size) {
  config::TrainSpec t;
  t.epochs = epochs;
  t.batch_size = batch_size;
  return t;
}

}  // namespace

TEST_CASE("job_updates: one cluster reads every sample, N clusters n / N each") {
  const auto t = train_of(3, 32);
  CHECK(training::job_updates(1437, 1, t) == 3 * 45);  // ceil(1437 / 32)
  CHECK(training::job_updates(1437, 2, t) == 3 * 23);  // 718 samples: ceil(718 / 32)
  CHECK(training::job_updates(1437, 3, t) == 3 * 15);  // 479
  auto dropping = t;
  dropping.drop_last = true;
  CHECK(training::job_updates(1437, 2, dropping) == 3 * 22);
  auto capped = t;
  capped.max_steps = 50;
  CHECK(training::job_updates(1437, 1, capped) == 50);
  CHECK(training::job_updates(1437, 2, capped) == 50);
  auto accumulating = t;
  accumulating.update_frequency = 2;
  CHECK(training::job_updates(1437, 2, accumulating) == 35);  // 69 batches, the last alone
  CHECK(training::job_updates(10, 20, t) == 0);               // no sample for a cluster
}

TEST_CASE("job_updates: the batches per epoch are the roots' (data::BatchOrder)") {
  for (int64_t n : {1, 31, 32, 33, 1000, 1437}) {
    for (int clusters : {1, 2, 3, 7}) {
      for (bool drop_last : {false, true}) {
        auto t = train_of(2, 32);
        t.drop_last = drop_last;
        const int64_t part = clusters == 1 ? n : n / clusters;
        const bool no_batch = part == 0 || (drop_last && part < 32);
        INFO("n " << n << ", " << clusters << " clusters, drop_last " << drop_last);
        if (no_batch) {
          CHECK(training::job_updates(n, clusters, t) == 0);
          continue;
        }
        const data::BatchOrder order(part, 32, 5, true, drop_last);
        CHECK(training::job_updates(n, clusters, t) ==
              static_cast<uint64_t>(2 * order.batches_per_epoch()));
      }
    }
  }
}

TEST_CASE("join_too_late: a boundary at or past the grown job's end keeps the cluster out") {
  const auto t = train_of(3, 32);
  // Two clusters grow to three: that job ends after 45 updates.
  CHECK(training::join_too_late(2, 44, 1437, 3, t).empty());
  const std::string late = training::join_too_late(2, 45, 1437, 3, t);
  CHECK(late ==
        "cluster 2 is not taken into this job: it would join after update 45, where a job of 3 "
        "clusters has ended (after update 45); the job goes on as it was, and the next `ravnest "
        "train` has the cluster");
  CHECK(!training::join_too_late(2, 100, 1437, 3, t).empty());
  // One cluster grows to two: 69 updates.
  CHECK(training::join_too_late(1, 68, 1437, 2, t).empty());
  CHECK(!training::join_too_late(1, 69, 1437, 2, t).empty());
}
