// AutocastScope: what `with torch.autocast(device_type, dtype):` does, for the lifetime of the
// object, on the calling thread: ops on that device type run in `dtype` where autocast's lists
// say so (matmuls, convolutions) and in float32 where they say that (losses, softmax). Leaving
// the outermost scope clears autocast's cache of cast weights and restores what was set before,
// as Python's __exit__ does. A disengaged scope (enabled false) changes nothing.
//
// Any thread; no blocking; does not throw (the version differences are in torch_compat.h).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "libs/torch_support/torch_compat.h"

namespace ravnest::torch_support {

class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device, bool enabled, at::ScalarType dtype)
      : device_(device), engaged_(enabled) {
    if (!engaged_) return;
    previous_enabled_ = autocast_enabled(device_);
    previous_dtype_ = autocast_dtype(device_);
    set_autocast(device_, true, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!engaged_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set_autocast(device_, previous_enabled_, previous_dtype_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  bool engaged_;
  bool previous_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kFloat;
};

}  // namespace ravnest::torch_support
