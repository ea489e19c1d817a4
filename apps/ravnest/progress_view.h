// What `ravnest train` prints while it waits: one line per cluster, redrawn in place.
#pragma once

#include <string>
#include <vector>

#include "libs/requester/requester.h"

namespace ravnest::cli {

// "cluster 0 epoch 3 [=====>     ] 120/345 loss 0.1234 val 0.9650 1520 samples/s ETA 0:12"
std::string progress_line(const requester::TrainProgress& progress, int bar_width = 24);

// "1:02:03" / "2:03"
std::string format_duration(double seconds);

}  // namespace ravnest::cli
