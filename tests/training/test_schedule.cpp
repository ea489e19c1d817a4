// The pipeline schedules' pure decisions (libs/training/schedule.h), on plain numbers.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "libs/training/schedule.h"

using namespace ravnest;
using training::RootSchedule;

TEST_CASE("schedule: gpipe, 1f1b and async let micro-batches in", "[schedule]") {
  const RootSchedule gpipe(config::PipelineSchedule::kGPipe, 3);
  CHECK(gpipe.may_inject(3, 0, 4));
  CHECK_FALSE(gpipe.may_inject(4, 0, 4));
  CHECK_FALSE(gpipe.asynchronous());
  const RootSchedule one_f_one_b(config::PipelineSchedule::k1F1B, 3);
  CHECK(one_f_one_b.may_inject(2, 0, 8));
  CHECK_FALSE(one_f_one_b.may_inject(3, 0, 8));
  CHECK(one_f_one_b.may_inject(3, 1, 8));
  const RootSchedule async(config::PipelineSchedule::kAsync, 3);
  CHECK(async.asynchronous());
  CHECK(async.max_in_flight() == 3);  // default: the stages
  CHECK(async.may_inject_async(2));
  CHECK_FALSE(async.may_inject_async(3));
  const RootSchedule async_one(config::PipelineSchedule::kAsync, 3, 1);
  CHECK(async_one.may_inject_async(0));
  CHECK_FALSE(async_one.may_inject_async(1));
}

TEST_CASE("schedule: updates and the validation rounds that follow a batch", "[schedule]") {
  CHECK(training::updates_after(4, 2, false) == 2);
  CHECK(training::updates_after(5, 2, false) == 2);
  CHECK(training::updates_after(5, 2, true) == 3);  // the last, partial accumulation
  CHECK(training::updates_after(7, 1, false) == 7);
  // 10 batches, 4 an epoch, an update a batch, no val_freq: after each epoch's end and the last.
  std::vector<uint64_t> after;
  for (uint64_t step = 0; step < 10; ++step) {
    if (training::validation_follows(step, 10, 4, 1, 0)) after.push_back(step);
  }
  CHECK(after == std::vector<uint64_t>{3, 7, 9});
  // Every 3 updates, an update every 2 batches: updates after batches 2, 4, 6, ...; the third
  // after batch 6 (step 5), the sixth after batch 12 (step 11); and the last.
  after.clear();
  for (uint64_t step = 0; step < 13; ++step) {
    if (training::validation_follows(step, 13, 100, 2, 3)) after.push_back(step);
  }
  CHECK(after == std::vector<uint64_t>{5, 11, 12});
  // As batch_finished decides, for every batch of a few shapes of training.
  for (int update_frequency : {1, 2, 3}) {
    for (int val_freq : {0, 1, 2, 5}) {
      const uint64_t total = 11, per_epoch = 4;
      uint64_t updates = 0;
      for (uint64_t step = 0; step < total; ++step) {
        const bool last = step + 1 == total;
        const bool updated = training::update_due(step + 1, update_frequency, last);
        if (updated) ++updates;
        const bool epoch_ended = (step + 1) % per_epoch == 0;
        const bool expected = (updated && training::validation_due(updates, val_freq, false)) ||
                              (val_freq <= 0 && epoch_ended) || last;
        INFO("update_frequency " << update_frequency << " val_freq " << val_freq << " step " << step);
        CHECK(training::validation_follows(step, total, per_epoch, update_frequency, val_freq) ==
              expected);
      }
    }
  }
}
