// LineBudget: how many log lines a source of refusals may write, so that abuse cannot flood the
// log: a burst, then a steady rate; the lines left out are counted, for the next line written to
// say how many. Plain data, no clock of its own (the caller passes steady seconds); one thread.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ravnest::wire {

class LineBudget {
 public:
  LineBudget(double burst, double per_second)
      : burst_(burst), per_second_(per_second), budget_(burst) {}

  // True when a line may be written at `now`; else the line is counted as left out.
  bool take(double now) {
    budget_ = std::min(burst_, budget_ + (now - at_) * per_second_);
    at_ = now;
    if (budget_ < 1) {
      ++left_out_;
      return false;
    }
    budget_ -= 1;
    return true;
  }
  // The lines left out since this was last asked; 0 afterwards.
  uint64_t left_out() {
    const uint64_t n = left_out_;
    left_out_ = 0;
    return n;
  }
  double per_second() const { return per_second_; }

 private:
  double burst_;
  double per_second_;
  double budget_;
  double at_ = 0;  // steady seconds when budget_ was last topped up
  uint64_t left_out_ = 0;
};

}  // namespace ravnest::wire
