// Seconds on the monotonic clock, for measuring durations (never for dates): the difference of
// two calls is elapsed time, unaffected by changes of the wall clock. And seconds since the Unix
// epoch on the wall clock, for dates (the metrics' wall_time, TensorBoard's events).
// Lives in libs/config because that is the one pure C++ library every other part links; it is
// header-only, so including it adds no link dependency.
#pragma once

#include <chrono>

namespace ravnest::base {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline double seconds_since_epoch() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace ravnest::base
