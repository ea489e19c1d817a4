// What `ravnest train` prints while it waits: on a terminal one line per cluster, redrawn in
// place; else (a pipe, a file) one record per cluster every few seconds.
#pragma once

#include <string>
#include <vector>

#include "libs/requester/requester.h"

namespace ravnest::cli {

// "cluster 0 epoch 3 [=====>     ] 120/345 loss 0.1234 val 0.9650 1520 samples/s ETA 0:12"
std::string progress_line(const requester::TrainProgress& progress, int bar_width = 24);

// The same as one line for a log (stdout not a terminal: no bar, nothing redrawn, the elapsed
// time instead of an ETA): "cluster 0 epoch 3/10 batch 120/345 loss 0.1234 val_loss 0.2100
// val_acc 0.9650 1520 samples/s elapsed 1:02"; "cluster 0 starting" before the root said more.
std::string progress_record(const requester::TrainProgress& progress);

// "1:02:03" / "2:03"
std::string format_duration(double seconds);

}  // namespace ravnest::cli
